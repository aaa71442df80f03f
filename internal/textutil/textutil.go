package textutil

import (
	"fmt"
	"io"
	"strings"
	"unicode"
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

// Terminal is s made safe to print on a terminal: invalid UTF-8 replaced,
// and every control character but newline and tab, and every character
// that reorders text (bidirectional overrides and isolates), written as a
// visible escape (\u001b), so text an agent or a tool wrote cannot move
// the cursor, rewrite the screen, set the clipboard or hide what follows.
func Terminal(s string) string {
	var b strings.Builder
	for _, r := range Text(s) {
		if r != '\n' && r != '\t' && (unicode.IsControl(r) || reorders(r)) {
			fmt.Fprintf(&b, "\\u%04x", r)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// reorders reports whether r changes the order text is shown in.
func reorders(r rune) bool {
	return r >= 0x202a && r <= 0x202e || r >= 0x2066 && r <= 0x2069 || r == 0x200e || r == 0x200f || r == 0x061c
}

// TerminalWriter writes to w what it is given made safe for a terminal
// (Terminal), whole characters at a time: a character split between two
// writes is held until its rest arrives.
type TerminalWriter struct {
	w    io.Writer
	held []byte
}

// NewTerminalWriter returns a TerminalWriter writing to w.
func NewTerminalWriter(w io.Writer) *TerminalWriter { return &TerminalWriter{w: w} }

// Write writes p made safe, and reports all of p written (or the error).
func (t *TerminalWriter) Write(p []byte) (int, error) {
	b := append(t.held, p...)
	t.held = nil
	// Hold a character still incomplete at the end (at most 3 bytes).
	for i := len(b) - 1; i >= 0 && i >= len(b)-3; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				t.held = append([]byte(nil), b[i:]...)
				b = b[:i]
			}
			break
		}
	}
	if _, err := io.WriteString(t.w, Terminal(string(b))); err != nil {
		return 0, err
	}
	return len(p), nil
}
