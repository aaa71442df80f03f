package pipeline

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/toolgate/toolgate/internal/textutil"
)

// call returns the frozen identity every stage sees.
func (st *State) call() Call {
	if st.args.value == nil && st.args.text == "" {
		st.args = Arguments{text: st.Request.Arguments}
		st.args.value, _ = ParseJSON(st.Request.Arguments)
	}
	r := st.Request
	return Call{
		Token: st.Token, CallID: r.CallID, Tool: r.Tool, Args: st.args, Parent: r.Parent,
		Requester: r.Requester, Session: r.Session, Turn: r.Turn, Index: r.Index,
	}
}

// cancelledBeforeDispatch settles a call whose caller cancelled before its
// body was dispatched: every remaining policy and body stage is skipped.
func (p *Pipeline) cancelledBeforeDispatch(ctx context.Context, st *State) bool {
	if ctx.Err() == nil {
		return false
	}
	if f := st.Retried; f != nil {
		// An attempt already ran and failed: after invocation, cancellation
		// replaces only a success, so its failure is the outcome; the
		// retry it was waiting for never runs.
		st.record(st.Next, VerdictCancelled, string(f.Code), p.opts.Clock.Now())
		st.settle(f.Code, cancelledBecause(ctx, f.Message+" (not retried: the call was cancelled)"))
		return true
	}
	st.record(st.Next, VerdictCancelled, string(CodeCancelled), p.opts.Clock.Now())
	st.settle(CodeCancelled, cancelledBecause(ctx, "the call was cancelled before its body was dispatched"))
	return true
}

// cancelledBecause is the message of a cancellation: what it skipped or
// stopped and, when the caller gave one (context.WithCancelCause), why.
func cancelledBecause(ctx context.Context, msg string) string {
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) && !errors.Is(cause, context.DeadlineExceeded) {
		return msg + ": " + cause.Error()
	}
	return msg
}

// admit is the registry's entry: the tool must be visible, the arguments
// lossless JSON satisfying the parameters schema; the call gets its token.
func (p *Pipeline) admit(ctx context.Context, st *State, snap snapshot) {
	if st.Token == "" {
		// Even a call cancelled on arrival gets its identity: its one result
		// must be attributable.
		st.Token = p.opts.NewToken()
	}
	if p.cancelledBeforeDispatch(ctx, st) {
		return
	}
	now := p.opts.Clock.Now()
	if snap.tool == nil {
		st.record(StageCall, VerdictError, string(CodeUnknownTool), now)
		st.settle(CodeUnknownTool, fmt.Sprintf("no visible tool is named %q", st.Request.Tool))
		return
	}
	value, err := ParseJSON(st.Request.Arguments)
	if err != nil {
		st.record(StageCall, VerdictError, string(CodeInvalidArguments), now)
		st.settle(CodeInvalidArguments, "arguments are not lossless JSON: "+err.Error())
		return
	}
	if err := snap.tool.params.Validate(value); err != nil {
		st.record(StageCall, VerdictError, string(CodeInvalidArguments), now)
		st.settle(CodeInvalidArguments, "arguments do not match the parameters schema "+schemaMessage(err))
		return
	}
	st.args = Arguments{text: st.Request.Arguments, value: value}
	st.record(StageCall, VerdictAdmitted, "", now)
	st.Next = StagePreExecute
}

// preExecute asks the listeners in order; the first that does not abstain
// decides, and no decision falls back to the default.
func (p *Pipeline) preExecute(ctx context.Context, st *State, snap snapshot) {
	if p.cancelledBeforeDispatch(ctx, st) {
		return
	}
	call := st.call()
	d := p.opts.Default
	for _, l := range snap.pre {
		got, ok := safePre(ctx, l.fn, call)
		if !ok {
			d = Decision{Action: Deny, Reason: l.name, Message: "the pre-execute listener failed"}
			break
		}
		if got.Action != Abstain {
			d = got
			if d.Reason == "" {
				d.Reason = l.name
			}
			break
		}
	}
	now := p.opts.Clock.Now()
	switch d.Action {
	case Allow:
		st.record(StagePreExecute, VerdictAllow, d.Reason, now)
		st.Next = StageGuard
	case Ask:
		st.record(StagePreExecute, VerdictAsk, d.Reason, now)
		st.AskedAt, st.AskReason, st.AskText, st.AskQuorum = now, d.Reason, d.Message, d.Quorum
		st.AskDeadline = now.Add(p.opts.ApprovalTimeout)
		st.Next = StageApproval
	default:
		st.record(StagePreExecute, VerdictDeny, d.Reason, now)
		st.settle(CodePolicyDenied, orDefault(d.Message, "denied by "+d.Reason))
	}
}

func safePre(ctx context.Context, fn PreListener, call Call) (d Decision, ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	d = fn(ctx, call)
	switch d.Action {
	case Abstain, Allow, Deny, Ask:
		return d, true
	}
	return d, false
}

// approval asks the approver once per step; anything but allowed-once, and
// a passed deadline, fails closed.
func (p *Pipeline) approval(ctx context.Context, st *State, snap snapshot) (Progress, time.Duration) {
	if p.cancelledBeforeDispatch(ctx, st) {
		return Advanced, 0
	}
	now := p.opts.Clock.Now()
	deadline := st.AskDeadline
	if deadline.IsZero() {
		// Asked by a manager that did not keep the deadline.
		deadline = st.AskedAt.Add(p.opts.ApprovalTimeout)
	}
	fail := func(verdict string, code Code, msg string) (Progress, time.Duration) {
		st.record(StageApproval, verdict, string(code), now)
		st.settle(code, msg)
		return Advanced, 0
	}
	if !now.Before(deadline) {
		return fail(VerdictExpired, CodeApprovalExpired, "nobody approved the call before its deadline")
	}
	if p.opts.Approver == nil {
		return fail(VerdictUnavailable, CodeApprovalUnavailable, "no approver is available; asking fails closed")
	}
	q := Question{Call: st.call(), Reason: st.AskReason, Message: st.AskText, Deadline: deadline, Quorum: st.AskQuorum}
	answer, msg := safeApprove(ctx, p.opts.Approver, q)
	switch answer {
	case AllowedOnce:
		st.record(StageApproval, VerdictAllowedOnce, "", now)
		if msg != "" {
			// The approvers' words are the first decision context: they
			// follow the tool's deferred contexts on an accept and go with
			// them on a block, like every decision made before the body.
			st.Decisions, _ = boundContexts(nil, []Context{{Source: SourceApproval, Rule: st.AskReason, Message: msg}})
		}
		st.Next = StageGuard
		return Advanced, 0
	case AnswerPending:
		return Waiting, min(p.opts.PollInterval, deadline.Sub(now))
	case Rejected:
		return fail(VerdictRejected, CodeApprovalRejected, orDefault(msg, "the approver rejected the call"))
	case ApprovalAborted:
		return fail(VerdictCancelled, CodeApprovalCancelled, orDefault(msg, "the approval question was withdrawn"))
	default:
		return fail(VerdictUnavailable, CodeApprovalUnavailable, orDefault(msg, "the approver could not answer; asking fails closed"))
	}
}

func safeApprove(ctx context.Context, a Approver, q Question) (ans Answer, msg string) {
	defer func() {
		if recover() != nil {
			ans, msg = Unavailable, "the approver failed"
		}
	}()
	return a.Approve(ctx, q)
}

// guard runs every guard in order; the first denial is final.
func (p *Pipeline) guard(ctx context.Context, st *State, snap snapshot) {
	if p.cancelledBeforeDispatch(ctx, st) {
		return
	}
	call := st.call()
	for _, g := range snap.guards {
		reason, deny := safeGuard(g.fn, call)
		if deny {
			st.record(StageGuard, VerdictDeny, g.name, p.opts.Clock.Now())
			st.settle(CodeGuardDenied, orDefault(reason, "denied by guard "+g.name))
			return
		}
	}
	st.record(StageGuard, VerdictAbstain, "", p.opts.Clock.Now())
	st.Next = StageDispatch
}

// safeGuard fails closed: a panicking guard denies.
func safeGuard(fn Guard, call Call) (reason string, deny bool) {
	defer func() {
		if recover() != nil {
			reason, deny = "the guard failed", true
		}
	}()
	return fn(call)
}

// dispatch starts an attempt. Its record is persisted before the body runs,
// so a restart knows the attempt may have run.
func (p *Pipeline) dispatch(ctx context.Context, st *State, snap snapshot) (Progress, time.Duration) {
	if p.cancelledBeforeDispatch(ctx, st) {
		return Advanced, 0
	}
	now := p.opts.Clock.Now()
	if now.Before(st.NotBefore) {
		return Waiting, st.NotBefore.Sub(now)
	}
	if snap.tool == nil {
		st.record(StageDispatch, VerdictError, string(CodeUnknownTool), now)
		st.settle(CodeUnknownTool, fmt.Sprintf("tool %q was removed before dispatch", st.Request.Tool))
		return Advanced, 0
	}
	st.Attempt++
	st.AttemptStartedAt = now
	st.Retried = nil // this attempt's own outcome decides from here
	st.dispatched, st.reattaching, st.timedOut = true, false, false
	st.record(StageDispatch, VerdictDispatched, attemptReason(st.Attempt), now)
	st.Next = StageExecute
	if pr, ok := p.opts.Runner.(Preparer); ok {
		st.Sandbox = pr.Prepare(ctx, st.Request, st.Attempt, now)
	}
	return Advanced, 0
}

var attemptReasons = [...]string{"", "attempt-1", "attempt-2", "attempt-3", "attempt-4", "attempt-5"}

func attemptReason(n int) string {
	if n < len(attemptReasons) {
		return attemptReasons[n]
	}
	return "attempt-" + strconv.Itoa(n)
}

// retryable codes are the body's own failures; denials, cancellation and
// output failures are never retried.
func retryable(c Code) bool {
	return c == CodeToolError || c == CodeToolPanic || c == CodeTimeout
}

// execute runs one attempt through the wrappers, then validates and renders
// its value.
func (p *Pipeline) execute(ctx context.Context, st *State, snap snapshot) (Progress, time.Duration) {
	now := p.opts.Clock.Now()
	if snap.tool == nil {
		if st.entered != nil && st.reattaching {
			// Its body's work still runs elsewhere: stopped first, through
			// the tool it was entered with and the cancelled signal, as a
			// cancellation stops it; the call settles once it is gone.
			stop, cancel := context.WithCancel(ctx)
			cancel()
			snap.tool = st.entered
			exec := &Exec{Call: st.call(), Attempt: st.Attempt, Resumed: true, StartedAt: st.AttemptStartedAt, runner: p.opts.Runner}
			if _, fail := p.invoke(stop, st, snap, exec); fail != nil && fail.Code == codePending {
				return Waiting, p.opts.PollInterval
			}
			st.entered = nil
		}
		st.record(StageExecute, VerdictError, string(CodeUnknownTool), now)
		st.settle(CodeUnknownTool, fmt.Sprintf("tool %q was removed during execution", st.Request.Tool))
		return Advanced, 0
	}
	def := snap.tool.def
	if !st.dispatched && !def.Reattach {
		return p.interrupted(st, def, now)
	}
	resumed := !st.dispatched || st.reattaching
	if ctx.Err() != nil && !resumed {
		// Cancelled after the dispatch boundary, before the body was entered:
		// there is no work to stop, so neither wrappers nor body run. A body
		// already entered (a Reattach body whose work runs elsewhere) is
		// still invoked below, with the cancelled signal, to stop that work.
		st.record(StageExecute, VerdictCancelled, string(CodeCancelled), now)
		st.settle(CodeCancelled, cancelledBecause(ctx, "the call was cancelled before its body was entered"))
		return Advanced, 0
	}
	exec := &Exec{Call: st.call(), Attempt: st.Attempt, Resumed: resumed, StartedAt: st.AttemptStartedAt, runner: p.opts.Runner}
	st.entered = snap.tool
	value, fail := p.invoke(ctx, st, snap, exec)
	now = p.opts.Clock.Now()
	if exec.Sandbox != "" {
		st.Sandbox = exec.Sandbox
	}
	if fail != nil && fail.Code == codeLost {
		return p.interrupted(st, def, now)
	}
	if fail != nil && fail.Code == codePending {
		st.reattaching = true
		wait := p.opts.PollInterval
		if def.Timeout > 0 && !def.TimesItself {
			// Come back no later than the deadline, so a timeout fires on time.
			wait = min(wait, max(st.AttemptStartedAt.Add(def.Timeout).Sub(now), 200*time.Millisecond))
		}
		return Waiting, wait
	}
	if fail == nil {
		fail = p.accept(st, snap.tool, exec, value)
	}
	if ctx.Err() != nil && (fail == nil || fail.Code == CodeCancelled) {
		// Cancellation after invocation replaces only a success.
		fail = &Failure{Code: CodeCancelled, Message: cancelledBecause(ctx, "the call was cancelled while its body ran")}
		st.Body = nil
	}
	if fail == nil {
		st.record(StageExecute, VerdictOK, "", now)
		st.Next = StagePostExecute
		return Advanced, 0
	}
	if retryable(fail.Code) && def.Idempotent && st.Attempt < def.MaxAttempts {
		st.Retried = &Failure{Code: fail.Code, Message: failureMessage(fail.Message)}
		st.record(StageExecute, VerdictRetry, string(fail.Code), now)
		st.NotBefore = now.Add(def.RetryBackoff)
		st.Next = StageDispatch
		return Advanced, 0
	}
	if fail.Code == CodeSandboxEvicted && def.Idempotent && st.Attempt < rerunBound(def) {
		// The cluster took the pod away (a node drained or lost,
		// preemption, node pressure): no fault of the body's, whose work
		// is lost as with a manager gone (interrupted), so an idempotent
		// one is dispatched again within the same bound, on another pod.
		st.Retried = &Failure{Code: fail.Code, Message: failureMessage(fail.Message)}
		st.record(StageExecute, VerdictRetry, string(fail.Code), now)
		st.Next = StageDispatch
		return Advanced, 0
	}
	st.record(StageExecute, VerdictError, string(fail.Code), now)
	st.settle(fail.Code, fail.Message)
	return Advanced, 0
}

// interrupted handles an attempt that may have run in a process that is gone:
// an idempotent body is dispatched again, any other is never run twice.
func (p *Pipeline) interrupted(st *State, def Definition, now time.Time) (Progress, time.Duration) {
	bound := rerunBound(def)
	if def.Idempotent && st.Attempt < bound {
		if st.Attempt > 0 {
			// Its result is lost, which is no success for a cancellation
			// to replace.
			st.Retried = &Failure{Code: CodeInterrupted, Message: fmt.Sprintf("attempt %d was interrupted and its result is lost", st.Attempt)}
		}
		st.record(StageExecute, VerdictInterrupted, "rerun-idempotent", now)
		st.Next = StageDispatch
		return Advanced, 0
	}
	st.record(StageExecute, VerdictInterrupted, string(CodeInterrupted), now)
	if def.Idempotent {
		st.settle(CodeInterrupted, fmt.Sprintf("the attempt was interrupted, the %d attempts an idempotent body gets after lost work are spent", bound))
		return Advanced, 0
	}
	st.settle(CodeInterrupted, "the attempt was interrupted and the body is not idempotent; it is never run twice")
	return Advanced, 0
}

// maxInterruptedAttempts bounds how often an idempotent body whose attempts
// keep getting lost is dispatched again, so a lasting failure still ends in
// one result.
const maxInterruptedAttempts = 3

// rerunBound is how many attempts an idempotent body gets when its work is
// lost (a manager gone, its pod taken away by the cluster): its own retry
// budget, or maxInterruptedAttempts if that is more.
func rerunBound(def Definition) int {
	return max(def.MaxAttempts, maxInterruptedAttempts)
}

// accept validates a body's value against the output schema and renders it.
func (p *Pipeline) accept(st *State, t *tool, exec *Exec, value any) *Failure {
	canon, content, f := p.validateAndRender(t, exec.Call.Args, value, CodeOutputInvalid)
	if f != nil {
		return f
	}
	contexts, cutContexts := boundContexts(exec.deferred, nil)
	content, cut := boundContent(canon, content, contexts)
	st.Body = &Body{Value: canon, Content: content, Contexts: contexts, Truncated: exec.Truncated || cut || cutContexts}
	return nil
}

func (p *Pipeline) validateAndRender(t *tool, args Arguments, value any, code Code) (canon, content string, f *Failure) {
	v, err := toLossless(value)
	if err != nil {
		return "", "", &Failure{Code: code, Message: "the value is not lossless JSON: " + bounded(err.Error())}
	}
	if err := t.output.Validate(v); err != nil {
		return "", "", &Failure{Code: code, Message: "the value does not match the output schema " + schemaMessage(err)}
	}
	if canon, err = CanonicalJSON(v); err != nil {
		return "", "", &Failure{Code: code, Message: bounded(err.Error())}
	}
	if n := encodedLen(canon); n > MaxValueBytes {
		return "", "", &Failure{Code: CodeOutputTooLarge, Message: fmt.Sprintf("the value takes %d bytes as stored (JSON text in a JSON string); a result holds at most %d", n, MaxValueBytes)}
	}
	if t.def.Output.Render == nil {
		if s, ok := v.(string); ok {
			return canon, s, nil
		}
		return canon, canon, nil
	}
	content, err = safeRender(t.def.Output.Render, args, v)
	if err != nil {
		return "", "", &Failure{Code: CodeRenderFailed, Message: "rendering failed: " + bounded(err.Error())}
	}
	return canon, content, nil
}

func safeRender(fn func(Arguments, any) (string, error), args Arguments, v any) (s string, err error) {
	defer func() {
		if recover() != nil {
			err = errors.New("the renderer panicked")
		}
	}()
	return fn(args, v)
}

// Classify returns the call's execution mode: Parallel only when the tool's
// classifier returns exactly true for valid arguments; an unknown tool, no
// classifier, invalid arguments, any other value or a panic mean Exclusive.
func (p *Pipeline) Classify(req Request) Mode {
	snap := p.snapshot(req.Tool)
	if snap.tool == nil || snap.tool.def.IsConcurrencySafe == nil {
		return Exclusive
	}
	value, err := ParseJSON(req.Arguments)
	if err != nil || snap.tool.params.Validate(value) != nil {
		return Exclusive
	}
	if safeClassify(snap.tool.def.IsConcurrencySafe, Arguments{text: req.Arguments, value: value}) {
		return Parallel
	}
	return Exclusive
}

func safeClassify(fn func(Arguments) any, args Arguments) (parallel bool) {
	defer func() {
		if recover() != nil {
			parallel = false
		}
	}()
	v := fn(args)
	b, ok := v.(bool)
	return ok && b
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// bounded keeps messages short and on one line.
func bounded(s string) string { return textutil.OneLine(s, 512) }
