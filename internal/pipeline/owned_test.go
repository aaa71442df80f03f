package pipeline

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// TestAWrapperCannotOutliveItsAttempt: a wrapper that keeps next and calls
// it after its attempt ended does not run the body (it would run after the
// call settled), and a wrapper that gives up and returns while the body
// runs (a timeout wrapper) has the body stopped and awaited before the call
// settles: the body is owned work.
func TestAWrapperCannotOutliveItsAttempt(t *testing.T) {
	t.Run("next called after the attempt", func(t *testing.T) {
		h := newHarness(t)
		h.allowAll()
		h.echo("echo", nil)
		var kept atomic.Value
		must(t, h.reg.WrapExecute(h.scope, "keeper", func(_ context.Context, _ Call, next Next) (any, error) {
			kept.Store(next)
			return nil, errors.New("later")
		}))
		res := h.pipeline(Options{}).Run(context.Background(), req("echo", `{"text":"x"}`))
		if res.Code != CodeWrapperFailed {
			t.Fatalf("%s %s", res.Outcome, res.Code)
		}
		if _, err := kept.Load().(Next)(context.Background()); err == nil {
			t.Error("next ran the body after its call settled")
		}
		if n := h.bodies.Load(); n != 0 {
			t.Errorf("the body ran %d times after its call settled", n)
		}
	})
	t.Run("a wrapper that returns while the body runs", func(t *testing.T) {
		h := newHarness(t)
		h.allowAll()
		var stopped atomic.Bool
		must(t, h.reg.Register(h.scope, Definition{
			Name: "slow", Parameters: `{"type":"object"}`, Output: Output{Schema: `{}`},
			Execute: func(ctx context.Context, _ Arguments, _ *Exec) (any, error) {
				select {
				case <-ctx.Done():
					time.Sleep(20 * time.Millisecond) // stopping takes a moment
					stopped.Store(true)
					return nil, ctx.Err()
				case <-time.After(5 * time.Second):
					return "finished", nil
				}
			},
		}))
		must(t, h.reg.WrapExecute(h.scope, "impatient", func(ctx context.Context, _ Call, next Next) (any, error) {
			go func() { _, _ = next(ctx) }()
			time.Sleep(20 * time.Millisecond)
			return nil, errors.New("gave up")
		}))
		start := time.Now()
		res := h.pipeline(Options{}).Run(context.Background(), req("slow", `{}`))
		if res.Outcome == Succeeded {
			t.Fatalf("succeeded: %s", res.Value)
		}
		if !stopped.Load() {
			t.Errorf("the call settled (%s %s) while its body still ran", res.Outcome, res.Code)
		}
		if elapsed := time.Since(start); elapsed > 4*time.Second {
			t.Errorf("the body was not stopped: the call took %s", elapsed)
		}
	})
}
