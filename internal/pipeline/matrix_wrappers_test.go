package pipeline

import (
	"context"
	"errors"
	"testing"
)

// wrapperCases are the matrix cases of execute wrappers: a wrapper may
// substitute the context passed to Next and nothing else.
func wrapperCases() []matrixCase {
	hello := req("echo", `{"text":"hello"}`)
	wrappedOver := func(edit func(*Definition), w Wrapper) func(*harness) {
		return func(h *harness) {
			h.echo("echo", edit)
			h.allowAll()
			must(h.t, h.reg.WrapExecute(h.scope, "w", w))
		}
	}
	wrapped := func(w Wrapper) func(*harness) { return wrappedOver(nil, w) }
	return []matrixCase{
		{
			name: "a wrapper that fails without dispatching", req: hello,
			setup: func(h *harness) {
				h.echo("echo", nil)
				h.allowAll()
				must(h.t, h.reg.WrapExecute(h.scope, "ratelimit", func(context.Context, Call, Next) (any, error) {
					return nil, errors.New("rate limited")
				}))
			},
			outcome: Failed, code: CodeWrapperFailed, bodies: 0,
			trace: traceHead + "Execute:Error " + traceTail + "Failed",
		},
		{
			name: "a panicking wrapper", req: hello,
			setup: func(h *harness) {
				h.echo("echo", nil)
				h.allowAll()
				must(h.t, h.reg.WrapExecute(h.scope, "boom", func(context.Context, Call, Next) (any, error) { panic("boom") }))
			},
			outcome: Failed, code: CodeWrapperFailed, bodies: 0,
			trace: traceHead + "Execute:Error " + traceTail + "Failed",
		},
		{
			name: "a wrapper cannot run the body twice in one attempt", req: hello,
			setup: func(h *harness) {
				h.echo("echo", nil)
				h.allowAll()
				must(h.t, h.reg.WrapExecute(h.scope, "twice", func(ctx context.Context, _ Call, next Next) (any, error) {
					_, _ = next(ctx)
					return next(ctx)
				}))
			},
			outcome: Failed, code: CodeWrapperFailed, bodies: 1,
			trace: traceHead + "Execute:Error " + traceTail + "Failed",
		},
		{
			name: "a wrapper that returns without dispatching", req: hello,
			setup: func(h *harness) {
				h.echo("echo", nil)
				h.allowAll()
				must(h.t, h.reg.WrapExecute(h.scope, "cache", func(context.Context, Call, Next) (any, error) { return "cached", nil }))
			},
			outcome: Failed, code: CodeWrapperFailed, bodies: 0,
			trace: traceHead + "Execute:Error " + traceTail + "Failed",
		},
		{
			name: "a wrapper cannot replace the body's value", req: hello,
			setup: wrapped(func(ctx context.Context, _ Call, next Next) (any, error) {
				_, err := next(ctx)
				return "replaced", err
			}),
			outcome: Failed, code: CodeWrapperFailed, bodies: 1,
			trace: traceHead + "Execute:Error " + traceTail + "Failed",
			check: failureShape("error: wrapper_failed: an execute wrapper replaced the body's value"),
		},
		{
			name: "a wrapper cannot change the body's value in place", req: hello,
			setup: func(h *harness) {
				h.echo("echo", func(d *Definition) {
					d.Output.Schema = `{"type":"object"}`
					d.Execute = func(_ context.Context, a Arguments, _ *Exec) (any, error) {
						h.bodies.Add(1)
						text, _ := a.Field("text")
						return map[string]any{"text": text}, nil
					}
				})
				h.allowAll()
				must(h.t, h.reg.WrapExecute(h.scope, "tamper", func(ctx context.Context, _ Call, next Next) (any, error) {
					v, err := next(ctx)
					if m, ok := v.(map[string]any); ok {
						m["text"] = "tampered"
					}
					return v, err
				}))
			},
			outcome: Failed, code: CodeWrapperFailed, bodies: 1,
			trace: traceHead + "Execute:Error " + traceTail + "Failed",
			check: failureShape("error: wrapper_failed: an execute wrapper replaced the body's value"),
		},
		{
			name: "a wrapper cannot turn a body failure into a success", req: hello,
			setup: wrappedOver(failing(errors.New("disk on fire")), func(ctx context.Context, _ Call, next Next) (any, error) {
				_, _ = next(ctx)
				return "fine", nil
			}),
			outcome: Failed, code: CodeWrapperFailed, bodies: 1,
			trace: traceHead + "Execute:Error " + traceTail + "Failed",
			check: failureShape("error: wrapper_failed: an execute wrapper replaced the body's failure with a success"),
		},
		{
			name: "a wrapper cannot fail a body that succeeded", req: hello,
			setup: wrapped(func(ctx context.Context, _ Call, next Next) (any, error) {
				_, _ = next(ctx)
				return nil, Fail(CodeSandboxDenied, "made up")
			}),
			outcome: Failed, code: CodeWrapperFailed, bodies: 1,
			trace: traceHead + "Execute:Error " + traceTail + "Failed",
			check: failureShape("error: wrapper_failed: an execute wrapper failed: sandbox_denied: made up"),
		},
		{
			name: "a wrapper that passes the outcome through keeps the body's value", req: hello,
			setup: wrapped(func(ctx context.Context, _ Call, next Next) (any, error) {
				return next(context.WithValue(ctx, spanKey{}, "span"))
			}),
			outcome: Succeeded, bodies: 1, trace: traceSuccess,
			check: func(t *testing.T, _ *harness, res Result) {
				if res.Value != `"hello"` || res.Content != "hello" {
					t.Errorf("value %q content %q", res.Value, res.Content)
				}
			},
		},
		{
			name: "a wrapper that passes the outcome through keeps the body's failure", req: hello,
			setup: wrappedOver(failing(Fail(CodeSandboxDenied, "path escapes the workspace")), func(ctx context.Context, _ Call, next Next) (any, error) {
				return next(ctx)
			}),
			outcome: Denied, code: CodeSandboxDenied, bodies: 1,
			trace: traceHead + "Execute:Error " + traceTail + "Denied",
			check: failureShape("error: sandbox_denied: path escapes the workspace"),
		},
	}
}
