package mcpschema

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
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
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	// Anything but JSON's space after the value is refused (Decoder.More
	// says nothing of a stray '}' or ']', and a form feed is space to
	// bytes.TrimSpace, not to JSON: the fuzzer found both passing).
	if len(bytes.Trim(raw[d.InputOffset():], jsonSpace)) > 0 {
		return nil, errors.New("more than one JSON value, or text after it")
	}
	return json.Marshal(v)
}
