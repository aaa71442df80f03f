package pipeline

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"fmt"
	"time"
)

// Clock tells the time; tests inject a fake.
type Clock interface {
	Now() time.Time
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// Answer is an approver's reply.
type Answer string

// Approval answers. Only AllowedOnce lets the call continue; every other
// answer, and no approver at all, fails closed.
const (
	AllowedOnce     Answer = "allowed-once"
	Rejected        Answer = "rejected"
	ApprovalAborted Answer = "cancelled"
	Unavailable     Answer = "unavailable"
	// AnswerPending means nobody has answered yet; the driver asks again.
	AnswerPending Answer = "pending"
)

// Question is one approval question about one call.
type Question struct {
	Call     Call
	Reason   string
	Message  string
	Deadline time.Time
	// Quorum is who may answer and how many must (nil: one approval).
	Quorum *Quorum
}

// Approver answers approval questions (the approval seam's contract as the
// pipeline consumes it). Approve must be idempotent per call token: a driver
// asks again after a restart or while the answer is pending. The message
// of a failing answer is the failure's; of AllowedOnce, words for the
// model (empty: none), attached to the result as a SourceApproval context.
type Approver interface {
	Approve(ctx context.Context, q Question) (Answer, string)
}

// Options configure a Pipeline.
type Options struct {
	// Clock defaults to the system clock.
	Clock Clock
	// Approver answers Ask decisions; nil fails every Ask closed.
	Approver Approver
	// ApprovalTimeout bounds how long a question may stay unanswered.
	// Defaults to 15 minutes.
	ApprovalTimeout time.Duration
	// Default decides calls no pre-execute listener decided; defaults to
	// Deny.
	Default Decision
	// NewToken mints opaque call tokens; defaults to 128 random bits.
	NewToken func() string
	// PollInterval is how soon a driver should step a waiting call again.
	// Defaults to one second.
	PollInterval time.Duration
	// Runner runs bodies declared as data (a ToolProfile's container or
	// built-in tools call Exec.Run): the driver gives each call's pipeline
	// a Runner bound to that call's sandbox. Nil fails such bodies with
	// sandbox_unavailable.
	Runner Runner
}

// Runner runs a body declared as data for one attempt: spec is what the
// definition hands over (the pipeline never reads it), args the frozen
// arguments. It returns the tool's output text, or a failure.
type Runner interface {
	Run(ctx context.Context, spec any, args Arguments, exec *Exec) (string, error)
}

// Preparer is implemented by a Runner that gets an attempt's sandbox ready
// as the attempt is dispatched, before its dispatch boundary is persisted
// (a driver that dies right after persisting it leaves its successor a
// sandbox that ran nothing). Prepare names where that sandbox is ("" when
// it does not say); the state keeps it (State.Sandbox), never the previous
// attempt's. Best effort: Run does whatever Prepare did not.
type Preparer interface {
	Prepare(ctx context.Context, req Request, attempt int, dispatched time.Time) (where string)
}

// Pipeline runs calls through the stages, against a Registry.
type Pipeline struct {
	*Registry
	opts Options
}

// New returns a pipeline over reg.
func New(reg *Registry, opts Options) *Pipeline {
	if opts.Clock == nil {
		opts.Clock = realClock{}
	}
	if opts.ApprovalTimeout <= 0 {
		opts.ApprovalTimeout = 15 * time.Minute
	}
	if opts.Default.Action == Abstain {
		opts.Default = Decision{Action: Deny, Reason: "default", Message: "no policy allows this call"}
	}
	if opts.NewToken == nil {
		opts.NewToken = randomToken
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = time.Second
	}
	return &Pipeline{Registry: reg, opts: opts}
}

var tokenEncoding = base32.HexEncoding.WithPadding(base32.NoPadding)

func randomToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return tokenEncoding.EncodeToString(b[:])
}

// Progress is what a Step did.
type Progress int

const (
	// Advanced means a boundary was crossed; persist the state, then step again.
	Advanced Progress = iota
	// Waiting means nothing changed; step again after the returned delay.
	Waiting
	// Finished means the call has its durable result.
	Finished
)

// Step runs the call's next stage. ctx is the caller's signal: once it is
// cancelled, the call settles as cancelled (before dispatch), or its success
// is replaced by a cancellation (after). A driver persists the state after
// every Advanced step, before calling Step again: that is what makes each
// boundary durable before the side effect that follows it.
func (p *Pipeline) Step(ctx context.Context, st *State) (progress Progress, wait time.Duration) {
	snap := p.snapshot(st.Request.Tool)
	defer func() {
		// Whatever panics inside a stage (a validator, an encoder, a
		// value's own methods) is a broken invariant, reported as such:
		// the call still gets its one result.
		if r := recover(); r != nil {
			progress, wait = p.recovered(st, r), 0
		}
	}()
	switch st.Next {
	case StageCall:
		p.admit(ctx, st, snap)
	case StagePreExecute:
		p.preExecute(ctx, st, snap)
	case StageApproval:
		return p.approval(ctx, st, snap)
	case StageGuard:
		p.guard(ctx, st, snap)
	case StageDispatch:
		return p.dispatch(ctx, st, snap)
	case StageExecute:
		return p.execute(ctx, st, snap)
	case StagePostExecute:
		p.postExecute(ctx, st, snap)
	case StageFinalize:
		p.finalize(st, snap)
	case StageObserve:
		p.observe(st, snap)
	case StageResult:
		st.record(StageResult, string(st.Result.Outcome), string(st.Result.Code), p.opts.Clock.Now())
		st.Next = StageDone
	case StageDone:
		return Finished, 0
	default:
		st.settle(CodeInternal, "unknown stage "+string(st.Next))
	}
	if st.Next == StageDone {
		return Finished, 0
	}
	return Advanced, 0
}

// recovered settles a call whose stage panicked with CodeInternal: before
// finalize, through finalize like any failure; from finalize on, with the
// failure as its result.
func (p *Pipeline) recovered(st *State, r any) Progress {
	msg := fmt.Sprintf("the %s stage panicked: %s", st.Next, bounded(fmt.Sprint(r)))
	if st.Next.Before(StageFinalize) {
		st.record(st.Next, VerdictError, string(CodeInternal), p.opts.Clock.Now())
		st.Body, st.Decisions = nil, nil
		st.settle(CodeInternal, msg)
		return Advanced
	}
	st.Result = st.failureResult(CodeInternal, msg)
	if st.Next == StageFinalize {
		st.record(StageFinalize, VerdictError, string(CodeInternal), p.opts.Clock.Now())
		st.Next = StageObserve
	}
	return Advanced
}
