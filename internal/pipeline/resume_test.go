package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

var errCrash = errors.New("crash")

// runUntilCrash runs a call and "crashes" right after the k-th boundary was
// persisted, returning the persisted state as JSON.
func runUntilCrash(p *Pipeline, r Request, k int) (persisted []byte, finished bool) {
	n := 0
	st := NewState(r)
	res := p.Resume(context.Background(), st, func(s *State) error {
		n++
		data, err := json.Marshal(s)
		if err != nil {
			panic(err)
		}
		persisted = data
		if n == k {
			return errCrash
		}
		return nil
	})
	return persisted, res.Token != ""
}

// TestResumeAfterEveryBoundary stops the call after each boundary, restores
// the persisted state in a fresh pipeline and state, and resumes: the result
// is the one an uninterrupted run gives and the body ran once — except after
// the dispatch boundary of a body not declared idempotent, where the attempt
// may have started: it is never run again and settles as interrupted.
func TestResumeAfterEveryBoundary(t *testing.T) {
	for _, idempotent := range []bool{false, true} {
		name := map[bool]string{false: "not idempotent", true: "idempotent"}[idempotent]
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			h.echo("echo", func(d *Definition) {
				d.Idempotent = idempotent
				inner := d.Execute
				d.Execute = func(ctx context.Context, a Arguments, e *Exec) (any, error) {
					e.DeferContext(Context{Message: "later"})
					return inner(ctx, a, e)
				}
			})
			h.allowAll()
			must(t, h.reg.OnPostExecute(h.scope, "tag", 0, func(Call, PostInput) PostDecision {
				return PostDecision{Contexts: []string{"checked"}}
			}))
			r := req("echo", `{"text":"hello"}`)

			ref := NewState(r)
			want := h.pipeline(Options{}).Resume(context.Background(), ref, nil)
			boundaries := len(ref.Records)

			for k := 1; k <= boundaries; k++ {
				h.bodies.Store(0)
				data, _ := runUntilCrash(h.pipeline(Options{}), r, k)
				restored := &State{}
				must(t, json.Unmarshal(data, restored))
				afterDispatch := restored.Next == StageExecute
				got := h.pipeline(Options{}).Resume(context.Background(), restored, nil)

				if afterDispatch && !idempotent {
					if got.Code != CodeInterrupted || h.bodies.Load() != 0 {
						t.Errorf("k=%d: %s with %d body runs, want interrupted and none", k, got.Code, h.bodies.Load())
					}
					continue
				}
				want.Token = got.Token // each run mints its own token; everything else must match
				if !reflect.DeepEqual(got, want) {
					t.Errorf("k=%d (resumed at %s): result\n got %+v\nwant %+v", k, restored.Next, got, want)
				}
				if h.bodies.Load() != 1 {
					t.Errorf("k=%d (resumed at %s): body ran %d times in all, want 1", k, restored.Next, h.bodies.Load())
				}
			}
		})
	}
}

// TestResumeReattachesToAStartedAttempt: a Reattach body (a pod with a
// deterministic name) is re-invoked with Resumed set instead of being
// started again, and may answer Pending until its work is done.
func TestResumeReattachesToAStartedAttempt(t *testing.T) {
	h := newHarness(t)
	polls := 0
	var resumedFlags []bool
	h.echo("echo", func(d *Definition) {
		d.Reattach = true
		d.Execute = func(_ context.Context, _ Arguments, e *Exec) (any, error) {
			resumedFlags = append(resumedFlags, e.Resumed)
			if !e.Resumed {
				h.bodies.Add(1) // the work starts only here
			}
			polls++
			if polls < 3 {
				return nil, Pending
			}
			return "done", nil
		}
	})
	h.allowAll()
	r := req("echo", `{"text":"x"}`)
	// Crash right after the dispatch boundary.
	var data []byte
	for k := 1; ; k++ {
		d, _ := runUntilCrash(h.pipeline(Options{}), r, k)
		st := &State{}
		must(t, json.Unmarshal(d, st))
		if st.Next == StageExecute {
			data = d
			break
		}
	}
	restored := &State{}
	must(t, json.Unmarshal(data, restored))
	h.bodies.Store(0)
	polls = 0
	resumedFlags = nil
	got := h.pipeline(Options{PollInterval: 1}).Resume(context.Background(), restored, nil)
	if got.Outcome != Succeeded || got.Value != `"done"` {
		t.Fatalf("outcome %s %s", got.Outcome, got.Code)
	}
	if h.bodies.Load() != 0 {
		t.Errorf("the work was started again %d times", h.bodies.Load())
	}
	for i, r := range resumedFlags {
		if !r {
			t.Errorf("invocation %d was not marked resumed", i)
		}
	}
}

// TestPendingFromABodyThatCannotReattach is a wrapper-level contract
// violation: only Reattach bodies may answer Pending.
func TestPendingFromABodyThatCannotReattach(t *testing.T) {
	h := newHarness(t)
	h.echo("echo", func(d *Definition) {
		d.Execute = func(context.Context, Arguments, *Exec) (any, error) { return nil, Pending }
	})
	h.allowAll()
	res := h.pipeline(Options{}).Run(context.Background(), req("echo", `{"text":"x"}`))
	if res.Outcome != Failed || res.Code != CodeToolError {
		t.Fatalf("outcome %s/%s", res.Outcome, res.Code)
	}
}

// TestTimeoutIsAnchoredAtThePersistedStart: a restarted driver measures the
// timeout from the attempt start in the state, not from its own start.
func TestTimeoutIsAnchoredAtThePersistedStart(t *testing.T) {
	h := newHarness(t)
	var sawExpired bool
	h.echo("echo", func(d *Definition) {
		d.Reattach = true
		d.Timeout = time.Minute
		d.Execute = func(ctx context.Context, _ Arguments, e *Exec) (any, error) {
			sawExpired = ctx.Err() != nil
			if !e.Resumed {
				return nil, Pending
			}
			<-ctx.Done()
			return nil, ctx.Err()
		}
	})
	h.allowAll()
	st := NewState(req("echo", `{"text":"x"}`))
	p := h.pipeline(Options{})
	for st.Next != StageExecute {
		p.Step(context.Background(), st)
	}
	data, err := json.Marshal(st)
	must(t, err)
	restored := &State{}
	must(t, json.Unmarshal(data, restored))

	h.clock.Advance(2 * time.Minute) // the manager was down for two minutes
	res := h.pipeline(Options{}).Resume(context.Background(), restored, nil)
	if res.Code != CodeTimeout || res.Outcome != TimedOut {
		t.Fatalf("outcome %s/%s, want a timeout", res.Outcome, res.Code)
	}
	if !sawExpired {
		t.Error("the resumed body got a fresh timeout instead of the remainder")
	}
}

// TestABodyThatTimesItselfKeepsItsResult: a body that measures its own
// timeout (a sandbox runner, from the moment the body starts) and finished
// within it gets its result even when the driver comes back long after the
// attempt's start plus the timeout (the manager was down, or the pod waited
// to be scheduled); its own timeout report is the timeout.
func TestABodyThatTimesItselfKeepsItsResult(t *testing.T) {
	for _, report := range []error{nil, Fail(CodeTimeout, "the body exceeded its 1m0s timeout")} {
		h := newHarness(t)
		h.echo("echo", func(d *Definition) {
			d.Reattach, d.TimesItself = true, true
			d.Timeout = time.Minute
			d.Execute = func(ctx context.Context, _ Arguments, e *Exec) (any, error) {
				if ctx.Err() != nil {
					t.Errorf("the pipeline set its own deadline: %v", ctx.Err())
				}
				if !e.Resumed {
					return nil, Pending
				}
				if report != nil {
					return nil, report
				}
				return "finished in budget", nil
			}
		})
		h.allowAll()
		st := NewState(req("echo", `{"text":"x"}`))
		p := h.pipeline(Options{})
		for st.Next != StageExecute {
			p.Step(context.Background(), st)
		}
		h.clock.Advance(5 * time.Minute) // no manager looked for five minutes
		res := p.Resume(context.Background(), st, nil)
		switch {
		case report == nil && (res.Outcome != Succeeded || res.Value != `"finished in budget"`):
			t.Fatalf("outcome %s/%s %v, want the body's result", res.Outcome, res.Code, res.Value)
		case report != nil && (res.Outcome != TimedOut || res.Code != CodeTimeout):
			t.Fatalf("outcome %s/%s, want the body's own timeout", res.Outcome, res.Code)
		}
	}
}

// TestLostAttempt: a Reattach body that finds its attempt's work gone is
// treated as interrupted: never run twice unless idempotent.
func TestLostAttempt(t *testing.T) {
	for _, idempotent := range []bool{false, true} {
		h := newHarness(t)
		h.echo("echo", func(d *Definition) {
			d.Reattach, d.Idempotent = true, idempotent
			d.Execute = func(_ context.Context, _ Arguments, e *Exec) (any, error) {
				if e.Resumed {
					return nil, ErrAttemptLost
				}
				h.bodies.Add(1)
				return "ran", nil
			}
		})
		h.allowAll()
		st := NewState(req("echo", `{"text":"x"}`))
		p := h.pipeline(Options{})
		for st.Next != StageExecute {
			p.Step(context.Background(), st)
		}
		st.SetLive(LiveAttempt{}) // as after a restart
		res := p.Resume(context.Background(), st, nil)
		want := map[bool]Code{false: CodeInterrupted, true: ""}[idempotent]
		if res.Code != want || h.bodies.Load() != map[bool]int32{false: 0, true: 1}[idempotent] {
			t.Errorf("idempotent=%v: code %q bodies %d", idempotent, res.Code, h.bodies.Load())
		}
	}
}

// TestAttemptsLostToTheBound: an idempotent body whose attempts keep being
// lost is dispatched again up to the bound, then settles as interrupted,
// saying so (not that the body is not idempotent).
func TestAttemptsLostToTheBound(t *testing.T) {
	h := newHarness(t)
	h.echo("echo", func(d *Definition) {
		d.Reattach, d.Idempotent = true, true
		d.Execute = func(context.Context, Arguments, *Exec) (any, error) {
			h.bodies.Add(1)
			return nil, ErrAttemptLost // every attempt's work is gone
		}
	})
	h.allowAll()
	st := NewState(req("echo", `{"text":"x"}`))
	p := h.pipeline(Options{})
	for i := 0; i < 100 && !st.Done(); i++ {
		p.Step(context.Background(), st)
	}
	if !st.Done() || st.Result.Code != CodeInterrupted {
		t.Fatalf("done %v, result %+v: want interrupted", st.Done(), st.Result)
	}
	if st.Attempt != maxInterruptedAttempts {
		t.Fatalf("%d attempts, want %d", st.Attempt, maxInterruptedAttempts)
	}
	if strings.Contains(st.Result.Message, "not idempotent") || !strings.Contains(st.Result.Message, "3") {
		t.Fatalf("message %q: an idempotent body is not said to be otherwise, and the bound is named", st.Result.Message)
	}
}

// TestTheStateNamesWhereTheAttemptRan: what a runner says of where the
// attempt runs stays in the state, for a success and for a failure (the
// pod of a failed attempt is the one to look at), and is persisted.
func TestTheStateNamesWhereTheAttemptRan(t *testing.T) {
	for _, fails := range []bool{false, true} {
		h := newHarness(t)
		h.echo("echo", func(d *Definition) {
			inner := d.Execute
			d.Execute = func(ctx context.Context, a Arguments, e *Exec) (any, error) {
				e.Sandbox = "pod-a1"
				if fails {
					return nil, Fail(CodeSandboxOOMKilled, "out of memory")
				}
				return inner(ctx, a, e)
			}
		})
		h.allowAll()
		st := NewState(req("echo", `{"text":"hello"}`))
		var persisted []byte
		res := h.pipeline(Options{}).Resume(context.Background(), st, func(s *State) error {
			data, err := json.Marshal(s)
			persisted = data
			return err
		})
		if fails != (res.Outcome != Succeeded) {
			t.Fatalf("fails=%v: outcome %s", fails, res.Outcome)
		}
		restored := &State{}
		must(t, json.Unmarshal(persisted, restored))
		if st.Sandbox != "pod-a1" || restored.Sandbox != "pod-a1" {
			t.Errorf("fails=%v: the state names %q, persisted %q; want pod-a1", fails, st.Sandbox, restored.Sandbox)
		}
	}
}

// preparingRunner prepares each attempt's sandbox as it is dispatched and
// names it; it runs nothing itself.
type preparingRunner struct {
	asked []int
	ran   bool // the body ran before its boundary named the sandbox
	st    *State
}

func (r *preparingRunner) Prepare(_ context.Context, _ Request, attempt int, _ time.Time) string {
	r.asked = append(r.asked, attempt)
	return fmt.Sprintf("pod-a%d", attempt)
}

func (r *preparingRunner) Run(context.Context, any, Arguments, *Exec) (string, error) {
	r.ran = r.st.Sandbox == ""
	return `"ok"`, nil
}

// TestARunnerPreparesEachAttemptAtItsDispatch: a Runner that can prepare
// (Preparer) is asked once per attempt as the attempt is dispatched, and
// the dispatch boundary, persisted before the body, already names its
// sandbox.
func TestARunnerPreparesEachAttemptAtItsDispatch(t *testing.T) {
	h := newHarness(t)
	h.echo("echo", nil)
	h.allowAll()
	r := &preparingRunner{}
	p := h.pipeline(Options{Runner: r})
	st := NewState(req("echo", `{"text":"hello"}`))
	r.st = st
	for st.Next != StageExecute {
		if st.Done() {
			t.Fatalf("settled before its body: %+v", st.Failure)
		}
		p.Step(context.Background(), st)
	}
	if len(r.asked) != 1 || r.asked[0] != 1 || st.Sandbox != "pod-a1" {
		t.Fatalf("at the dispatch boundary: asked %v, the state names %q; want attempt 1 asked once and pod-a1", r.asked, st.Sandbox)
	}
	if r.ran {
		t.Error("the body ran before the boundary named its sandbox")
	}
}
