package pipeline

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
)

// attemptOutcome is what one attempt of a body does.
type attemptOutcome byte

const (
	attemptSucceeds attemptOutcome = iota
	attemptToolError
	attemptTimeout
	attemptEvicted
	attemptSandboxDenied
	attemptLost // its work is lost (a manager gone): its result is unknown
	attemptOutcomes
)

func (o attemptOutcome) code() Code {
	return [...]Code{"", CodeToolError, CodeTimeout, CodeSandboxEvicted, CodeSandboxDenied, CodeInterrupted}[o]
}

func (o attemptOutcome) result() (any, error) {
	switch o {
	case attemptSucceeds:
		return "done", nil
	case attemptToolError:
		return nil, errors.New("the tool failed")
	case attemptLost:
		return nil, ErrAttemptLost
	default:
		return nil, Fail(o.code(), "attempt failed: "+string(o.code()))
	}
}

// Where the caller cancels, relative to the attempts.
const (
	cancelNever = iota
	cancelBeforeDispatch
	cancelWhileRunning // while attempt k's body runs
	cancelInBackoff    // after attempt k returned, during its retry backoff
	cancelPoints
)

// precedenceModel is the seed's rule, independent of the pipeline: a call
// cancelled before dispatch is cancelled; after invocation, cancellation
// replaces only a success, and a failure (tool, timeout, sandbox) stays the
// outcome, as does a lost attempt (its result is unknown: no success to
// replace); a cancelled call is never dispatched again. An idempotent body
// is retried for a retryable failure within its budget, and dispatched
// again after an eviction within the bound of lost attempts.
func precedenceModel(idempotent bool, budget int, outcomes []attemptOutcome, cancelAt, cancelAttempt int) (Code, int) {
	if cancelAt == cancelBeforeDispatch {
		return CodeCancelled, 0
	}
	for attempt := 1; ; attempt++ {
		o := attemptSucceeds
		if attempt <= len(outcomes) {
			o = outcomes[attempt-1]
		}
		cancelled := cancelAt != cancelNever && attempt == cancelAttempt
		if o == attemptSucceeds {
			if cancelled {
				return CodeCancelled, attempt
			}
			return "", attempt
		}
		again := idempotent && (retryable(o.code()) && attempt < budget ||
			(o == attemptEvicted || o == attemptLost) && attempt < max(budget, maxInterruptedAttempts))
		if cancelled || !again {
			return o.code(), attempt
		}
	}
}

// FuzzOutcomePrecedence generates a body's attempts (each succeeds or
// fails in one of the ways a body fails), its retry budget, and where the
// caller cancels (never, before dispatch, while attempt k runs, or in the
// backoff after it), and checks the pipeline settles as the seed's model
// says, with as many bodies run.
func FuzzOutcomePrecedence(f *testing.F) {
	// The instance: an idempotent body with a budget fails while the
	// caller cancels; it settled cancelled "before its body was
	// dispatched", though its body ran.
	// (The last argument is the attempt, from 0.)
	f.Add(true, uint8(3), []byte{1, 0}, uint8(cancelWhileRunning), uint8(0))
	f.Add(true, uint8(3), []byte{2, 0}, uint8(cancelInBackoff), uint8(0))
	f.Add(true, uint8(1), []byte{3, 3, 0}, uint8(cancelWhileRunning), uint8(1))
	f.Add(true, uint8(3), []byte{1, 1, 0}, uint8(cancelNever), uint8(0))
	f.Add(false, uint8(3), []byte{0}, uint8(cancelWhileRunning), uint8(1))
	f.Add(true, uint8(2), []byte{4}, uint8(cancelBeforeDispatch), uint8(0))
	f.Add(true, uint8(2), []byte{5, 0}, uint8(cancelWhileRunning), uint8(0))
	f.Add(false, uint8(2), []byte{5, 0}, uint8(cancelNever), uint8(0))
	f.Fuzz(func(t *testing.T, idempotent bool, budgetByte uint8, attempts []byte, cancelByte, attemptByte uint8) {
		budget := int(budgetByte % 5)
		outcomes := make([]attemptOutcome, 0, 6)
		for _, b := range attempts[:min(len(attempts), 6)] {
			outcomes = append(outcomes, attemptOutcome(b%byte(attemptOutcomes)))
		}
		cancelAt, cancelAttempt := int(cancelByte%cancelPoints), int(attemptByte%6)+1
		if _, bodies := precedenceModel(idempotent, budget, outcomes, cancelNever, 0); cancelAt == cancelInBackoff &&
			(bodies <= cancelAttempt || cancelAttempt > len(outcomes) || !retryable(outcomes[cancelAttempt-1].code()) ||
				slices.ContainsFunc(outcomes[:cancelAttempt-1], func(o attemptOutcome) bool { return retryable(o.code()) })) {
			// Attempt k is the last, or is followed at once (an eviction,
			// lost work): it has no backoff to cancel in. Or an earlier
			// attempt has a backoff, as long as k's (one per tool), which
			// nothing would end.
			cancelAt = cancelNever
		}
		wantCode, wantBodies := precedenceModel(idempotent, budget, outcomes, cancelAt, cancelAttempt)

		h := newHarness(t)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		if cancelAt == cancelBeforeDispatch {
			cancel()
		}
		h.echo("echo", func(d *Definition) {
			d.Idempotent, d.MaxAttempts = idempotent, budget
			// A body whose attempts can be lost runs elsewhere (a pod).
			d.Reattach = slices.Contains(outcomes, attemptLost)
			if cancelAt == cancelInBackoff {
				// Long enough that only the cancellation ends it.
				d.RetryBackoff = time.Hour
			}
			d.Execute = func(context.Context, Arguments, *Exec) (any, error) {
				n := int(h.bodies.Add(1))
				o := attemptSucceeds
				if n <= len(outcomes) {
					o = outcomes[n-1]
				}
				switch {
				case cancelAt == cancelWhileRunning && n == cancelAttempt:
					cancel()
				case cancelAt == cancelInBackoff && n == cancelAttempt:
					go func() { time.Sleep(time.Millisecond); cancel() }()
				}
				return o.result()
			}
		})
		h.allowAll()
		done := make(chan Result, 1)
		go func() { done <- h.pipeline(Options{}).Run(ctx, req("echo", `{"text":"x"}`)) }()
		var res Result
		select {
		case res = <-done:
		case <-time.After(30 * time.Second):
			cancel()
			t.Fatalf("no result in 30 s (a backoff nobody ended: the model expected %q after %d bodies)", wantCode, wantBodies)
		}
		attemptsSaid := fmt.Sprintf("idempotent %v, budget %d, attempts %v, cancel %d at attempt %d", idempotent, budget, outcomes, cancelAt, cancelAttempt)
		if res.Code != wantCode || int(h.bodies.Load()) != wantBodies || h.results.Load() != 1 {
			t.Fatalf("%s: settled %q (%s) after %d bodies, %d results; the seed's model: %q after %d bodies",
				attemptsSaid, res.Code, res.Message, h.bodies.Load(), h.results.Load(), wantCode, wantBodies)
		}
		if wantBodies > 0 && res.Code == CodeCancelled && res.Message == "the call was cancelled before its body was dispatched" {
			t.Fatalf("%s: a call whose body ran says it was cancelled before dispatch", attemptsSaid)
		}
	})
}
