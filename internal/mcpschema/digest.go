package mcpschema

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// Prefix starts every digest.
const Prefix = "sha256:"

// Digest is the digest of a tool's description and its input and output
// schemas (nil or empty: none), each in canonical JSON (object keys
// sorted, numbers as written, no insignificant space): a server that lists
// the same tool again gets the same digest however it spaces or orders its
// JSON. A tool's title and annotations are hints, never what a call is
// checked against, and are not covered.
func Digest(description string, input, output []byte) (string, error) {
	in, err := canonical(input)
	if err != nil {
		return "", fmt.Errorf("input schema: %w", err)
	}
	out, err := canonical(output)
	if err != nil {
		return "", fmt.Errorf("output schema: %w", err)
	}
	doc, err := json.Marshal(struct {
		Description  string          `json:"description"`
		InputSchema  json.RawMessage `json:"inputSchema"`
		OutputSchema json.RawMessage `json:"outputSchema"`
	}{description, in, out})
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(doc)
	return Prefix + hex.EncodeToString(sum[:]), nil
}

// jsonSpace is JSON's insignificant whitespace (RFC 8259).
const jsonSpace = " \t\r\n"

// canonical is raw re-encoded with sorted keys and numbers kept as
// written; "null" for nothing.
func canonical(raw []byte) (json.RawMessage, error) {
	if len(bytes.Trim(raw, jsonSpace)) == 0 {
		return json.RawMessage("null"), nil
	}
	// Two different texts must never share a canonical form: bytes that
	// are not UTF-8 and unpaired surrogates both decode to U+FFFD, and of
	// a key given twice the last wins; each is refused.
	if !utf8.Valid(raw) {
		return nil, errors.New("not UTF-8")
	}
	if err := uniqueKeys(raw); err != nil {
		return nil, err
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	if replaced(v) {
		return nil, errors.New("a string holds U+FFFD or an unpaired surrogate, which the canonical form cannot tell apart")
	}
	// Anything but JSON's space after the value is refused (Decoder.More
	// says nothing of a stray '}' or ']', and a form feed is space to
	// bytes.TrimSpace, not to JSON: the fuzzer found both passing).
	if len(bytes.Trim(raw[d.InputOffset():], jsonSpace)) > 0 {
		return nil, errors.New("more than one JSON value, or text after it")
	}
	return json.Marshal(v)
}

// uniqueKeys refuses an object that gives a key twice, at any depth.
func uniqueKeys(raw []byte) error {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	type frame struct {
		keys   map[string]bool
		object bool
		key    bool // the next string token is a key
	}
	var stack []*frame
	for {
		tok, err := d.Token()
		if err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{', '[':
				if top != nil && top.object {
					top.key = true // the container is a value; a key comes next
				}
				stack = append(stack, &frame{keys: map[string]bool{}, object: t == '{', key: t == '{'})
			default:
				stack = stack[:len(stack)-1]
			}
			continue
		case string:
			if top != nil && top.object && top.key {
				if top.keys[t] {
					return fmt.Errorf("the key %q is given twice", t)
				}
				top.keys[t] = true
				top.key = false
				continue
			}
		}
		if top != nil && top.object {
			top.key = true // a value: a key comes next
		}
	}
}

// replaced reports whether a string of v (a key or a value) holds U+FFFD.
func replaced(v any) bool {
	switch t := v.(type) {
	case string:
		return strings.ContainsRune(t, utf8.RuneError)
	case []any:
		for _, e := range t {
			if replaced(e) {
				return true
			}
		}
	case map[string]any:
		for k, e := range t {
			if strings.ContainsRune(k, utf8.RuneError) || replaced(e) {
				return true
			}
		}
	}
	return false
}
