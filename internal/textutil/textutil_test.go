package textutil

import (
	"regexp"
	"testing"
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
