package pipeline

import (
	"context"
	"strings"
	"testing"
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
