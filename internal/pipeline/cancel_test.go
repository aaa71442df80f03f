package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// TestCancelAfterDispatchStopsOwnedWorkBeforeSettlement: the body owns a
// goroutine; the caller cancels while it runs; the result must not settle
// before that goroutine has stopped.
func TestCancelAfterDispatchStopsOwnedWorkBeforeSettlement(t *testing.T) {
	h := newHarness(t)
	var workerStopped atomic.Bool
	started := make(chan struct{})
	h.echo("echo", func(d *Definition) {
		d.Execute = func(ctx context.Context, _ Arguments, _ *Exec) (any, error) {
			h.bodies.Add(1)
			done := make(chan struct{})
			go func() { // owned work
				defer close(done)
				<-ctx.Done()
				time.Sleep(10 * time.Millisecond) // quiescing takes a moment
				workerStopped.Store(true)
			}()
			close(started)
			<-done
			return nil, ctx.Err()
		}
	})
	h.allowAll()
	var stoppedAtSettlement atomic.Bool
	must(t, h.reg.Observe(h.scope, "check", func(ResultView) { stoppedAtSettlement.Store(workerStopped.Load()) }))
	p := h.pipeline(Options{})
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-started; cancel() }()
	st := NewState(req("echo", `{"text":"x"}`))
	res := p.Resume(ctx, st, nil)
	if res.Outcome != Cancelled || res.Code != CodeCancelled {
		t.Fatalf("outcome %s/%s", res.Outcome, res.Code)
	}
	if !stoppedAtSettlement.Load() {
		t.Fatal("the result settled before the owned work stopped")
	}
	if got, want := trace(st), traceHead+"Execute:Error "+traceTail+"Cancelled"; got != want {
		t.Errorf("trace %s, want %s", got, want)
	}
}

// TestCancellationReplacesOnlySuccess: after invocation, a success becomes a
// cancellation, but a more specific failure stays.
func TestCancellationReplacesOnlySuccess(t *testing.T) {
	for _, tc := range []struct {
		name string
		ret  error
		want Code
	}{
		{"success becomes cancelled", nil, CodeCancelled},
		{"a tool failure stays", errors.New("broken"), CodeToolError},
		{"a sandbox denial stays", Fail(CodeSandboxDenied, "escape"), CodeSandboxDenied},
		{"a timeout stays", Fail(CodeTimeout, "pod deadline"), CodeTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			h.echo("echo", func(d *Definition) {
				d.Execute = func(context.Context, Arguments, *Exec) (any, error) {
					h.bodies.Add(1)
					cancel() // the caller cancels while the body runs
					if tc.ret != nil {
						return nil, tc.ret
					}
					return "done", nil
				}
			})
			h.allowAll()
			res := h.pipeline(Options{}).Run(ctx, req("echo", `{"text":"x"}`))
			if res.Code != tc.want || h.bodies.Load() != 1 || h.results.Load() != 1 {
				t.Fatalf("code %s bodies %d results %d, want %s/1/1", res.Code, h.bodies.Load(), h.results.Load(), tc.want)
			}
			if res.Value != "" {
				t.Errorf("a cancelled call kept value %q", res.Value)
			}
		})
	}
}

// TestCancellationSaysWhy: a caller that cancels with a cause (the
// controllers say the call or its session was deleted) finds it in the
// result's message, before dispatch and while the body runs; a plain
// cancellation adds nothing.
func TestCancellationSaysWhy(t *testing.T) {
	why := errors.New("the ToolCall was deleted")
	for _, tc := range []struct {
		name          string
		cause         error
		beforeRunning bool
		want          string
	}{
		{"before dispatch", why, true, "the call was cancelled before its body was dispatched: the ToolCall was deleted"},
		{"while the body runs", why, false, "the call was cancelled while its body ran: the ToolCall was deleted"},
		{"without a cause", nil, false, "the call was cancelled while its body ran"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			if tc.beforeRunning {
				cancel(tc.cause)
			}
			h.echo("echo", func(d *Definition) {
				d.Execute = func(ctx context.Context, _ Arguments, _ *Exec) (any, error) {
					cancel(tc.cause)
					<-ctx.Done()
					return nil, ctx.Err()
				}
			})
			h.allowAll()
			res := h.pipeline(Options{}).Run(ctx, req("echo", `{"text":"x"}`))
			if res.Code != CodeCancelled || res.Message != tc.want {
				t.Errorf("%s %q, want cancelled %q", res.Code, res.Message, tc.want)
			}
		})
	}
}

// TestWrapperCannotDetachTheBodyFromItsCaller: a wrapper substitutes a
// context that is never cancelled; the caller's cancellation still reaches
// the body, because the registry re-fuses it before the body.
func TestWrapperCannotDetachTheBodyFromItsCaller(t *testing.T) {
	h := newHarness(t)
	started := make(chan struct{})
	var sawValue atomic.Bool
	type key struct{}
	h.echo("echo", func(d *Definition) {
		d.Execute = func(ctx context.Context, _ Arguments, _ *Exec) (any, error) {
			h.bodies.Add(1)
			sawValue.Store(ctx.Value(key{}) == "wrapper")
			close(started)
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(5 * time.Second):
				return "not cancelled", nil
			}
		}
	})
	h.allowAll()
	must(t, h.reg.WrapExecute(h.scope, "detach", func(_ context.Context, _ Call, next Next) (any, error) {
		return next(context.WithValue(context.Background(), key{}, "wrapper"))
	}))
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-started; cancel() }()
	res := h.pipeline(Options{}).Run(ctx, req("echo", `{"text":"x"}`))
	if res.Code != CodeCancelled {
		t.Fatalf("code %s: the body was not cancelled through the wrapper's context", res.Code)
	}
	if !sawValue.Load() {
		t.Error("the wrapper's substitute context did not reach the body")
	}
}

// TestStagesCannotRewriteTheInput: a listener mutating its decoded copy of
// the arguments changes nothing any later stage sees.
func TestStagesCannotRewriteTheInput(t *testing.T) {
	h := newHarness(t)
	var bodyText string
	h.echo("echo", func(d *Definition) {
		d.Execute = func(_ context.Context, a Arguments, e *Exec) (any, error) {
			h.bodies.Add(1)
			bodyText, _ = a.Field("text")
			return bodyText, nil
		}
	})
	must(t, h.reg.OnPreExecute(h.scope, "tamper", 0, func(_ context.Context, c Call) Decision {
		m := c.Args.Value().(map[string]any)
		m["text"] = "rm -rf /"
		c.Tool = "other"
		return Decision{Action: Allow}
	}))
	must(t, h.reg.AddGuard(h.scope, "tamper-too", func(c Call) (string, bool) {
		c.Args.Value().(map[string]any)["text"] = "again"
		return "", false
	}))
	res := h.pipeline(Options{}).Run(context.Background(), req("echo", `{"text":"safe"}`))
	if res.Outcome != Succeeded || bodyText != "safe" || res.Tool != "echo" {
		t.Fatalf("outcome %s, body saw %q, tool %q", res.Outcome, bodyText, res.Tool)
	}
}

// TestApprovalDeadlineFailsClosed: an approver that never answers is asked
// until the deadline anchored at the ask record, then the call is denied.
func TestApprovalDeadlineFailsClosed(t *testing.T) {
	h := newHarness(t)
	h.echo("echo", nil)
	must(t, h.reg.OnPreExecute(h.scope, "ask", 0, func(context.Context, Call) Decision { return Decision{Action: Ask} }))
	approver := &clockApprover{clock: h.clock, step: 4 * time.Minute}
	p := h.pipeline(Options{Approver: approver, ApprovalTimeout: 10 * time.Minute, PollInterval: time.Millisecond})
	st := NewState(req("echo", `{"text":"x"}`))
	res := p.Resume(context.Background(), st, nil)
	if res.Code != CodeApprovalExpired || res.Outcome != Denied || h.bodies.Load() != 0 {
		t.Fatalf("code %s outcome %s bodies %d", res.Code, res.Outcome, h.bodies.Load())
	}
	if approver.asked.Load() != 3 {
		t.Errorf("asked %d times, want 3 (at 0, 4 and 8 minutes)", approver.asked.Load())
	}
	if got, want := trace(st), "Call:Admitted PreExecute:Ask Approval:Expired "+traceTail+"Denied"; got != want {
		t.Errorf("trace %s, want %s", got, want)
	}
}

// clockApprover never answers; each question moves the clock.
type clockApprover struct {
	clock *fakeClock
	step  time.Duration
	asked atomic.Int32
}

func (a *clockApprover) Approve(context.Context, Question) (Answer, string) {
	a.asked.Add(1)
	a.clock.Advance(a.step)
	return AnswerPending, ""
}

// TestApproverSeesTheQuestion: the question carries the identity, the
// deciding rule and the deadline.
func TestApproverSeesTheQuestion(t *testing.T) {
	h := newHarness(t)
	h.echo("echo", nil)
	must(t, h.reg.OnPreExecute(h.scope, "ask-writes", 0, func(context.Context, Call) Decision {
		return Decision{Action: Ask, Message: "writes need a person"}
	}))
	var q Question
	p := h.pipeline(Options{ApprovalTimeout: time.Hour, Approver: approverFunc(func(_ context.Context, got Question) (Answer, string) {
		q = got
		return AllowedOnce, ""
	})})
	res := p.Run(context.Background(), req("echo", `{"text":"x"}`))
	if res.Outcome != Succeeded {
		t.Fatalf("outcome %s", res.Outcome)
	}
	if q.Reason != "ask-writes" || q.Message != "writes need a person" || q.Call.Token != res.Token ||
		!q.Deadline.Equal(h.clock.Now().Add(time.Hour)) {
		t.Errorf("question %+v", q)
	}
}

type approverFunc func(context.Context, Question) (Answer, string)

func (f approverFunc) Approve(ctx context.Context, q Question) (Answer, string) { return f(ctx, q) }

// TestTimeoutAndCancellationTheFirstWins: when both the attempt's timeout and
// the caller's cancellation happen while the body runs, the one that
// happened first is the outcome: a timeout followed by a cancellation stays a
// timeout, a cancellation followed by the deadline stays a cancellation. With
// and without a wrapper that substitutes the dispatch context.
func TestTimeoutAndCancellationTheFirstWins(t *testing.T) {
	const timeout = 30 * time.Millisecond
	for _, wrapped := range []bool{false, true} {
		for _, timeoutFirst := range []bool{true, false} {
			name := map[bool]string{true: "timeout then cancel", false: "cancel then deadline"}[timeoutFirst]
			if wrapped {
				name += " under a wrapper"
			}
			t.Run(name, func(t *testing.T) {
				h := newHarness(t)
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				var sawDeadline, sawExceeded bool
				h.echo("echo", func(d *Definition) {
					d.Timeout = timeout
					d.Execute = func(bctx context.Context, _ Arguments, _ *Exec) (any, error) {
						h.bodies.Add(1)
						_, sawDeadline = bctx.Deadline()
						if timeoutFirst {
							<-bctx.Done() // the deadline passes
							sawExceeded = errors.Is(bctx.Err(), context.DeadlineExceeded)
							cancel() // then the caller cancels, before the body returns
						} else {
							cancel()      // the caller cancels
							<-bctx.Done() // the body sees it
							time.Sleep(2 * timeout)
							// then the deadline passes, before the body returns
						}
						return nil, bctx.Err()
					}
				})
				h.allowAll()
				if wrapped {
					must(t, h.reg.WrapExecute(h.scope, "trace", func(ctx context.Context, _ Call, next Next) (any, error) {
						return next(context.WithValue(ctx, spanKey{}, "span"))
					}))
				}
				res := h.pipeline(Options{}).Run(ctx, req("echo", `{"text":"x"}`))
				want, outcome := CodeCancelled, Cancelled
				if timeoutFirst {
					want, outcome = CodeTimeout, TimedOut
				}
				if res.Code != want || res.Outcome != outcome || h.bodies.Load() != 1 || h.results.Load() != 1 {
					t.Fatalf("%s/%s (%s), bodies %d results %d; want %s/%s, 1, 1",
						res.Outcome, res.Code, res.Message, h.bodies.Load(), h.results.Load(), outcome, want)
				}
				if !sawDeadline {
					t.Error("the body's context did not carry the attempt's deadline")
				}
				if timeoutFirst && !sawExceeded {
					t.Error("the body did not see its timeout as context.DeadlineExceeded")
				}
			})
		}
	}
}

// TestTimeoutAndCancellationTheFirstWinsAcrossSteps: a Reattach body still
// stopping its work answers Pending after the timeout fired; the caller's
// cancellation that arrives before the work is gone does not turn the
// timeout into a cancellation (and the reverse order stays a cancellation).
func TestTimeoutAndCancellationTheFirstWinsAcrossSteps(t *testing.T) {
	for _, timeoutFirst := range []bool{true, false} {
		name := map[bool]string{true: "timeout then cancel", false: "cancel then deadline"}[timeoutFirst]
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			invocations := 0
			h.echo("echo", func(d *Definition) {
				d.Reattach, d.Timeout = true, time.Minute
				d.Execute = func(bctx context.Context, _ Arguments, _ *Exec) (any, error) {
					invocations++
					if invocations < 3 || bctx.Err() == nil {
						return nil, Pending // running, then still stopping
					}
					return nil, bctx.Err() // the work is gone
				}
			})
			h.allowAll()
			p := h.pipeline(Options{})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			st := NewState(req("echo", `{"text":"x"}`))
			for st.Next != StageExecute {
				p.Step(ctx, st)
			}
			first := func() { h.clock.Advance(2 * time.Minute) }
			second := cancel
			if !timeoutFirst {
				first, second = cancel, func() { h.clock.Advance(2 * time.Minute) }
			}
			if progress, _ := p.Step(ctx, st); progress != Waiting { // started
				t.Fatalf("step 1: %v", progress)
			}
			first()
			if progress, _ := p.Step(ctx, st); progress != Waiting { // stopping
				t.Fatalf("step 2: %v", progress)
			}
			second()
			res := p.Resume(ctx, st, nil) // stopped
			want := map[bool]Code{true: CodeTimeout, false: CodeCancelled}[timeoutFirst]
			if res.Code != want || invocations != 3 {
				t.Fatalf("%s/%s (%s) after %d invocations, want %s after 3", res.Outcome, res.Code, res.Message, invocations, want)
			}
		})
	}
}

// TestCancelledAtExecuteEntryNeverEntersTheBody: the caller cancels after the
// dispatch boundary was persisted but before the execute stage runs; the
// body (and its wrappers) never run, and the call settles once, cancelled.
func TestCancelledAtExecuteEntryNeverEntersTheBody(t *testing.T) {
	h := newHarness(t)
	h.echo("echo", nil)
	h.allowAll()
	var wrapperRuns atomic.Int32
	must(t, h.reg.WrapExecute(h.scope, "metrics", func(ctx context.Context, _ Call, next Next) (any, error) {
		wrapperRuns.Add(1)
		return next(ctx)
	}))
	p := h.pipeline(Options{})
	ctx, cancel := context.WithCancel(context.Background())
	st := NewState(req("echo", `{"text":"x"}`))
	for st.Next != StageExecute {
		p.Step(ctx, st)
	}
	cancel() // after the dispatch boundary, before the body is entered
	res := p.Resume(ctx, st, nil)
	if res.Outcome != Cancelled || res.Code != CodeCancelled || h.bodies.Load() != 0 || wrapperRuns.Load() != 0 || h.results.Load() != 1 {
		t.Fatalf("%s/%s, bodies %d wrappers %d results %d; want Cancelled/cancelled, 0, 0, 1",
			res.Outcome, res.Code, h.bodies.Load(), wrapperRuns.Load(), h.results.Load())
	}
	if got, want := trace(st), traceHead+"Execute:Cancelled "+traceTail+"Cancelled"; got != want {
		t.Errorf("trace %s, want %s", got, want)
	}
}

// TestCancelledReattachBodyIsStillCalledToStopItsWork: a Reattach body whose
// attempt already started (its work runs elsewhere, in a pod) is invoked
// with the cancelled signal, so it can stop that work before the call
// settles: in this process (it answered Pending) and after a restart.
func TestCancelledReattachBodyIsStillCalledToStopItsWork(t *testing.T) {
	for _, restarted := range []bool{false, true} {
		name := map[bool]string{false: "answered pending here", true: "resumed after a restart"}[restarted]
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			var running, stopped atomic.Bool
			var resumedWithCancel atomic.Bool
			h.echo("echo", func(d *Definition) {
				d.Reattach = true
				d.Execute = func(bctx context.Context, _ Arguments, e *Exec) (any, error) {
					h.bodies.Add(1)
					if !e.Resumed {
						running.Store(true) // the work starts, elsewhere
						return nil, Pending
					}
					if bctx.Err() != nil {
						resumedWithCancel.Store(true)
						running.Store(false)
						stopped.Store(true)
						return nil, bctx.Err()
					}
					return nil, Pending
				}
			})
			h.allowAll()
			p := h.pipeline(Options{})
			ctx, cancel := context.WithCancel(context.Background())
			st := NewState(req("echo", `{"text":"x"}`))
			for st.Next != StageExecute {
				p.Step(ctx, st)
			}
			if progress, _ := p.Step(ctx, st); progress != Waiting {
				t.Fatalf("the body did not start: %v", progress)
			}
			if restarted {
				st.SetLive(LiveAttempt{})
			}
			cancel()
			res := p.Resume(ctx, st, nil)
			if res.Outcome != Cancelled || res.Code != CodeCancelled || h.results.Load() != 1 {
				t.Fatalf("%s/%s results %d", res.Outcome, res.Code, h.results.Load())
			}
			if h.bodies.Load() != 2 || !resumedWithCancel.Load() || !stopped.Load() || running.Load() {
				t.Fatalf("invocations %d, re-invoked with the cancelled signal %v, work stopped %v",
					h.bodies.Load(), resumedWithCancel.Load(), stopped.Load())
			}
		})
	}
}

// TestApprovalDeadlineIsTheOneAsked: the deadline a question is asked with
// is the one enforced, whatever the options of the pipeline that resumes
// it: a profile whose timeout is raised while a question is open does not
// keep an expired question open (the person saw the first deadline, and
// approving after it must not run the body).
func TestApprovalDeadlineIsTheOneAsked(t *testing.T) {
	h := newHarness(t)
	h.echo("echo", nil)
	must(t, h.reg.OnPreExecute(h.scope, "ask", 0, func(context.Context, Call) Decision { return Decision{Action: Ask} }))
	var asked []time.Time
	pending := approverFunc(func(_ context.Context, q Question) (Answer, string) {
		asked = append(asked, q.Deadline)
		return AnswerPending, ""
	})
	st := NewState(req("echo", `{"text":"x"}`))
	first := h.pipeline(Options{Approver: pending, ApprovalTimeout: time.Minute, PollInterval: time.Second})
	for st.Next != StageApproval || len(asked) == 0 {
		first.Step(context.Background(), st)
	}
	deadline := h.clock.Now().Add(time.Minute)
	// Restored (through JSON, as a checkpoint is) by a pipeline of the
	// profile's next generation, whose timeout is an hour.
	data, err := json.Marshal(st)
	must(t, err)
	restored := &State{}
	must(t, json.Unmarshal(data, restored))
	h.clock.Advance(2 * time.Minute)
	approve := approverFunc(func(_ context.Context, q Question) (Answer, string) {
		asked = append(asked, q.Deadline)
		return AllowedOnce, ""
	})
	res := h.pipeline(Options{Approver: approve, ApprovalTimeout: time.Hour, PollInterval: time.Second}).Resume(context.Background(), restored, nil)
	if res.Code != CodeApprovalExpired || h.bodies.Load() != 0 {
		t.Fatalf("approved 2 minutes after a 1-minute deadline: %s %s, %d bodies", res.Outcome, res.Code, h.bodies.Load())
	}
	for _, d := range asked {
		if !d.Equal(deadline) {
			t.Errorf("asked with deadline %s, want %s", d, deadline)
		}
	}
}
