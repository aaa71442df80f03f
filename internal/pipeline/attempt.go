package pipeline

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"time"
)

// The attempt machine: execute's one dispatch of the body, through the
// wrappers, telling the body's own outcome from what the wrappers returned.

// codePending and codeLost mark a Reattach body's Pending and
// ErrAttemptLost answers inside invoke.
const (
	codePending Code = "pending"
	codeLost    Code = "lost"
)

// attempt is one dispatch of the body: what invoke needs to tell the body's
// own outcome from what the wrappers returned, and whether the timeout fired.
type attempt struct {
	p        *Pipeline
	st       *State
	def      *Definition
	exec     *Exec
	caller   context.Context
	wrapped  bool // wrappers surround the body
	calls    int
	panicked bool
	// mu guards closed, calls and inflight: a wrapper may call next from
	// another goroutine. closed is set once the wrappers returned: next
	// then runs nothing. inflight counts the bodies in flight (read under
	// mu), running waits for them to return; abort stops them.
	mu       sync.Mutex
	closed   bool
	inflight int
	running  sync.WaitGroup
	abort    context.CancelCauseFunc
	// value and err are the body's own outcome. With wrappers, a successful
	// value is frozen when the body returns (frozen, and its canonical text
	// canon, or canonErr when it is not JSON), so that nothing a wrapper
	// does with it afterwards reaches the result.
	value    any
	err      error
	frozen   any
	canon    string
	canonErr error
	// timedOut: the attempt's deadline passed before the caller cancelled
	// (decided when the body returned).
	timedOut bool
}

// errAttemptTimeout is the cause of an attempt's timeout; it wraps
// context.DeadlineExceeded.
var errAttemptTimeout = fmt.Errorf("the attempt's timeout passed: %w", context.DeadlineExceeded)

// body is the innermost Next: it re-fuses the caller's cancellation,
// applies the timeout anchored at the persisted attempt start, and runs the
// body once.
func (a *attempt) body(wctx context.Context) (any, error) {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil, Fail(CodeWrapperFailed, "a wrapper dispatched the body after its attempt ended")
	}
	a.calls++
	if a.calls > 1 {
		a.mu.Unlock()
		return nil, Fail(CodeWrapperFailed, "a wrapper dispatched the body twice in one attempt")
	}
	a.inflight++
	a.running.Add(1)
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		a.inflight--
		a.mu.Unlock()
		a.running.Done()
	}()
	bctx, timeout, stop := a.context(wctx)
	a.value, a.err = a.run(bctx)
	// Which came first is decided now, before the contexts are released:
	// the timeout context is derived from the caller's, so its cause is
	// errAttemptTimeout only when the deadline passed before the caller
	// cancelled.
	a.timedOut = timeout != nil && context.Cause(timeout) == errAttemptTimeout
	stop()
	if a.wrapped && a.err == nil {
		a.freeze()
	}
	return a.value, a.err
}

func (a *attempt) run(ctx context.Context) (v any, err error) {
	defer func() {
		if r := recover(); r != nil {
			a.panicked = true
			v, err = nil, Fail(CodeToolPanic, "the tool body panicked")
		}
	}()
	return a.def.Execute(ctx, a.exec.Call.Args, a.exec)
}

// context is the body's context: the wrapper's, fused with the caller's
// cancellation and the attempt's timeout. The timeout context is derived
// from the caller's directly (never through a wrapper's), so the order of
// the two is exact.
func (a *attempt) context(wctx context.Context) (bctx, timeout context.Context, stop func()) {
	if a.def.Timeout <= 0 || a.def.TimesItself {
		bctx, stop = fuse(wctx, a.caller)
		return bctx, nil, stop
	}
	deadline := a.st.AttemptStartedAt.Add(a.def.Timeout)
	timeout, cancel := context.WithTimeoutCause(a.caller, deadline.Sub(a.p.opts.Clock.Now()), errAttemptTimeout)
	if wctx == a.caller {
		return timeout, timeout, cancel
	}
	fused, unfuse := fuse(wctx, timeout)
	return timedContext{fused, timeout}, timeout, func() { unfuse(); cancel() }
}

// freeze copies a successful value when the body returns.
func (a *attempt) freeze() {
	v, err := toLossless(a.value)
	if err == nil {
		a.canon, err = CanonicalJSON(v)
	}
	if err != nil {
		a.canonErr = err
		return
	}
	a.frozen = copyValue(v, nil)
}

// sameValue reports whether v, returned by the outermost wrapper, is the
// body's value unchanged.
func (a *attempt) sameValue(v any) bool {
	if a.canonErr != nil {
		return identical(v, a.value)
	}
	lv, err := toLossless(v)
	if err != nil {
		return false
	}
	canon, err := CanonicalJSON(lv)
	return err == nil && canon == a.canon
}

// errWrapperReturned is why a body still running when its wrappers
// returned is stopped.
var errWrapperReturned = errors.New("an execute wrapper returned while the body ran")

// end closes the attempt once the wrappers returned: next runs nothing
// more, and a body still running (a wrapper that gave up on it) is stopped
// and awaited, since nothing of an attempt may outlive its call's
// settlement; that is a wrapper failure.
func (a *attempt) end() *Failure {
	a.mu.Lock()
	a.closed = true
	running := a.inflight > 0
	a.mu.Unlock()
	if !running {
		return nil
	}
	a.abort(errWrapperReturned)
	a.running.Wait()
	return &Failure{Code: CodeWrapperFailed, Message: "an execute wrapper returned while the body ran; the body was stopped"}
}

// wrapperFailure checks what the outermost wrapper returned. A wrapper may
// substitute the dispatch signal and nothing else: it must dispatch the body
// exactly once and return the body's own outcome (value or failure)
// unchanged.
func (a *attempt) wrapperFailure(value any, err error) *Failure {
	if !a.wrapped {
		return nil // next is the body itself
	}
	var f *Failure
	wrapperCode := err != nil && errors.As(err, &f) && f.Code == CodeWrapperFailed
	switch {
	case a.calls == 0 && err == nil:
		return &Failure{Code: CodeWrapperFailed, Message: "a wrapper returned without dispatching the body"}
	case a.calls > 1:
		return &Failure{Code: CodeWrapperFailed, Message: "a wrapper dispatched the body twice in one attempt"}
	case wrapperCode && (a.calls == 0 || !identical(err, a.err)):
		return f // a panicking wrapper, or one reporting its own failure
	case a.calls == 0:
		return &Failure{Code: CodeWrapperFailed, Message: "an execute wrapper failed: " + bounded(err.Error())}
	case identical(err, a.err):
		if a.err == nil && !a.sameValue(value) {
			return &Failure{Code: CodeWrapperFailed, Message: "an execute wrapper replaced the body's value"}
		}
		return nil
	case err == nil:
		return &Failure{Code: CodeWrapperFailed, Message: "an execute wrapper replaced the body's failure with a success"}
	default:
		return &Failure{Code: CodeWrapperFailed, Message: "an execute wrapper failed: " + bounded(err.Error())}
	}
}

// identical reports whether x and y are the same value, without panicking on
// values that are not comparable.
func identical(x, y any) bool {
	if x == nil || y == nil {
		return x == nil && y == nil
	}
	if reflect.TypeOf(x) != reflect.TypeOf(y) {
		return false
	}
	if reflect.ValueOf(x).Comparable() {
		return x == y || x != x && y != y // NaN is itself
	}
	return reflect.DeepEqual(x, y)
}

// invoke calls the wrappers (first registered outermost) around the body and
// classifies the body's own outcome; a wrapper that returns anything else
// fails the call (wrapper_failed).
func (p *Pipeline) invoke(ctx context.Context, st *State, snap snapshot, exec *Exec) (any, *Failure) {
	def := &snap.tool.def
	// The body's caller context is ctx, and ends the attempt's owned work
	// when a wrapper returns while the body still runs (abort).
	caller, abort := context.WithCancelCause(ctx)
	defer abort(context.Canceled)
	a := &attempt{p: p, st: st, def: def, exec: exec, caller: caller, abort: abort, wrapped: len(snap.wrappers) > 0}
	next := Next(a.body)
	for i := len(snap.wrappers) - 1; i >= 0; i-- {
		next = wrap(snap.wrappers[i].fn, exec.Call, next)
	}
	value, err := next(caller)
	if f := a.end(); f != nil {
		return nil, f
	}
	if f := a.wrapperFailure(value, err); f != nil {
		return nil, f
	}
	value, err = a.value, a.err
	if a.wrapped && a.canonErr == nil {
		value = a.frozen // not JSON otherwise: accept reports output_invalid
	}
	timedOut := a.timedOut || st.timedOut
	if errors.Is(err, Pending) && def.Reattach {
		// Still running, or still stopping after a cancellation or the
		// timeout: the outcome is reported only once the work is gone. A
		// timeout that came first stays the outcome even if the caller
		// cancels while the work stops.
		st.timedOut = timedOut
		return nil, &Failure{Code: codePending}
	}
	if timedOut {
		return nil, &Failure{Code: CodeTimeout, Message: fmt.Sprintf("the body exceeded its %s timeout", def.Timeout)}
	}
	if err == nil {
		return value, nil
	}
	var f *Failure
	switch {
	case errors.Is(err, ErrAttemptLost) && def.Reattach:
		return nil, &Failure{Code: codeLost}
	case errors.As(err, &f):
		return nil, ownCode(f, ctx.Err() != nil)
	case ctx.Err() != nil && errors.Is(err, context.Canceled):
		return nil, &Failure{Code: CodeCancelled, Message: "the body stopped on cancellation"}
	default:
		return nil, &Failure{Code: CodeToolError, Message: bounded(err.Error())}
	}
}

// ownCode keeps a code a body (or its sandbox provider) chose, unless it
// claims a decision that belongs to the pipeline: a body cannot pretend a
// policy denied it, nor that it was cancelled when its caller was not.
func ownCode(f *Failure, callerCancelled bool) *Failure {
	switch f.Code {
	case CodePolicyDenied, CodeApprovalRejected, CodeApprovalUnavailable, CodeApprovalExpired,
		CodeApprovalCancelled, CodeGuardDenied, CodePostBlocked, CodePostFailed, CodeUnknownTool,
		CodeInvalidArguments, CodeNormalizationFailed, CodeInternal, CodeProfileUnavailable, CodeSessionGone, CodeTurnClosed, CodeDuplicateCall, CodeTurnSizeMismatch, CodeInvalidParent, CodeNotSessionOwner, codePending, codeLost:
		return &Failure{Code: CodeToolError, Message: "the body claimed " + string(f.Code) + ": " + bounded(f.Message)}
	case CodeCancelled:
		if !callerCancelled {
			return &Failure{Code: CodeToolError, Message: bounded(f.Message)}
		}
	}
	return f
}

// wrap applies one wrapper; a panicking wrapper is a wrapper failure.
func wrap(w Wrapper, call Call, next Next) Next {
	return func(ctx context.Context) (v any, err error) {
		defer func() {
			if recover() != nil {
				v, err = nil, Fail(CodeWrapperFailed, "an execute wrapper panicked")
			}
		}()
		return w(ctx, call, next)
	}
}

// fuse re-attaches the caller's cancellation to the context a wrapper chose,
// so no wrapper can detach the body from its caller; stop releases it once
// the body has returned.
func fuse(wctx, caller context.Context) (ctx context.Context, stop func()) {
	if wctx == caller || caller.Done() == nil {
		return wctx, func() {}
	}
	fused, cancel := context.WithCancelCause(wctx)
	unregister := context.AfterFunc(caller, func() { cancel(context.Cause(caller)) })
	return fused, func() {
		unregister()
		cancel(context.Canceled)
	}
}

// timedContext is the body's context under a wrapper that substituted its
// own: the fused context, presenting the attempt's deadline, and its timeout
// as context.DeadlineExceeded, as a body sees them without a wrapper.
type timedContext struct {
	context.Context
	timeout context.Context
}

func (c timedContext) Deadline() (time.Time, bool) {
	d, ok := c.timeout.Deadline()
	if w, wok := c.Context.Deadline(); wok && (!ok || w.Before(d)) {
		return w, true
	}
	return d, ok
}

func (c timedContext) Err() error {
	err := c.Context.Err()
	if err != nil && context.Cause(c.Context) == errAttemptTimeout {
		return context.DeadlineExceeded
	}
	return err
}
