package textutil

import (
	"regexp"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

func TestTruncateNeverSplitsACharacter(t *testing.T) {
	for _, tt := range []struct {
		in   string
		n    int
		want string
	}{
		{"hello", 10, "hello"},
		{"hello", 3, "hel"},
		{"héllo", 2, "h"}, // é is two bytes: cutting inside it drops it
		{"héllo", 3, "hé"},
		{"日本語", 4, "日"},
		{"abc", 0, ""},
	} {
		got := Truncate(tt.in, tt.n)
		if got != tt.want || !utf8.ValidString(got) {
			t.Errorf("Truncate(%q, %d) = %q, want %q", tt.in, tt.n, got, tt.want)
		}
	}
	if got := TruncateMarked("日本語日本語", 10, "…"); got != "日本…" || len(got) > 10 {
		t.Errorf("TruncateMarked: %q", got)
	}
	if got := Tail("  xx日本語 \n", 7); got != "…本語" {
		t.Errorf("Tail: %q", got)
	}
}

// TestLabelValue: the result is always a valid label value (the API
// server's own pattern), however the input ends.
func TestLabelValue(t *testing.T) {
	valid := regexp.MustCompile(`^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$`)
	for _, in := range []string{
		"call-1",
		"a-very-long-name-that-is-cut-exactly-where-a-dash-sits-at-byte-63-x-y",
		"name.with.dots.that.is.long.enough.to.be.cut.right.after.a.dot.x",
		"-leading-and-trailing-",
		"unicode-日本",
		"",
	} {
		got := LabelValue(in)
		if len(got) > 63 || !valid.MatchString(got) {
			t.Errorf("LabelValue(%q) = %q: not a valid label value", in, got)
		}
	}
	if got := LabelValue("call-1"); got != "call-1" {
		t.Errorf("a valid value changed: %q", got)
	}
}

// FuzzTerminalWriter: whatever bytes an agent or a tool wrote, and however
// they are cut into writes, what reaches the terminal is valid UTF-8 with
// no control character but newline and tab and nothing that reorders text,
// and the same as when written at once.
func FuzzTerminalWriter(f *testing.F) {
	for _, s := range []string{
		"plain", "\x1b[2J\x1b[H", "\x1b]52;c;ZXZpbA==\x07", "\u009b31m", "\xc2\x9b31m", "a\u202eb", "\xff\xfe",
		"tab\tline\nreturn\r", "é€𝄞", "\x00\x7f",
	} {
		f.Add([]byte(s), uint8(1))
	}
	f.Fuzz(func(t *testing.T, b []byte, cut uint8) {
		var whole, parts strings.Builder
		if _, err := NewTerminalWriter(&whole).Write(b); err != nil {
			t.Fatal(err)
		}
		w := NewTerminalWriter(&parts)
		step := int(cut%7) + 1
		for i := 0; i < len(b); i += step {
			if _, err := w.Write(b[i:min(i+step, len(b))]); err != nil {
				t.Fatal(err)
			}
		}
		_, _ = w.Write(nil)
		out := whole.String()
		if !utf8.ValidString(out) {
			t.Fatalf("invalid UTF-8 out of %q: %q", b, out)
		}
		for _, r := range out {
			if r != '\n' && r != '\t' && (unicode.IsControl(r) || reorders(r)) {
				t.Fatalf("%U reaches the terminal out of %q: %q", r, b, out)
			}
		}
		if utf8.Valid(b) && parts.String() != out {
			t.Fatalf("written in parts of %d: %q, at once: %q", step, parts.String(), out)
		}
	})
}
