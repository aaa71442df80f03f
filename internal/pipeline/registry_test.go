package pipeline

import (
	"context"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/lifecycle"
)

// TestDisposingAScopeRemovesItsRegistrations mounts a plugin (a tool and one
// listener of each kind) in a child scope, uses it through the pipeline,
// disposes the scope and proves every registration is gone.
func TestDisposingAScopeRemovesItsRegistrations(t *testing.T) {
	h := newHarness(t)
	plugin, err := h.scope.Child()
	must(t, err)
	def := Definition{
		Name: "plugin-tool", Parameters: `{"type":"object"}`, Output: Output{Schema: `{"type":"string"}`},
		Execute: func(context.Context, Arguments, *Exec) (any, error) { h.bodies.Add(1); return "ok", nil },
	}
	must(t, h.reg.Register(plugin, def))
	must(t, h.reg.OnPreExecute(plugin, "allow", 0, func(context.Context, Call) Decision { return Decision{Action: Allow} }))
	must(t, h.reg.AddGuard(plugin, "g", func(Call) (string, bool) { return "", false }))
	must(t, h.reg.WrapExecute(plugin, "w", func(ctx context.Context, _ Call, next Next) (any, error) { return next(ctx) }))
	must(t, h.reg.OnPostExecute(plugin, "p", 0, func(Call, PostInput) PostDecision { return PostDecision{} }))
	must(t, h.reg.Observe(plugin, "o", func(ResultView) {}))

	p := h.pipeline(Options{})
	if res := p.Run(context.Background(), req("plugin-tool", `{}`)); res.Outcome != Succeeded {
		t.Fatalf("through the mounted plugin: %s %s", res.Outcome, res.Code)
	}
	tools, listeners := h.reg.Counts()
	if tools != 1 || listeners != 6 { // 5 from the plugin, 1 harness observer
		t.Fatalf("mounted: %d tools, %d listeners", tools, listeners)
	}

	plugin.Dispose()

	tools, listeners = h.reg.Counts()
	if tools != 0 || listeners != 1 {
		t.Fatalf("after disposal: %d tools, %d listeners remain", tools, listeners)
	}
	if res := p.Run(context.Background(), req("plugin-tool", `{}`)); res.Code != CodeUnknownTool {
		t.Fatalf("after disposal the tool still answers: %s", res.Code)
	}
	if err := h.reg.Register(plugin, def); err == nil {
		t.Fatal("registering under a disposed scope succeeded")
	}
	if tools, _ := h.reg.Counts(); tools != 0 {
		t.Fatal("a registration under a disposed scope leaked")
	}
}

func TestRegisterRefusesBrokenDefinitions(t *testing.T) {
	reg := NewRegistry()
	scope := lifecycle.NewScope()
	defer scope.Dispose()
	body := func(context.Context, Arguments, *Exec) (any, error) { return nil, nil }
	for name, def := range map[string]Definition{
		"no output schema":    {Name: "a", Parameters: `{}`, Execute: body},
		"no body":             {Name: "a", Parameters: `{}`, Output: Output{Schema: `{}`}},
		"bad parameters":      {Name: "a", Parameters: `{"type":12}`, Output: Output{Schema: `{}`}, Execute: body},
		"parameters not JSON": {Name: "a", Parameters: `{`, Output: Output{Schema: `{}`}, Execute: body},
		"network ref":         {Name: "a", Parameters: `{"$ref":"https://example.com/s.json"}`, Output: Output{Schema: `{}`}, Execute: body},
		"file ref":            {Name: "a", Parameters: `{"$ref":"file:///etc/passwd"}`, Output: Output{Schema: `{}`}, Execute: body},
	} {
		if err := reg.Register(scope, def); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	ok := Definition{Name: "a", Parameters: `{"$defs":{"s":{"type":"string"}},"properties":{"x":{"$ref":"#/$defs/s"}}}`, Output: Output{Schema: `{}`}, Execute: body}
	must(t, reg.Register(scope, ok))
	if err := reg.Register(scope, ok); err == nil || !strings.Contains(err.Error(), "already registered") {
		t.Errorf("duplicate: %v", err)
	}
}

// FuzzArguments: whatever the model sends, a call settles with exactly one
// result, and invalid arguments never reach the body.
func FuzzArguments(f *testing.F) {
	for _, s := range []string{`{"text":"hi"}`, `{"text":1}`, `{}`, `[]`, `{"text":"a","text":"b"}`, `{"text":"\ud800"}`, `{"text":"x","delay":1e999}`} {
		f.Add(s)
	}
	reg := NewRegistry()
	scope := lifecycle.NewScope()
	var ran int
	must(f, reg.Register(scope, Definition{
		Name: "echo", Parameters: echoParams, Output: Output{Schema: `{"type":"string"}`},
		Execute: func(_ context.Context, a Arguments, _ *Exec) (any, error) {
			ran++
			text, ok := a.Field("text")
			if !ok {
				panic("the body received arguments outside its schema")
			}
			return text, nil
		},
	}))
	must(f, reg.OnPreExecute(scope, "allow", 0, func(context.Context, Call) Decision { return Decision{Action: Allow} }))
	p := New(reg, Options{})
	f.Fuzz(func(t *testing.T, args string) {
		ran = 0
		res := p.Run(context.Background(), Request{CallID: "c", Tool: "echo", Arguments: args})
		switch res.Outcome {
		case Succeeded:
			if ran != 1 || res.Code != "" {
				t.Fatalf("success with %d runs, code %q", ran, res.Code)
			}
		case Failed:
			if res.Code != CodeInvalidArguments || ran != 0 {
				t.Fatalf("%s after %d runs for %q", res.Code, ran, args)
			}
		default:
			t.Fatalf("outcome %s for %q", res.Outcome, args)
		}
	})
}
