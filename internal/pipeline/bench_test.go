package pipeline

import (
	"context"
	"fmt"
	"testing"

	"github.com/toolgate/toolgate/internal/lifecycle"
)

// benchPipeline has one trivial tool with a small schema and an allow-all
// listener: the allow path with nothing else in it.
func benchPipeline(b *testing.B) *Pipeline {
	reg := NewRegistry()
	scope := lifecycle.NewScope()
	b.Cleanup(scope.Dispose)
	must(b, reg.Register(scope, Definition{
		Name: "echo", Parameters: echoParams, Output: Output{Schema: `{"type":"string"}`},
		Execute: func(_ context.Context, a Arguments, _ *Exec) (any, error) {
			text, _ := a.Field("text")
			return text, nil
		},
		IsConcurrencySafe: func(Arguments) any { return true },
	}))
	must(b, reg.OnPreExecute(scope, "allow", 0, func(context.Context, Call) Decision { return Decision{Action: Allow} }))
	n := 0
	return New(reg, Options{NewToken: func() string { n++; return "t" }})
}

// BenchmarkAllowPath: one call, allowed, trivial body, small schema.
// Target: <= 5 µs and <= 30 allocs per call.
func BenchmarkAllowPath(b *testing.B) {
	p := benchPipeline(b)
	r := Request{CallID: "c", Tool: "echo", Arguments: `{"text":"hello"}`}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if res := p.Run(ctx, r); res.Outcome != Succeeded {
			b.Fatal(res.Code)
		}
	}
}

// BenchmarkTurn100Mixed: a 100-call turn, every fifth call exclusive,
// maxParallel 8. Reported per turn; calls/op is 100.
func BenchmarkTurn100Mixed(b *testing.B) {
	p := benchPipeline(b)
	scope := lifecycle.NewScope()
	b.Cleanup(scope.Dispose)
	must(b, p.Register(scope, Definition{
		Name: "write", Parameters: echoParams, Output: Output{Schema: `{"type":"string"}`},
		Execute: func(context.Context, Arguments, *Exec) (any, error) { return "ok", nil },
	}))
	reqs := make([]Request, 100)
	for i := range reqs {
		tool := "echo"
		if i%5 == 4 {
			tool = "write"
		}
		reqs[i] = Request{CallID: fmt.Sprintf("c%d", i), Tool: tool, Arguments: `{"text":"hello"}`, Index: i}
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		res := p.RunTurn(ctx, reqs, TurnOptions{MaxParallel: 8})
		if len(res.Results) != 100 {
			b.Fatal(len(res.Results))
		}
	}
}
