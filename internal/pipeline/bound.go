package pipeline

import (
	"slices"
	"unicode/utf8"

	"github.com/toolgate/toolgate/internal/textutil"
)

// A result must fit one status write, as the API server stores it: JSON
// text, where every string is escaped. The bounds are on that encoded form
// (encodedLen), never on the raw bytes, so no output a tool returns (quotes,
// backslashes, control characters, invalid bytes) can make the write too
// large: the value is bounded (output_too_large); the content, which is
// presentation, is cut to what is left, with a marker and the cut flag; a
// result holds at most MaxContexts contexts of at most MaxContextBytes
// each, as stored.
const (
	// MaxValueBytes bounds the value as stored: its canonical JSON text,
	// escaped in a JSON string.
	MaxValueBytes = 768 << 10
	// MaxResultBytes bounds value, content and contexts together, as
	// stored.
	MaxResultBytes = 1 << 20
	// MaxContexts is how many contexts a result (and a body, and the
	// post-execute rules together) holds, as the API allows; the pod
	// runner defers at most as many.
	MaxContexts = 16
	// MaxContextBytes bounds one context's message, as the runner does.
	MaxContextBytes = 4096
)

// cutMarker ends content that was cut.
const cutMarker = "…[truncated]"

// encodedLen is how many bytes s takes inside a JSON string as Go's
// encoding/json writes it (the API server's and its clients'). It never
// undercounts.
func encodedLen(s string) int {
	n := 0
	for i := 0; i < len(s); {
		w, size := encodedRune(s[i:])
		n, i = n+w, i+size
	}
	return n
}

// encodedRune is what the first character of s takes encoded, and its
// length in s: a quote or backslash two bytes; a control character, <, >,
// &, U+2028, U+2029 or an invalid byte (written as U+FFFD) six; any other
// character its own bytes.
func encodedRune(s string) (encoded, size int) {
	if b := s[0]; b < utf8.RuneSelf {
		switch {
		case b == '"' || b == '\\':
			return 2, 1
		case b < 0x20 || b == '<' || b == '>' || b == '&':
			return 6, 1
		}
		return 1, 1
	}
	r, size := utf8.DecodeRuneInString(s)
	if (r == utf8.RuneError && size == 1) || r == '\u2028' || r == '\u2029' {
		return 6, size
	}
	return size, size
}

// cutEncoded cuts s, at a character boundary, so that it and the marker
// take at most limit bytes encoded; it reports whether it cut.
func cutEncoded(s string, limit int) (string, bool) {
	if encodedLen(s) <= limit {
		return s, false
	}
	budget := limit - encodedLen(cutMarker)
	n, i := 0, 0
	for i < len(s) {
		w, size := encodedRune(s[i:])
		if n+w > budget {
			break
		}
		n, i = n+w, i+size
	}
	return s[:i] + cutMarker, true
}

// boundContent cuts content so that value, contexts and content together
// fit MaxResultBytes as stored; it reports whether it cut. Content is text:
// an invalid byte becomes U+FFFD here, as it would when stored.
func boundContent(value, content string, contexts []Context) (string, bool) {
	content = textutil.Text(content)
	used := encodedLen(value)
	for _, c := range contexts {
		used += encodedLen(c.Source) + encodedLen(c.Rule) + encodedLen(c.Message)
	}
	// Value and contexts take at most MaxValueBytes + MaxContexts *
	// (MaxContextBytes + their names): there is always room left.
	return cutEncoded(content, MaxResultBytes-used)
}

// boundContexts is the contexts a result holds, tool's (in order) before
// rules' (in order), at most MaxContexts, each message at most
// MaxContextBytes and none empty (a call's result holds no empty context,
// whoever made it): the rules' have room first, so that a tool cannot push
// a policy's message out by deferring many of its own. It reports whether
// anything was cut.
func boundContexts(tool, rules []Context) ([]Context, bool) {
	cut := false
	tool, rules = nonEmpty(tool), nonEmpty(rules)
	if len(rules) > MaxContexts {
		rules, cut = rules[:MaxContexts], true
	}
	if room := MaxContexts - len(rules); len(tool) > room {
		tool, cut = tool[:room], true
	}
	if len(tool)+len(rules) == 0 {
		return nil, cut
	}
	out := make([]Context, 0, len(tool)+len(rules))
	for _, c := range append(append([]Context(nil), tool...), rules...) {
		// Bounded as stored, and text: an invalid byte becomes U+FFFD.
		var over bool
		c.Message, over = cutEncoded(textutil.Text(c.Message), MaxContextBytes)
		c.Source, c.Rule = textutil.Truncate(textutil.Text(c.Source), 253), textutil.Truncate(textutil.Text(c.Rule), 253)
		cut = cut || over
		out = append(out, c)
	}
	return out, cut
}

// nonEmpty drops the contexts whose message is empty.
func nonEmpty(in []Context) []Context {
	if !slices.ContainsFunc(in, func(c Context) bool { return c.Message == "" }) {
		return in
	}
	return slices.DeleteFunc(slices.Clone(in), func(c Context) bool { return c.Message == "" })
}
