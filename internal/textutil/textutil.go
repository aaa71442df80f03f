package textutil

import (
	"strings"
	"unicode/utf8"
)

// Truncate returns the longest prefix of s of at most n bytes that does not
// split a UTF-8 character.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	if n <= 0 {
		return ""
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

// TruncateMarked cuts s to at most n bytes, ending in mark when it was cut,
// so a reader knows the text is incomplete.
func TruncateMarked(s string, n int, mark string) string {
	if len(s) <= n {
		return s
	}
	return Truncate(s, n-len(mark)) + mark
}

// Tail returns the last bytes of s (at most n, without splitting a
// character), trimmed, prefixed with "…" when it was cut.
func Tail(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) <= n {
		return s
	}
	start := len(s) - n
	for start < len(s) && !utf8.RuneStart(s[start]) {
		start++
	}
	return "…" + s[start:]
}

// OneLine replaces line breaks with spaces and cuts s to n bytes.
func OneLine(s string, n int) string {
	return Truncate(strings.ReplaceAll(s, "\n", " "), n)
}

// LabelValue makes s a valid label value: at most 63 bytes of [A-Za-z0-9-_.],
// beginning and ending with an alphanumeric character (other characters are
// replaced by '_', which is then trimmed from the ends).
func LabelValue(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !isAlnum(c) && c != '-' && c != '_' && c != '.' {
			b[i] = '_'
		}
	}
	if len(b) > 63 {
		b = b[:63]
	}
	return strings.TrimFunc(string(b), func(r rune) bool { return r < utf8.RuneSelf && !isAlnum(byte(r)) })
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// Text is s with every invalid UTF-8 byte replaced by U+FFFD, as a JSON
// encoder would write it: text stored in a result says so itself.
func Text(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }
