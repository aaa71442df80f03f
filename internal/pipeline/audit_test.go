package pipeline

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/toolgate/toolgate/internal/lifecycle"
)

// The cases of an independent audit of the pipeline's promises (every
// call settles once, a result fits its store and is text, the finalizer
// has the last word), each a way it broke.

// auditRun runs r, reporting a panic instead of propagating it.
func auditRun(p *Pipeline, r Request) (res Result, panicked any) {
	defer func() { panicked = recover() }()
	return p.Run(context.Background(), r), nil
}

// storedSize is how many bytes a result's value, content and contexts take
// as stored.
func storedSize(res Result) int {
	n := encodedLen(res.Value) + encodedLen(res.Content)
	for _, c := range res.Contexts {
		n += encodedLen(c.Message) + encodedLen(c.Rule) + encodedLen(c.Source)
	}
	return n
}

// auditErr is an error type whose nil pointer panics in Error.
type auditErr struct{ msg *string }

func (e *auditErr) Error() string { return *e.msg }

// TestEveryCallSettlesWhateverPanics: a number the schema validator cannot
// read (space around it, an exponent beyond a rational's), in the value or
// in the model's arguments, and a body returning a typed nil error, each
// once panicked out of Run with no result.
func TestEveryCallSettlesWhateverPanics(t *testing.T) {
	for name, tt := range map[string]struct {
		params, args string
		body         func() (any, error)
	}{
		"a number with space around it":  {`{"type":"object"}`, `{}`, func() (any, error) { return json.Number(" 1"), nil }},
		"a number with a huge exponent":  {`{"type":"object"}`, `{}`, func() (any, error) { return json.Number("1e1000001"), nil }},
		"arguments with a huge exponent": {`{"type":"object","properties":{"n":{"type":"number","minimum":0}}}`, `{"n":1e1000001}`, func() (any, error) { return 1, nil }},
		"a typed nil error":              {`{"type":"object"}`, `{}`, func() (any, error) { var e *auditErr; return nil, e }},
		"a value whose encoder panics":   {`{"type":"object"}`, `{}`, func() (any, error) { return map[string]any{"x": panickyJSON{}}, nil }},
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			h.allowAll()
			body := tt.body
			must(t, h.reg.Register(h.scope, Definition{Name: "b", Parameters: tt.params, Output: Output{Schema: `{"type":"number","minimum":0}`},
				Execute: func(context.Context, Arguments, *Exec) (any, error) { return body() }}))
			res, p := auditRun(h.pipeline(Options{}), req("b", tt.args))
			if p != nil || res.Outcome == Succeeded || res.Code == "" {
				t.Fatalf("panic %v, result %s %s %q", p, res.Outcome, res.Code, res.Message)
			}
		})
	}
}

type panickyJSON struct{}

func (panickyJSON) MarshalJSON() ([]byte, error) { panic("boom") }

// TestResultFitsWithManyEscapedContexts: a value at its bound, sixteen
// contexts of characters that take six bytes each as stored, and long
// content once made a result of 1,183,808 bytes as stored.
func TestResultFitsWithManyEscapedContexts(t *testing.T) {
	h := newHarness(t)
	h.allowAll()
	must(t, h.reg.Register(h.scope, Definition{Name: "big", Parameters: `{"type":"object"}`,
		Output: Output{Schema: `{"type":"string"}`, Render: func(Arguments, any) (string, error) { return strings.Repeat("c", 300000), nil }},
		Execute: func(_ context.Context, _ Arguments, e *Exec) (any, error) {
			for range MaxContexts {
				e.DeferContext(Context{Message: strings.Repeat("<", MaxContextBytes)})
			}
			return strings.Repeat("a", MaxValueBytes-4), nil
		}}))
	res, _ := auditRun(h.pipeline(Options{}), req("big", `{}`))
	if n := storedSize(res); n > MaxResultBytes || !res.Truncated {
		t.Fatalf("%s: %d bytes as stored (bound %d), truncated %v", res.Outcome, n, MaxResultBytes, res.Truncated)
	}
}

// TestResultTextIsBoundedAndUTF8: a body's own failure message of 2 MiB of
// quotes and an invalid byte, a replaced content and a rule's context
// holding invalid bytes, once reached the result as they were.
func TestResultTextIsBoundedAndUTF8(t *testing.T) {
	h := newHarness(t)
	h.allowAll()
	must(t, h.reg.Register(h.scope, Definition{Name: "f", Parameters: `{"type":"object"}`, Output: Output{Schema: `{}`},
		Execute: func(context.Context, Arguments, *Exec) (any, error) {
			return nil, Fail(CodeToolError, strings.Repeat(`"`, 2<<20)+"\xff")
		}}))
	res, _ := auditRun(h.pipeline(Options{}), req("f", `{}`))
	if encodedLen(res.Message) > MaxMessageBytes || !utf8.ValidString(res.Message) || !utf8.ValidString(res.Content) || storedSize(res) > MaxResultBytes {
		t.Fatalf("message of %d bytes as stored, valid %v; content valid %v", encodedLen(res.Message), utf8.ValidString(res.Message), utf8.ValidString(res.Content))
	}

	h2 := newHarness(t)
	h2.allowAll()
	must(t, h2.reg.Register(h2.scope, Definition{Name: "ok", Parameters: `{"type":"object"}`, Output: Output{Schema: `{}`},
		Execute: func(context.Context, Arguments, *Exec) (any, error) { return "fine", nil }}))
	replaced := "replaced \xff"
	must(t, h2.reg.OnPostExecute(h2.scope, "bytes", 0, func(Call, PostInput) PostDecision {
		return PostDecision{ReplaceContent: &replaced, Contexts: []string{"ctx \xfe"}}
	}))
	res, _ = auditRun(h2.pipeline(Options{}), req("ok", `{}`))
	if !utf8.ValidString(res.Content) || len(res.Contexts) != 1 || !utf8.ValidString(res.Contexts[0].Message) {
		t.Fatalf("content %q contexts %+v", res.Content, res.Contexts)
	}
}

// TestValuesOfGoTypesAreText: a body returning Go values (a slice of
// strings, a struct, a typed map) with invalid UTF-8 once had it rewritten
// to U+FFFD and committed as a success; a number with space in it was
// stored with the space.
func TestValuesOfGoTypesAreText(t *testing.T) {
	for name, v := range map[string]any{
		"a slice":         []string{"a\xffb"},
		"a struct":        struct{ Text string }{"a\xffb"},
		"a nested one":    map[string]any{"x": []string{"a\xffb"}},
		"a typed key":     map[string]string{"k\xfe": "v"},
		"a spaced number": map[string]any{"n": json.Number("\n1\t")},
	} {
		h := newHarness(t)
		h.allowAll()
		value := v
		must(t, h.reg.Register(h.scope, Definition{Name: "b", Parameters: `{"type":"object"}`, Output: Output{Schema: `{}`},
			Execute: func(context.Context, Arguments, *Exec) (any, error) { return value, nil }}))
		if res, _ := auditRun(h.pipeline(Options{}), req("b", `{}`)); res.Outcome == Succeeded {
			t.Errorf("%s: committed %q", name, res.Value)
		}
	}
}

// TestNoOutputWithoutItsFinalizer: a tool removed after its body ran (a
// profile reload) once had its output committed without its finalizer,
// the raw SECRET instead of "[redacted]".
func TestNoOutputWithoutItsFinalizer(t *testing.T) {
	h := newHarness(t)
	h.allowAll()
	toolScope := lifecycle.NewScope()
	must(t, h.reg.Register(toolScope, Definition{Name: "secret", Parameters: `{"type":"object"}`, Output: Output{Schema: `{"type":"string"}`},
		Execute:         func(context.Context, Arguments, *Exec) (any, error) { return "SECRET", nil },
		FinalizeContent: func(string, ResultView) string { return "[redacted]" }}))
	must(t, h.reg.OnPostExecute(h.scope, "unload", 0, func(Call, PostInput) PostDecision { toolScope.Dispose(); return PostDecision{} }))
	res, _ := auditRun(h.pipeline(Options{}), req("secret", `{}`))
	if strings.Contains(res.Content+res.Value, "SECRET") || res.Code != CodeUnknownTool {
		t.Fatalf("%s %s content %q value %q", res.Outcome, res.Code, res.Content, res.Value)
	}
}

// TestARemovedToolsWorkIsStopped: a tool removed while its body's work
// runs elsewhere (a Reattach body, answering Pending) settles unknown_tool
// only once that work is stopped, as a cancellation stops it: the
// in-memory driver once settled it and left the work running.
func TestARemovedToolsWorkIsStopped(t *testing.T) {
	h := newHarness(t)
	h.allowAll()
	toolScope := lifecycle.NewScope()
	var running, asked atomic.Int32
	must(t, h.reg.Register(toolScope, Definition{Name: "remote", Parameters: `{"type":"object"}`, Output: Output{Schema: `{"type":"string"}`}, Reattach: true,
		Execute: func(ctx context.Context, _ Arguments, _ *Exec) (any, error) {
			if asked.Add(1) == 1 {
				running.Store(1) // its work starts elsewhere
				toolScope.Dispose()
				return nil, Pending
			}
			if ctx.Err() != nil {
				running.Store(0) // stopped, as a cancellation asks
				return nil, ctx.Err()
			}
			return nil, Pending
		}}))
	res := h.pipeline(Options{PollInterval: 10 * time.Millisecond}).Run(context.Background(), req("remote", `{}`))
	if res.Code != CodeUnknownTool {
		t.Fatalf("%s %s: %s", res.Outcome, res.Code, res.Message)
	}
	if running.Load() != 0 {
		t.Fatal("the removed tool's work still runs after its call settled")
	}
}
