package mcpschema

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// FuzzDigest: a server's schemas are hostile input. The digest never
// panics, is the same for the same JSON however it is spaced, refuses
// what is not one JSON value, and tells apart the description and the two
// schemas (a value moved from one to another changes it).
func FuzzDigest(f *testing.F) {
	for _, seed := range [][3]string{
		{"Echo a message.", `{"type":"object","properties":{"message":{"type":"string"}},"required":["message"]}`, ``},
		{"", `{"b":1,"a":[1.0,1e3,-0,"\u00e9"]}`, `{"type":"object"}`},
		{"x", `{"a":1}{"b":2}`, `null`},
		{"", `12345678901234567890123456789`, `"\ud800"`},
		{"\xff", `{"a":"\xff"}`, `[`},
	} {
		f.Add(seed[0], seed[1], seed[2])
	}
	f.Fuzz(func(t *testing.T, description, input, output string) {
		d, err := Digest(description, []byte(input), []byte(output))
		if err != nil {
			if d != "" {
				t.Fatal("a digest with an error")
			}
			return
		}
		if !strings.HasPrefix(d, Prefix) || len(d) != len(Prefix)+64 {
			t.Fatalf("digest %q", d)
		}
		if again, _ := Digest(description, []byte(input), []byte(output)); again != d {
			t.Fatal("not deterministic")
		}
		spaced := func(s string) []byte {
			if strings.TrimSpace(s) == "" {
				return nil
			}
			var b bytes.Buffer
			if err := json.Indent(&b, []byte(s), " ", "\t"); err != nil {
				t.Fatalf("valid for the digest, not for json.Indent: %q: %v", s, err)
			}
			return b.Bytes()
		}
		if other, err := Digest(description, spaced(input), spaced(output)); err != nil || other != d {
			t.Fatalf("spacing changed the digest: %v", err)
		}
		if strings.TrimSpace(input) != strings.TrimSpace(output) {
			if swapped, err := Digest(description, []byte(output), []byte(input)); err == nil && swapped == d {
				t.Fatal("the input and output schemas swapped keep the digest")
			}
		}
		if other, err := Digest(description+"!", []byte(input), []byte(output)); err != nil || other == d {
			t.Fatal("a changed description keeps the digest")
		}
	})
}

// TestDigestIsStable: the digest is a compatibility contract with every
// pin written in Git. The known answer is the SHA-256 of the canonical
// document, computed apart from this code:
// {"description":"Echo a message.","inputSchema":{"required":["message"],"type":"object"},"outputSchema":null}
func TestDigestIsStable(t *testing.T) {
	d, err := Digest("Echo a message.", []byte(`{ "type": "object",
		"required": ["message"] }`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := "sha256:0d17256de957a7ad6c42a65068d99419cc32ec159c9453daab6dd6c059cd9a19"; d != want {
		t.Fatalf("digest %s, want %s", d, want)
	}
}

// TestDigestRefusesAmbiguousJSON: texts that decode alike are refused,
// never digested alike: bytes that are not UTF-8, an unpaired surrogate,
// U+FFFD itself (either could hide behind it), and a key given twice
// (the last would win). Paired surrogates are one character, accepted.
func TestDigestRefusesAmbiguousJSON(t *testing.T) {
	for _, schema := range []string{
		`{"pattern":"\xff"}`, `{"pattern":"\ud800"}`, `{"pattern":"\udc00x"}`, `{"pattern":"\ufffd"}`, "{\"pattern\":\"\uFFFD\"}",
		`{"pattern":"a","pattern":"b"}`, `{"properties":{"x":{"const":1,"const":2}}}`, `[{"a":1,"a":1}]`,
	} {
		if d, err := Digest("", []byte(schema), nil); err == nil {
			t.Errorf("%q digested: %s", schema, d)
		}
	}
	for _, schema := range []string{`{"pattern":"\ud83d\ude00"}`, `{"a":{"a":1},"b":[{"a":1},{"a":2}]}`, `{"a":[],"b":{}}`} {
		if _, err := Digest("", []byte(schema), nil); err != nil {
			t.Errorf("%q refused: %v", schema, err)
		}
	}
}
