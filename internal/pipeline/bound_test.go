package pipeline

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestResultFitsOneStatusWrite: a value too large for a result fails with a
// stable code; content is cut to what is left, flagged, never silent.
func TestResultFitsOneStatusWrite(t *testing.T) {
	h := newHarness(t)
	h.allowAll()
	body := func(n int) func(context.Context, Arguments, *Exec) (any, error) {
		return func(context.Context, Arguments, *Exec) (any, error) { return strings.Repeat("x", n), nil }
	}
	must(t, h.reg.Register(h.scope, Definition{
		Name: "huge", Parameters: `{"type":"object"}`, Output: Output{Schema: `{"type":"string"}`}, Execute: body(1 << 20),
	}))
	must(t, h.reg.Register(h.scope, Definition{
		Name: "verbose", Parameters: `{"type":"object"}`, Execute: body(600 << 10),
		Output: Output{Schema: `{"type":"string"}`, Render: func(_ Arguments, v any) (string, error) {
			return strings.Repeat("y", 600<<10), nil
		}},
	}))
	p := h.pipeline(Options{})
	if res := p.Run(context.Background(), req("huge", `{}`)); res.Code != CodeOutputTooLarge || res.Value != "" || len(res.Content) > 4096 {
		t.Errorf("a 1 MiB value: %s %q (%d bytes of value, %d of content)", res.Code, res.Message, len(res.Value), len(res.Content))
	}
	res := p.Run(context.Background(), req("verbose", `{}`))
	if res.Outcome != Succeeded || len(res.Value) != 600<<10+2 || !res.Truncated || !strings.HasSuffix(res.Content, "…[truncated]") {
		t.Errorf("a 600 KiB value with 600 KiB of content: %s truncated %v, %d bytes of value, %d of content", res.Outcome, res.Truncated, len(res.Value), len(res.Content))
	}
	if total := len(res.Value) + len(res.Content); total > MaxResultBytes {
		t.Errorf("value and content take %d bytes, over %d", total, MaxResultBytes)
	}
}

// encoded is what s takes as a JSON string (quotes excluded), as the API
// server stores it.
func encoded(s string) int {
	b, _ := json.Marshal(s)
	return len(b) - 2
}

// TestResultBoundOnItsEncodedForm: the bound holds on what the API server
// stores, JSON text, where a quote, a backslash, a control character or an
// invalid byte takes more room than in the string: an output of 393,000
// quotes, within the byte bounds, once wedged its call's status write for
// good. Contexts count too: a tool that defers 16 and a rule that attaches
// one still fit a result's 16, the rule's kept.
func TestResultBoundOnItsEncodedForm(t *testing.T) {
	h := newHarness(t)
	h.allowAll()
	text := func(content string) Output {
		return Output{Schema: `{"type":"object"}`, Render: func(Arguments, any) (string, error) { return content, nil }}
	}
	small := func(context.Context, Arguments, *Exec) (any, error) { return map[string]any{"ok": true}, nil }
	hostile := map[string]string{
		"quotes":      strings.Repeat(`"`, 600000),
		"backslashes": strings.Repeat(`\`, 700000),
		"controls":    strings.Repeat("\x01", 300000),
		"html":        strings.Repeat("<&>", 120000),
		"invalid":     strings.Repeat("\xffa", 400000),
		"four-byte":   strings.Repeat("𝄞\"", 200000),
	}
	for name, content := range hostile {
		must(t, h.reg.Register(h.scope, Definition{Name: name, Parameters: `{"type":"object"}`, Execute: small, Output: text(content)}))
	}
	must(t, h.reg.Register(h.scope, Definition{
		Name: "quoted-value", Parameters: `{"type":"object"}`, Output: Output{Schema: `{"type":"string"}`},
		Execute: func(context.Context, Arguments, *Exec) (any, error) { return strings.Repeat(`"`, 393000), nil },
	}))
	must(t, h.reg.Register(h.scope, Definition{
		Name: "chatty", Parameters: `{"type":"object"}`, Output: text("done"),
		Execute: func(_ context.Context, _ Arguments, e *Exec) (any, error) {
			for i := range 20 {
				e.DeferContext(Context{Message: fmt.Sprintf("tool note %d %s", i, strings.Repeat(`"`, 8000))})
			}
			return map[string]any{"ok": true}, nil
		},
	}))
	must(t, h.reg.OnPostExecute(h.scope, "warn", 0, func(Call, PostInput) PostDecision {
		return PostDecision{Contexts: []string{"policy: review this output"}}
	}))
	p := h.pipeline(Options{})
	size := func(res Result) int {
		n := encoded(res.Value) + encoded(res.Content)
		for _, c := range res.Contexts {
			n += encoded(c.Message) + encoded(c.Rule) + encoded(c.Source)
		}
		return n
	}
	for name := range hostile {
		res := p.Run(context.Background(), req(name, `{}`))
		if res.Outcome != Succeeded || !res.Truncated || !strings.HasSuffix(res.Content, "…[truncated]") || !utf8.ValidString(res.Content) {
			t.Errorf("%s: %s %s, truncated %v, valid UTF-8 %v", name, res.Outcome, res.Code, res.Truncated, utf8.ValidString(res.Content))
		}
		if n := size(res); n > MaxResultBytes {
			t.Errorf("%s: the result takes %d bytes as JSON, over %d", name, n, MaxResultBytes)
		}
	}
	if res := p.Run(context.Background(), req("quoted-value", `{}`)); res.Code != CodeOutputTooLarge || size(res) > MaxResultBytes {
		t.Errorf("a value of 393,000 quotes: %s %s, %d bytes as JSON", res.Outcome, res.Code, size(res))
	}
	res := p.Run(context.Background(), req("chatty", `{}`))
	if res.Outcome != Succeeded || len(res.Contexts) != MaxContexts || !res.Truncated {
		t.Fatalf("20 tool contexts and a rule's: %s, %d contexts, truncated %v", res.Outcome, len(res.Contexts), res.Truncated)
	}
	if last := res.Contexts[len(res.Contexts)-1]; last.Source != SourcePolicy || last.Message != "policy: review this output" {
		t.Errorf("the rule's context was dropped for the tool's: last is %+v", last)
	}
	for _, c := range res.Contexts {
		if len(c.Message) > MaxContextBytes {
			t.Errorf("a context of %d bytes, over %d", len(c.Message), MaxContextBytes)
		}
	}
	if n := size(res); n > MaxResultBytes {
		t.Errorf("chatty: the result takes %d bytes as JSON, over %d", n, MaxResultBytes)
	}
}

// TestFinalizerHasTheLastWord: FinalizeContent sees content already within
// the result's bound and what it returns is the content, byte for byte; a
// finalizer that returns more than a result holds fails the call
// (normalization_failed) instead of being cut after it.
func TestFinalizerHasTheLastWord(t *testing.T) {
	h := newHarness(t)
	h.allowAll()
	var seen int
	huge := func(context.Context, Arguments, *Exec) (any, error) { return map[string]any{"ok": true}, nil }
	render := Output{Schema: `{"type":"object"}`, Render: func(Arguments, any) (string, error) { return strings.Repeat("x", 2<<20), nil }}
	must(t, h.reg.Register(h.scope, Definition{
		Name: "framed", Parameters: `{"type":"object"}`, Execute: huge, Output: render,
		FinalizeContent: func(content string, _ ResultView) string {
			seen = len(content)
			return "<<" + content[:100] + ">>"
		},
	}))
	must(t, h.reg.Register(h.scope, Definition{
		Name: "inflating", Parameters: `{"type":"object"}`, Execute: huge, Output: Output{Schema: `{"type":"object"}`},
		FinalizeContent: func(string, ResultView) string { return strings.Repeat(`"`, 1<<20) },
	}))
	p := h.pipeline(Options{})
	res := p.Run(context.Background(), req("framed", `{}`))
	if seen > MaxResultBytes {
		t.Errorf("the finalizer saw %d bytes of content, over the bound %d", seen, MaxResultBytes)
	}
	if res.Outcome != Succeeded || !strings.HasPrefix(res.Content, "<<") || !strings.HasSuffix(res.Content, ">>") || len(res.Content) != 104 || !res.Truncated {
		t.Errorf("framed: %s, %d bytes %q…, truncated %v", res.Outcome, len(res.Content), res.Content[:min(10, len(res.Content))], res.Truncated)
	}
	if res := p.Run(context.Background(), req("inflating", `{}`)); res.Code != CodeNormalizationFailed || encoded(res.Content) > MaxResultBytes {
		t.Errorf("inflating: %s %s, %d bytes as JSON", res.Outcome, res.Code, encoded(res.Content))
	}
}

// TestValuesAreWhatTheyClaim: a value is validated on the bytes it will be
// stored as, losslessly: a json.Number whose text is not a number is not a
// number (it once passed {"type":"number"} and was committed as an object),
// and text is UTF-8 (invalid bytes were rewritten to U+FFFD by the API
// server and committed as a success), from a body and from a post-execute
// replacement alike.
func TestValuesAreWhatTheyClaim(t *testing.T) {
	for _, tt := range []struct {
		name   string
		schema string
		value  any
	}{
		{"an object posing as a number", `{"type":"number"}`, json.Number(`{"admin":true}`)},
		{"an array posing as a number", `{"type":"number"}`, json.Number(`[1]`)},
		{"a nested fake number", `{"type":"object"}`, map[string]any{"n": json.Number(`"1"`)}},
		{"invalid UTF-8 text", `{"type":"string"}`, "a\xffb"},
		{"an invalid UTF-8 key", `{"type":"object"}`, map[string]any{"k\xfe": true}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			h.allowAll()
			value := tt.value
			must(t, h.reg.Register(h.scope, Definition{
				Name: "body", Parameters: `{"type":"object"}`, Output: Output{Schema: tt.schema},
				Execute: func(context.Context, Arguments, *Exec) (any, error) { return value, nil },
			}))
			if res := h.pipeline(Options{}).Run(context.Background(), req("body", `{}`)); res.Code != CodeOutputInvalid {
				t.Errorf("from a body: %s %s, value %q", res.Outcome, res.Code, res.Value)
			}

			h2 := newHarness(t)
			h2.allowAll()
			must(t, h2.reg.Register(h2.scope, Definition{
				Name: "body", Parameters: `{"type":"object"}`, Output: Output{Schema: `{}`},
				Execute: func(context.Context, Arguments, *Exec) (any, error) { return 1, nil },
			}))
			must(t, h2.reg.OnPostExecute(h2.scope, "replace", 0, func(Call, PostInput) PostDecision {
				return PostDecision{ReplaceValue: value}
			}))
			if res := h2.pipeline(Options{}).Run(context.Background(), req("body", `{}`)); res.Outcome != Failed || res.Value != "" {
				t.Errorf("from a replacement: %s %s, value %q", res.Outcome, res.Code, res.Value)
			}
		})
	}
}

// TestSchemaErrorsNameThePathNeverTheValue: a value that fails its output
// schema was passed by no post-execute rule, so the failure's message and
// content name where and which keyword failed, never the value (a pattern,
// const or enum error would quote it).
func TestSchemaErrorsNameThePathNeverTheValue(t *testing.T) {
	for _, schema := range []string{
		`{"type":"object","properties":{"token":{"type":"string","pattern":"^[a-z]+$"}}}`,
		`{"type":"object","properties":{"token":{"const":"x"}}}`,
		`{"type":"object","properties":{"token":{"enum":["a","b"]}}}`,
		`{"type":"object","properties":{"token":{"type":"string","maxLength":3}}}`,
	} {
		h := newHarness(t)
		h.allowAll()
		must(t, h.reg.Register(h.scope, Definition{
			Name: "body", Parameters: `{"type":"object"}`, Output: Output{Schema: schema},
			Execute: func(context.Context, Arguments, *Exec) (any, error) {
				return map[string]any{"token": "TOPSECRET-SCHEMA-1"}, nil
			},
		}))
		res := h.pipeline(Options{}).Run(context.Background(), req("body", `{}`))
		if res.Code != CodeOutputInvalid || strings.Contains(res.Message+res.Content, "TOPSECRET") || !strings.Contains(res.Message, "/token") {
			t.Errorf("%s: %s %q", schema, res.Code, res.Message)
		}
	}
}

// FuzzContextsFitAResult: whatever contexts a tool defers and rules attach
// (empty, huge, invalid UTF-8, too many), what a result holds is what a
// call's status admits: at most MaxContexts, none empty, each valid text
// within MaxContextBytes as stored, and every rule's context kept before a
// tool's (up to the bound).
func FuzzContextsFitAResult(f *testing.F) {
	f.Add(uint8(3), uint8(1), "a\nb\n\nc", "")
	f.Add(uint8(20), uint8(20), "", "\xff\"\\")
	f.Add(uint8(0), uint8(2), "", "")
	f.Fuzz(func(t *testing.T, nTool, nRules uint8, toolText, ruleText string) {
		make := func(n uint8, text, source string) []Context {
			var out []Context
			for i := range int(n % 40) {
				msg := text
				if i%3 == 1 {
					msg = strings.Repeat(text, 1+int(n))
				}
				out = append(out, Context{Source: source, Rule: "r", Message: msg})
			}
			return out
		}
		tool, rules := make(nTool, toolText, "Tool"), make(nRules, ruleText, "Policy")
		out, _ := boundContexts(tool, rules)
		if len(out) > MaxContexts {
			t.Fatalf("%d contexts", len(out))
		}
		wantRules := 0
		if ruleText != "" {
			wantRules = min(len(rules), MaxContexts)
		}
		gotRules := 0
		for _, c := range out {
			if c.Message == "" {
				t.Fatal("an empty context")
			}
			if !utf8.ValidString(c.Message) || encoded(c.Message) > MaxContextBytes {
				t.Fatalf("a context of %d bytes as stored, valid %v", encoded(c.Message), utf8.ValidString(c.Message))
			}
			if c.Source == "Policy" {
				gotRules++
			}
		}
		if gotRules != wantRules {
			t.Fatalf("%d of the rules' %d contexts kept, want %d", gotRules, len(rules), wantRules)
		}
	})
}
