package pipeline

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
)

func TestParseJSONKeepsNumbersExact(t *testing.T) {
	in := `{"big":123456789012345678901234567890,"f":1.10,"e":1e400,"neg":-5,"s":"caf\u00e9 \"q\"","a":[true,false,null,{}]}`
	v, err := ParseJSON(in)
	if err != nil {
		t.Fatal(err)
	}
	m := v.(map[string]any)
	for key, want := range map[string]string{"big": "123456789012345678901234567890", "f": "1.10", "e": "1e400", "neg": "-5"} {
		if got := m[key].(json.Number); string(got) != want {
			t.Errorf("%s = %s, want %s", key, got, want)
		}
	}
	if m["s"] != `café "q"` {
		t.Errorf("s = %q", m["s"])
	}
	out, err := CanonicalJSON(v)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"a":[true,false,null,{}],"big":123456789012345678901234567890,"e":1e400,"f":1.10,"neg":-5,"s":"café \"q\""}`
	if out != want {
		t.Errorf("canonical =\n%s\nwant\n%s", out, want)
	}
}

func TestParseJSONRefusesAmbiguousInput(t *testing.T) {
	for name, in := range map[string]string{
		"duplicate key":      `{"a":1,"a":2}`,
		"negative zero":      `-0`,
		"negative zero.0":    `{"x":-0.0}`,
		"negative zero exp":  `[-0e10]`,
		"trailing data":      `{} {}`,
		"leading zero":       `012`,
		"bare fraction":      `1.`,
		"invalid utf8":       "\"\xff\"",
		"control char":       "\"a\nb\"",
		"unterminated":       `{"a":`,
		"empty":              ``,
		"single quotes":      `{'a':1}`,
		"NaN":                `NaN`,
		"lone surrogate":     `"\ud800"`,
		"lone low surrogate": `"\udc00x"`,
		"bad escape":         `"\q"`,
		"deep":               strings.Repeat("[", maxDepth+2) + strings.Repeat("]", maxDepth+2),
	} {
		if _, err := ParseJSON(in); err == nil {
			t.Errorf("%s: ParseJSON(%q) accepted", name, in)
		}
	}
	if v, err := ParseJSON(`"\ud83d\ude00 \u00e9\n\/"`); err != nil || v != "😀 é\n/" {
		t.Errorf("escapes: %q %v", v, err)
	}
	if _, err := ParseJSON(`-0.5`); err != nil {
		t.Errorf("-0.5 refused: %v", err)
	}
}

func TestToLossless(t *testing.T) {
	if _, err := toLossless(math.NaN()); err == nil {
		t.Error("NaN accepted")
	}
	if _, err := toLossless(math.Copysign(0, -1)); !errors.Is(err, errNegZero) {
		t.Errorf("-0 = %v, want errNegZero", err)
	}
	v, err := toLossless(struct {
		N int64 `json:"n"`
	}{N: math.MaxInt64})
	if err != nil {
		t.Fatal(err)
	}
	if got := v.(map[string]any)["n"].(json.Number); got != "9223372036854775807" {
		t.Errorf("n = %s", got)
	}
}

// FuzzParseJSON checks the parser against encoding/json: whatever it accepts
// encoding/json accepts too, and the canonical text parses back to the same
// canonical text (a lossless round trip).
func FuzzParseJSON(f *testing.F) {
	for _, seed := range []string{`{"a":[1,2.5,"x"]}`, `123456789012345678901234567890`, `"\ud83d\ude00"`, `{"a":{"b":null}}`, `-0`, `[1e5,-1E-5]`} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, in string) {
		v, err := ParseJSON(in)
		if err != nil {
			return
		}
		if !json.Valid([]byte(in)) {
			t.Fatalf("accepted invalid JSON %q", in)
		}
		c1, err := CanonicalJSON(v)
		if err != nil {
			t.Fatalf("canonical of accepted value: %v", err)
		}
		v2, err := ParseJSON(c1)
		if err != nil {
			t.Fatalf("canonical text %q does not parse: %v", c1, err)
		}
		c2, err := CanonicalJSON(v2)
		if err != nil || c2 != c1 {
			t.Fatalf("round trip changed %q to %q (%v)", c1, c2, err)
		}
	})
}

// TestNumberExponentsAreBounded: a number's exponent is what every reader
// expands it to (a schema's keywords hold it as a rational: 1e1000000 is a
// million digits), so 2 KB of such numbers once took 10 s to admit as
// arguments and 17 s to validate as output. An exponent beyond ±1000 is
// refused at once, naming the bound; every number a float64 or a decimal
// reader holds passes.
func TestNumberExponentsAreBounded(t *testing.T) {
	for _, ok := range []string{`1e308`, `-1.5E-1000`, `1e+1000`, `1e0001000`, `123456789012345678901234567890e-999`} {
		if _, err := ParseJSON(`{"n":` + ok + `}`); err != nil {
			t.Errorf("%s refused: %v", ok, err)
		}
	}
	for _, refused := range []string{`1e1001`, `1e-1001`, `1E1000000`, `[` + strings.TrimSuffix(strings.Repeat(`1e1000000,`, 200), ",") + `]`} {
		_, err := ParseJSON(refused)
		if err == nil || !strings.Contains(err.Error(), "exponent is beyond ±1000") {
			t.Errorf("%.40s: %v", refused, err)
		}
	}
}
