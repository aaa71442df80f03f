package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

const (
	traceHead    = "Call:Admitted PreExecute:Allow Guard:Abstain Dispatch:Dispatched "
	traceTail    = "Finalize:OK Observe:OK Result:"
	traceSuccess = traceHead + "Execute:OK PostExecute:Accept " + traceTail + "Succeeded"
)

type matrixCase struct {
	name    string
	setup   func(h *harness)
	opts    Options
	cancel  bool // cancel the caller before the call starts
	req     Request
	outcome Outcome
	code    Code
	bodies  int32
	trace   string
	check   func(t *testing.T, h *harness, res Result)
}

func matrix() []matrixCase {
	hello := req("echo", `{"text":"hello"}`)
	returning := func(v any) func(*Definition) {
		return func(d *Definition) {
			inner := d.Execute
			d.Execute = func(ctx context.Context, a Arguments, e *Exec) (any, error) {
				_, _ = inner(ctx, a, e)
				return v, nil
			}
		}
	}
	ask := func(h *harness) {
		h.echo("echo", nil)
		must(h.t, h.reg.OnPreExecute(h.scope, "ask-all", 0, func(context.Context, Call) Decision {
			return Decision{Action: Ask, Reason: "ask-all", Message: "a person must agree"}
		}))
	}
	// postWith: an echo that defers a context, the pre-execute rules of
	// pre, and the post-execute listener fn.
	postWith := func(pre func(h *harness), fn PostListener) func(h *harness) {
		return func(h *harness) {
			h.echo("echo", func(d *Definition) {
				inner := d.Execute
				d.Execute = func(ctx context.Context, a Arguments, e *Exec) (any, error) {
					e.DeferContext(Context{Message: "from the tool"})
					return inner(ctx, a, e)
				}
			})
			pre(h)
			must(h.t, h.reg.OnPostExecute(h.scope, "p", 0, fn))
		}
	}
	askPost := func(fn PostListener) func(h *harness) {
		return postWith(func(h *harness) {
			must(h.t, h.reg.OnPreExecute(h.scope, "ask-all", 0, func(context.Context, Call) Decision {
				return Decision{Action: Ask, Reason: "ask-all"}
			}))
		}, fn)
	}
	post := func(fn PostListener) func(h *harness) { return postWith(func(h *harness) { h.allowAll() }, fn) }
	cases := []matrixCase{
		{
			name: "allow runs the body once and succeeds", req: hello,
			setup:   func(h *harness) { h.echo("echo", nil); h.allowAll() },
			outcome: Succeeded, bodies: 1, trace: traceSuccess,
			check: func(t *testing.T, _ *harness, res Result) {
				if res.Value != `"hello"` || res.Content != "hello" {
					t.Errorf("value %q content %q", res.Value, res.Content)
				}
			},
		},
		{
			name: "deny runs no body", req: hello,
			setup: func(h *harness) {
				h.echo("echo", nil)
				must(h.t, h.reg.OnPreExecute(h.scope, "deny-all", 0, func(context.Context, Call) Decision {
					return Decision{Action: Deny, Message: "not today"}
				}))
			},
			outcome: Denied, code: CodePolicyDenied, bodies: 0,
			trace: "Call:Admitted PreExecute:Deny " + traceTail + "Denied",
			check: func(t *testing.T, _ *harness, res Result) {
				if res.Value != "" || !strings.Contains(res.Content, "not today") {
					t.Errorf("value %q content %q", res.Value, res.Content)
				}
			},
		},
		{
			name: "no listener decides: the default denies", req: hello,
			setup:   func(h *harness) { h.echo("echo", nil) },
			outcome: Denied, code: CodePolicyDenied, bodies: 0,
			trace: "Call:Admitted PreExecute:Deny " + traceTail + "Denied",
		},
		{
			name: "the first deciding listener wins; abstainers are skipped", req: hello,
			setup: func(h *harness) {
				h.echo("echo", nil)
				must(h.t, h.reg.OnPreExecute(h.scope, "abstain", 0, func(context.Context, Call) Decision { return Decision{} }))
				must(h.t, h.reg.OnPreExecute(h.scope, "late-deny", 20, func(context.Context, Call) Decision { return Decision{Action: Deny} }))
				must(h.t, h.reg.OnPreExecute(h.scope, "early-allow", 10, func(context.Context, Call) Decision { return Decision{Action: Allow} }))
			},
			outcome: Succeeded, bodies: 1, trace: traceSuccess,
		},
		{
			name: "a panicking pre-execute listener denies", req: hello,
			setup: func(h *harness) {
				h.echo("echo", nil)
				must(h.t, h.reg.OnPreExecute(h.scope, "boom", 0, func(context.Context, Call) Decision { panic("boom") }))
			},
			outcome: Denied, code: CodePolicyDenied, bodies: 0,
			trace: "Call:Admitted PreExecute:Deny " + traceTail + "Denied",
		},
		{
			name: "ask with no approver fails closed", req: hello, setup: ask,
			outcome: Denied, code: CodeApprovalUnavailable, bodies: 0,
			trace: "Call:Admitted PreExecute:Ask Approval:Unavailable " + traceTail + "Denied",
		},
		{
			name: "ask with an unavailable approver fails closed", req: hello, setup: ask,
			opts:    Options{Approver: &staticApprover{answer: Unavailable}},
			outcome: Denied, code: CodeApprovalUnavailable, bodies: 0,
			trace: "Call:Admitted PreExecute:Ask Approval:Unavailable " + traceTail + "Denied",
		},
		{
			name: "ask with an answer outside the contract fails closed", req: hello, setup: ask,
			opts:    Options{Approver: &staticApprover{answer: "maybe"}},
			outcome: Denied, code: CodeApprovalUnavailable, bodies: 0,
			trace: "Call:Admitted PreExecute:Ask Approval:Unavailable " + traceTail + "Denied",
		},
		{
			name: "ask and approve runs the body once", req: hello, setup: ask,
			opts:    Options{Approver: &staticApprover{answer: AllowedOnce}},
			outcome: Succeeded, bodies: 1,
			trace: "Call:Admitted PreExecute:Ask Approval:AllowedOnce Guard:Abstain Dispatch:Dispatched Execute:OK PostExecute:Accept " + traceTail + "Succeeded",
		},
		{
			name: "an approval's words come after the tool's contexts and before the rules'", req: hello,
			setup: askPost(func(Call, PostInput) PostDecision {
				return PostDecision{Contexts: []string{"from the policy"}}
			}),
			opts:    Options{Approver: &staticApprover{answer: AllowedOnce, msg: "approved by alice: read-only please"}},
			outcome: Succeeded, bodies: 1,
			trace: "Call:Admitted PreExecute:Ask Approval:AllowedOnce Guard:Abstain Dispatch:Dispatched Execute:OK PostExecute:Accept " + traceTail + "Succeeded",
			check: func(t *testing.T, _ *harness, res Result) {
				want := []Context{{Source: SourceTool, Message: "from the tool"},
					{Source: SourceApproval, Rule: "ask-all", Message: "approved by alice: read-only please"},
					{Source: SourcePolicy, Rule: "p", Message: "from the policy"}}
				if !equalContexts(res.Contexts, want) {
					t.Errorf("contexts %+v", res.Contexts)
				}
			},
		},
		{
			name: "a block drops an approval's words with the tool's contexts", req: hello,
			setup: askPost(func(Call, PostInput) PostDecision {
				return PostDecision{Block: true, Contexts: []string{"withheld"}}
			}),
			opts:    Options{Approver: &staticApprover{answer: AllowedOnce, msg: "approved by alice"}},
			outcome: Failed, code: CodePostBlocked, bodies: 1,
			trace: "Call:Admitted PreExecute:Ask Approval:AllowedOnce Guard:Abstain Dispatch:Dispatched Execute:OK PostExecute:Block " + traceTail + "Failed",
			check: func(t *testing.T, _ *harness, res Result) {
				want := []Context{{Source: SourcePolicy, Rule: "p", Message: "withheld"}}
				if !equalContexts(res.Contexts, want) {
					t.Errorf("contexts %+v", res.Contexts)
				}
			},
		},
		{
			name: "ask and reject runs no body", req: hello, setup: ask,
			opts:    Options{Approver: &staticApprover{answer: Rejected}},
			outcome: Denied, code: CodeApprovalRejected, bodies: 0,
			trace: "Call:Admitted PreExecute:Ask Approval:Rejected " + traceTail + "Denied",
		},
		{
			name: "ask withdrawn settles cancelled", req: hello, setup: ask,
			opts:    Options{Approver: &staticApprover{answer: ApprovalAborted}},
			outcome: Cancelled, code: CodeApprovalCancelled, bodies: 0,
			trace: "Call:Admitted PreExecute:Ask Approval:Cancelled " + traceTail + "Cancelled",
		},
		{
			name: "guard denial after pre-execute allow runs no body", req: hello,
			setup: func(h *harness) {
				h.echo("echo", nil)
				h.allowAll()
				must(h.t, h.reg.AddGuard(h.scope, "abstains", func(Call) (string, bool) { return "", false }))
				must(h.t, h.reg.AddGuard(h.scope, "no-hello", func(c Call) (string, bool) {
					text, _ := c.Args.Field("text")
					return "hello is forbidden", text == "hello"
				}))
			},
			outcome: Denied, code: CodeGuardDenied, bodies: 0,
			trace: "Call:Admitted PreExecute:Allow Guard:Deny " + traceTail + "Denied",
		},
		{
			name: "a panicking guard denies", req: hello,
			setup: func(h *harness) {
				h.echo("echo", nil)
				h.allowAll()
				must(h.t, h.reg.AddGuard(h.scope, "boom", func(Call) (string, bool) { panic("boom") }))
			},
			outcome: Denied, code: CodeGuardDenied, bodies: 0,
			trace: "Call:Admitted PreExecute:Allow Guard:Deny " + traceTail + "Denied",
		},
		{
			name: "a body error is one normalized failure", req: hello,
			setup:   func(h *harness) { h.echo("echo", failing(errors.New("disk on fire"))); h.allowAll() },
			outcome: Failed, code: CodeToolError, bodies: 1,
			trace: traceHead + "Execute:Error " + traceTail + "Failed",
			check: func(t *testing.T, _ *harness, res Result) {
				if res.Value != "" || res.Content != "error: tool_error: disk on fire" {
					t.Errorf("value %q content %q", res.Value, res.Content)
				}
			},
		},
		{
			name: "a body panic is one normalized failure", req: hello,
			setup: func(h *harness) {
				h.echo("echo", func(d *Definition) {
					d.Execute = func(context.Context, Arguments, *Exec) (any, error) { h.bodies.Add(1); panic("boom") }
				})
				h.allowAll()
			},
			outcome: Failed, code: CodeToolPanic, bodies: 1,
			trace: traceHead + "Execute:Error " + traceTail + "Failed",
		},
		{
			name: "a body cannot claim a policy denial", req: hello,
			setup:   func(h *harness) { h.echo("echo", failing(Fail(CodePolicyDenied, "fake"))); h.allowAll() },
			outcome: Failed, code: CodeToolError, bodies: 1,
			trace: traceHead + "Execute:Error " + traceTail + "Failed",
		},
		{
			name: "a sandbox denial from the body is a denial", req: hello,
			setup: func(h *harness) {
				h.echo("echo", failing(Fail(CodeSandboxDenied, "path escapes the workspace")))
				h.allowAll()
			},
			outcome: Denied, code: CodeSandboxDenied, bodies: 1,
			trace: traceHead + "Execute:Error " + traceTail + "Denied",
		},
		{
			name: "a value outside the output schema fails", req: hello,
			setup:   func(h *harness) { h.echo("echo", returning(42)); h.allowAll() },
			outcome: Failed, code: CodeOutputInvalid, bodies: 1,
			trace: traceHead + "Execute:Error " + traceTail + "Failed",
		},
		{
			name: "NaN is not a JSON value", req: hello,
			setup: func(h *harness) {
				h.echo("echo", func(d *Definition) {
					d.Output.Schema = `{}`
					returning(math.NaN())(d)
				})
				h.allowAll()
			},
			outcome: Failed, code: CodeOutputInvalid, bodies: 1,
			trace: traceHead + "Execute:Error " + traceTail + "Failed",
		},
		{
			name: "a failing renderer is a render failure", req: hello,
			setup: func(h *harness) {
				h.echo("echo", func(d *Definition) {
					d.Output.Render = func(Arguments, any) (string, error) { return "", errors.New("bad template") }
				})
				h.allowAll()
			},
			outcome: Failed, code: CodeRenderFailed, bodies: 1,
			trace: traceHead + "Execute:Error " + traceTail + "Failed",
		},
		{
			name: "post block is a valueless failure with only the block's contexts", req: hello,
			setup: post(func(Call, PostInput) PostDecision {
				return PostDecision{Block: true, Message: "secret", Contexts: []string{"withheld"}}
			}),
			outcome: Failed, code: CodePostBlocked, bodies: 1,
			trace: traceHead + "Execute:OK PostExecute:Block " + traceTail + "Failed",
			check: func(t *testing.T, _ *harness, res Result) {
				want := []Context{{Source: SourcePolicy, Rule: "p", Message: "withheld"}}
				if res.Value != "" || !equalContexts(res.Contexts, want) {
					t.Errorf("value %q contexts %+v", res.Value, res.Contexts)
				}
			},
		},
		{
			name: "post accept replaces content only, and tool contexts come first", req: hello,
			setup: post(func(Call, PostInput) PostDecision {
				s := "HELLO"
				return PostDecision{ReplaceContent: &s, Contexts: []string{"from the policy"}}
			}),
			outcome: Succeeded, bodies: 1, trace: traceSuccess,
			check: func(t *testing.T, _ *harness, res Result) {
				want := []Context{{Source: SourceTool, Message: "from the tool"}, {Source: SourcePolicy, Rule: "p", Message: "from the policy"}}
				if res.Value != `"hello"` || res.Content != "HELLO" || !equalContexts(res.Contexts, want) {
					t.Errorf("value %q content %q contexts %+v", res.Value, res.Content, res.Contexts)
				}
			},
		},
		{
			name: "post accept replacing the value validates and renders it again", req: hello,
			setup: post(func(Call, PostInput) PostDecision {
				return PostDecision{ReplaceValue: json.RawMessage(`"redacted"`)}
			}),
			outcome: Succeeded, bodies: 1, trace: traceSuccess,
			check: func(t *testing.T, _ *harness, res Result) {
				if res.Value != `"redacted"` || res.Content != "redacted" {
					t.Errorf("value %q content %q", res.Value, res.Content)
				}
			},
		},
		{
			name: "a replaced value outside the output schema fails the post stage", req: hello,
			setup:   post(func(Call, PostInput) PostDecision { return PostDecision{ReplaceValue: 7} }),
			outcome: Failed, code: CodePostFailed, bodies: 1,
			trace: traceHead + "Execute:OK PostExecute:Error " + traceTail + "Failed",
		},
		{
			name: "replacing content and value at once fails the post stage", req: hello,
			setup: post(func(Call, PostInput) PostDecision {
				s := "x"
				return PostDecision{ReplaceContent: &s, ReplaceValue: "y"}
			}),
			outcome: Failed, code: CodePostFailed, bodies: 1,
			trace: traceHead + "Execute:OK PostExecute:Error " + traceTail + "Failed",
		},
		{
			name: "a post listener that cannot decide fails the post stage", req: hello,
			setup:   post(func(Call, PostInput) PostDecision { return PostDecision{Err: errors.New("no such key")} }),
			outcome: Failed, code: CodePostFailed, bodies: 1,
			trace: traceHead + "Execute:OK PostExecute:Error " + traceTail + "Failed",
		},
		{
			name: "a panicking post listener fails the post stage", req: hello,
			setup:   post(func(Call, PostInput) PostDecision { panic("boom") }),
			outcome: Failed, code: CodePostFailed, bodies: 1,
			trace: traceHead + "Execute:OK PostExecute:Error " + traceTail + "Failed",
		},
		{
			name: "a body over its timeout settles as a timeout", req: hello,
			setup: func(h *harness) {
				h.echo("echo", func(d *Definition) {
					d.Timeout = 20 * time.Millisecond
					d.Execute = func(ctx context.Context, _ Arguments, _ *Exec) (any, error) {
						h.bodies.Add(1)
						<-ctx.Done()
						return nil, ctx.Err()
					}
				})
				h.allowAll()
			},
			outcome: TimedOut, code: CodeTimeout, bodies: 1,
			trace: traceHead + "Execute:Error " + traceTail + "TimedOut",
		},
		{
			name: "cancelled before dispatch skips every stage and still settles once", req: hello,
			setup: func(h *harness) { h.echo("echo", nil); h.allowAll() }, cancel: true,
			outcome: Cancelled, code: CodeCancelled, bodies: 0,
			trace: "Call:Cancelled " + traceTail + "Cancelled",
			check: func(t *testing.T, h *harness, _ Result) {
				if len(h.seen) != 0 {
					t.Errorf("a listener or body saw the Call: %d", len(h.seen))
				}
			},
		},
		{
			name: "unknown tool", req: req("nope", `{}`),
			setup:   func(h *harness) { h.echo("echo", nil); h.allowAll() },
			outcome: Failed, code: CodeUnknownTool, bodies: 0,
			trace: "Call:Error " + traceTail + "Failed",
		},
		{
			name: "arguments outside the schema", req: req("echo", `{"text":1}`),
			setup:   func(h *harness) { h.echo("echo", nil); h.allowAll() },
			outcome: Failed, code: CodeInvalidArguments, bodies: 0,
			trace: "Call:Error " + traceTail + "Failed",
		},
		{
			name: "arguments that are not JSON", req: req("echo", `{"text":`),
			setup:   func(h *harness) { h.echo("echo", nil); h.allowAll() },
			outcome: Failed, code: CodeInvalidArguments, bodies: 0,
			trace: "Call:Error " + traceTail + "Failed",
		},
		{
			name: "arguments with a duplicate key", req: req("echo", `{"text":"a","text":"b"}`),
			setup:   func(h *harness) { h.echo("echo", nil); h.allowAll() },
			outcome: Failed, code: CodeInvalidArguments, bodies: 0,
			trace: "Call:Error " + traceTail + "Failed",
		},
		{
			name: "a panicking finalizer is a normalization failure", req: hello,
			setup: func(h *harness) {
				h.echo("echo", func(d *Definition) {
					d.FinalizeContent = func(string, ResultView) string { panic("boom") }
				})
				h.allowAll()
			},
			outcome: Failed, code: CodeNormalizationFailed, bodies: 1,
			trace: traceHead + "Execute:OK PostExecute:Accept Finalize:Error Observe:OK Result:Failed",
			check: failureShape("error: normalization_failed: FinalizeContent panicked"),
		},
		{
			// docs/pipeline.md: a failure carries no success content, no value
			// and no tool-deferred (or accept) contexts.
			name: "a normalization failure drops the success content, value and contexts", req: hello,
			setup: func(h *harness) {
				h.echo("echo", func(d *Definition) {
					inner := d.Execute
					d.Execute = func(ctx context.Context, a Arguments, e *Exec) (any, error) {
						e.DeferContext(Context{Message: "from the tool"})
						e.Truncated = true
						return inner(ctx, a, e)
					}
					d.FinalizeContent = func(string, ResultView) string { panic("boom") }
				})
				h.allowAll()
				must(h.t, h.reg.OnPostExecute(h.scope, "p", 0, func(Call, PostInput) PostDecision {
					return PostDecision{Contexts: []string{"from the policy"}}
				}))
			},
			outcome: Failed, code: CodeNormalizationFailed, bodies: 1,
			trace: traceHead + "Execute:OK PostExecute:Accept Finalize:Error Observe:OK Result:Failed",
			check: func(t *testing.T, h *harness, res Result) {
				failureShape("error: normalization_failed: FinalizeContent panicked")(t, h, res)
				h.mu.Lock()
				defer h.mu.Unlock()
				if len(h.observed) != 1 || h.observed[0].Content() != res.Content || len(h.observed[0].Contexts()) != 0 {
					t.Errorf("the observer saw a different outcome: %+v", h.observed)
				}
			},
		},
		{
			name: "order keys compare without overflow: a deny at -1 precedes an allow at MaxInt", req: hello,
			setup: func(h *harness) {
				h.echo("echo", nil)
				must(h.t, h.reg.OnPreExecute(h.scope, "deny-early", -1, func(context.Context, Call) Decision { return Decision{Action: Deny} }))
				must(h.t, h.reg.OnPreExecute(h.scope, "allow-last", math.MaxInt, func(context.Context, Call) Decision { return Decision{Action: Allow} }))
			},
			outcome: Denied, code: CodePolicyDenied, bodies: 0,
			trace: "Call:Admitted PreExecute:Deny " + traceTail + "Denied",
		},
		{
			name: "order keys compare without overflow: a deny at MinInt precedes an allow at 1", req: hello,
			setup: func(h *harness) {
				h.echo("echo", nil)
				must(h.t, h.reg.OnPreExecute(h.scope, "deny-first", math.MinInt, func(context.Context, Call) Decision { return Decision{Action: Deny} }))
				must(h.t, h.reg.OnPreExecute(h.scope, "allow", 1, func(context.Context, Call) Decision { return Decision{Action: Allow} }))
			},
			outcome: Denied, code: CodePolicyDenied, bodies: 0,
			trace: "Call:Admitted PreExecute:Deny " + traceTail + "Denied",
		},
		{
			name: "an idempotent body is retried within its budget", req: hello,
			setup: func(h *harness) {
				h.echo("echo", func(d *Definition) {
					d.Idempotent, d.MaxAttempts = true, 3
					inner := d.Execute
					d.Execute = func(ctx context.Context, a Arguments, e *Exec) (any, error) {
						v, _ := inner(ctx, a, e)
						if e.Attempt < 3 {
							return nil, errors.New("flaky")
						}
						return v, nil
					}
				})
				h.allowAll()
			},
			outcome: Succeeded, bodies: 3,
			trace: traceHead + "Execute:Retry Dispatch:Dispatched Execute:Retry Dispatch:Dispatched Execute:OK PostExecute:Accept " + traceTail + "Succeeded",
		},
		{
			name: "an idempotent body whose pod the cluster took away (a node drained or lost) is dispatched again, with no retry budget of its own", req: hello,
			setup: func(h *harness) {
				h.echo("echo", func(d *Definition) {
					d.Idempotent = true
					inner := d.Execute
					d.Execute = func(ctx context.Context, a Arguments, e *Exec) (any, error) {
						v, _ := inner(ctx, a, e)
						if e.Attempt < 2 {
							return nil, Fail(CodeSandboxEvicted, "the cluster stopped the tool's pod (DeletionByTaintManager)")
						}
						return v, nil
					}
				})
				h.allowAll()
			},
			outcome: Succeeded, bodies: 2,
			trace: traceHead + "Execute:Retry Dispatch:Dispatched Execute:OK PostExecute:Accept " + traceTail + "Succeeded",
		},
		{
			name: "an idempotent body evicted every time settles evicted once the bound of lost attempts is spent", req: hello,
			setup: func(h *harness) {
				h.echo("echo", func(d *Definition) {
					d.Idempotent = true
					failing(Fail(CodeSandboxEvicted, "the node evicted the tool's pod"))(d)
				})
				h.allowAll()
			},
			outcome: Failed, code: CodeSandboxEvicted, bodies: maxInterruptedAttempts,
			trace: traceHead + "Execute:Retry Dispatch:Dispatched Execute:Retry Dispatch:Dispatched Execute:Error " + traceTail + "Failed",
		},
		{
			name: "a body not declared idempotent whose pod the cluster took away settles evicted, never run twice", req: hello,
			setup: func(h *harness) {
				h.echo("echo", func(d *Definition) {
					d.MaxAttempts = 3
					failing(Fail(CodeSandboxEvicted, "the cluster stopped the tool's pod (EvictionByEvictionAPI)"))(d)
				})
				h.allowAll()
			},
			outcome: Failed, code: CodeSandboxEvicted, bodies: 1,
			trace: traceHead + "Execute:Error " + traceTail + "Failed",
		},
		{
			name: "a body not declared idempotent is never retried", req: hello,
			setup: func(h *harness) {
				h.echo("echo", func(d *Definition) {
					d.MaxAttempts = 3
					failing(errors.New("flaky"))(d)
				})
				h.allowAll()
			},
			outcome: Failed, code: CodeToolError, bodies: 1,
			trace: traceHead + "Execute:Error " + traceTail + "Failed",
		},
		{
			name: "a cut output is flagged, never silent", req: hello,
			setup: func(h *harness) {
				h.echo("echo", func(d *Definition) {
					d.Execute = func(_ context.Context, _ Arguments, e *Exec) (any, error) {
						h.bodies.Add(1)
						e.Truncated = true
						return "the first part", nil
					}
				})
				h.allowAll()
			},
			outcome: Succeeded, bodies: 1, trace: traceSuccess,
			check: func(t *testing.T, _ *harness, res Result) {
				if !res.Truncated || res.Content != "the first part" {
					t.Errorf("truncated %v content %q", res.Truncated, res.Content)
				}
			},
		},
		{
			name: "a nested call omits additional contexts",
			req:  Request{CallID: "sub-1", Tool: "echo", Arguments: `{"text":"hello"}`, Parent: "tok-parent"},
			setup: post(func(Call, PostInput) PostDecision {
				return PostDecision{Contexts: []string{"from the policy"}}
			}),
			outcome: Succeeded, bodies: 1, trace: traceSuccess,
			check: func(t *testing.T, h *harness, res Result) {
				if len(res.Contexts) != 0 {
					t.Errorf("nested call kept contexts %+v", res.Contexts)
				}
				for _, c := range h.seen {
					if c.Parent != "tok-parent" || !c.Nested() {
						t.Errorf("stage saw parent %q", c.Parent)
					}
				}
			},
		},
	}
	return append(cases, wrapperCases()...)
}

// failing makes the body run, then fail with err.
func failing(err error) func(*Definition) {
	return func(d *Definition) {
		inner := d.Execute
		d.Execute = func(ctx context.Context, a Arguments, e *Exec) (any, error) {
			_, _ = inner(ctx, a, e)
			return nil, err
		}
	}
}

type spanKey struct{}

// failureShape asserts the shape every failure has: its content is the
// failure content, and it carries no value, no contexts and no cut flag.
func failureShape(content string) func(*testing.T, *harness, Result) {
	return func(t *testing.T, _ *harness, res Result) {
		t.Helper()
		if res.Content != content || res.Value != "" || len(res.Contexts) != 0 || res.Truncated {
			t.Errorf("failure kept a success shape: content %q (want %q) value %q contexts %+v truncated %v",
				res.Content, content, res.Value, res.Contexts, res.Truncated)
		}
	}
}

func equalContexts(a, b []Context) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestMatrix runs the seed's test matrix and every failure branch: each case
// asserts the body count, exactly one result, the outcome and code, the
// stage trace, and that every stage saw one immutable identity.
func TestMatrix(t *testing.T) {
	for _, tc := range matrix() {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			tc.setup(h)
			p := h.pipeline(tc.opts)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.cancel {
				cancel()
			}
			st := NewState(tc.req)
			res := p.Resume(ctx, st, nil)

			if res.Outcome != tc.outcome || res.Code != tc.code {
				t.Fatalf("outcome %s/%s, want %s/%s (%s)", res.Outcome, res.Code, tc.outcome, tc.code, res.Message)
			}
			if got := h.bodies.Load(); got != tc.bodies {
				t.Errorf("body ran %d times, want %d", got, tc.bodies)
			}
			if got := h.results.Load(); got != 1 {
				t.Errorf("observers saw %d results, want exactly 1", got)
			}
			if got := trace(st); got != tc.trace {
				t.Errorf("trace\n got %s\nwant %s", got, tc.trace)
			}
			if res.Token == "" || res.CallID != tc.req.CallID || res.Tool != tc.req.Tool {
				t.Errorf("result identity %q %q %q", res.Token, res.CallID, res.Tool)
			}
			for _, c := range h.seen {
				if c.Token != res.Token || c.CallID != tc.req.CallID || c.Tool != tc.req.Tool || c.Args.JSON() != tc.req.Arguments {
					t.Errorf("a stage saw identity %+v, result has token %q", c, res.Token)
				}
			}
			if def, ok := h.reg.Lookup(tc.req.Tool); ok && def.FinalizeContent != nil && tc.code != CodeNormalizationFailed {
				if n := h.finalized.Load(); n != 1 {
					t.Errorf("FinalizeContent ran %d times, want exactly once", n)
				}
			}
			if (res.Outcome == Succeeded) != (res.Value != "") && tc.req.Tool == "echo" {
				t.Errorf("outcome %s with value %q: only successes carry a value", res.Outcome, res.Value)
			}
			if tc.check != nil {
				tc.check(t, h, res)
			}
		})
	}
}
