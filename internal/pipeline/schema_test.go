package pipeline

import (
	"strings"
	"testing"
)

// TestSchemaMessagesNameTheField checks a refused argument says which field
// failed and how, at its path, without quoting the value.
func TestSchemaMessagesNameTheField(t *testing.T) {
	schema := `{"type":"object","required":["path","mode"],"additionalProperties":false,
		"properties":{"path":{"type":"string","minLength":2,"pattern":"^[a-z]+$"},"mode":{"enum":["r","w"]},
		"tags":{"type":"array","maxItems":1,"items":{"type":"string"}},"nested":{"type":"object","required":["id"]}}}`
	s, err := CompileSchema(schema)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ args, want, hidden string }{
		{`{"mode":"r"}`, `at /: missing required field "path"`, ""},
		{`{}`, `at /: missing required fields "path", "mode"`, ""},
		{`{"path":"ab","mode":"r","PATH":".env"}`, `at /: unexpected field "PATH" (the schema allows no other fields)`, ""},
		{`{"path":7,"mode":"r"}`, `at /path: is number, the schema wants string`, ""},
		{`{"path":"a","mode":"r"}`, `at /path: is 1 characters long, at least 2 wanted`, ""},
		{`{"path":"AB-secret","mode":"r"}`, `at /path: fails pattern`, "secret"},
		{`{"path":"ab","mode":"x-secret"}`, `at /mode: fails enum`, "secret"},
		{`{"path":"ab","mode":"r","tags":["a","b"]}`, `at /tags: has 2 items, at most 1 allowed`, ""},
		{`{"path":"ab","mode":"r","nested":{}}`, `at /nested: missing required field "id"`, ""},
	} {
		doc, err := ParseJSON(c.args)
		if err != nil {
			t.Fatal(err)
		}
		err = s.Validate(doc)
		if err == nil {
			t.Errorf("%s: valid", c.args)
			continue
		}
		got := schemaMessage(err)
		if got != c.want {
			t.Errorf("%s: %q, want %q", c.args, got, c.want)
		}
		if c.hidden != "" && strings.Contains(got, c.hidden) {
			t.Errorf("%s: the message %q quotes the value", c.args, got)
		}
	}
}

// FuzzSchemaMessage checks, for any arguments, that the message of a
// refusal is one bounded line that never carries a string value the
// arguments hold (only field names, types and sizes).
func FuzzSchemaMessage(f *testing.F) {
	s, err := CompileSchema(`{"type":"object","required":["path"],"additionalProperties":false,
		"properties":{"path":{"type":"string","pattern":"^[a-z]+$","maxLength":8},"n":{"type":"integer","minimum":0},"mode":{"const":"r"}}}`)
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range []string{`{}`, `{"path":"VALUEVALUE"}`, `{"path":"ab","n":-12345}`, `{"path":"ab","mode":"VALUEVALUE"}`, `{"path":"ab","x\n\"y":1}`, `[1]`} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, args string) {
		doc, err := ParseJSON(args)
		if err != nil {
			return
		}
		verr := s.Validate(doc)
		if verr == nil {
			return
		}
		msg := schemaMessage(verr)
		if strings.ContainsAny(msg, "\n\r") || len(msg) > 600 {
			t.Fatalf("message %q is not one bounded line", msg)
		}
		keys := strings.Join(keysOf(doc), "\x00")
		for _, v := range stringValues(doc) {
			// A value that is also a key may be named as a key.
			if len(v) >= 6 && strings.Contains(msg, v) && !strings.Contains(keys, v) {
				t.Fatalf("message %q carries the value %q", msg, v)
			}
		}
	})
}

// stringValues are the string values of a JSON document (not its keys).
func stringValues(doc any) []string {
	switch d := doc.(type) {
	case string:
		return []string{d}
	case []any:
		var out []string
		for _, v := range d {
			out = append(out, stringValues(v)...)
		}
		return out
	case map[string]any:
		var out []string
		for _, v := range d {
			out = append(out, stringValues(v)...)
		}
		return out
	}
	return nil
}

// keysOf are the object keys of a JSON document, at any depth.
func keysOf(doc any) []string {
	var out []string
	switch d := doc.(type) {
	case []any:
		for _, v := range d {
			out = append(out, keysOf(v)...)
		}
	case map[string]any:
		for k, v := range d {
			out = append(out, k)
			out = append(out, keysOf(v)...)
		}
	}
	return out
}
