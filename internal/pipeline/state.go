package pipeline

import (
	"time"

	"github.com/toolgate/toolgate/internal/textutil"
)

// Stage is a pipeline boundary, in the seed's order.
type Stage string

// Stages. A call's State names the next stage to run; each stage appends one
// Record when it completes.
const (
	StageCall        Stage = "Call"        // durable tool/call: admit, validate, snapshot identity
	StagePreExecute  Stage = "PreExecute"  // ordered listeners: allow / deny / ask
	StageApproval    Stage = "Approval"    // one human question for ask
	StageGuard       Stage = "Guard"       // monotonic guards: deny or abstain
	StageDispatch    Stage = "Dispatch"    // an attempt starts (persisted before the body)
	StageExecute     Stage = "Execute"     // wrappers around the body
	StagePostExecute Stage = "PostExecute" // accept (replace content XOR value, contexts) or block
	StageFinalize    Stage = "Finalize"    // normalize, then FinalizeContent exactly once
	StageObserve     Stage = "Observe"     // live tools/result: observers read the frozen outcome
	StageResult      Stage = "Result"      // durable tool/result
	StageDone        Stage = "Done"
)

var stageOrder = map[Stage]int{
	StageCall: 0, StagePreExecute: 1, StageApproval: 2, StageGuard: 3, StageDispatch: 4,
	StageExecute: 5, StagePostExecute: 6, StageFinalize: 7, StageObserve: 8, StageResult: 9, StageDone: 10,
}

// Before reports whether s comes before o in the pipeline's order.
func (s Stage) Before(o Stage) bool { return stageOrder[s] < stageOrder[o] }

// Verdicts recorded at boundaries.
const (
	VerdictAdmitted    = "Admitted"
	VerdictAllow       = "Allow"
	VerdictDeny        = "Deny"
	VerdictAsk         = "Ask"
	VerdictAllowedOnce = "AllowedOnce"
	VerdictRejected    = "Rejected"
	VerdictCancelled   = "Cancelled"
	VerdictUnavailable = "Unavailable"
	VerdictExpired     = "Expired"
	VerdictAbstain     = "Abstain"
	VerdictDispatched  = "Dispatched"
	VerdictOK          = "OK"
	VerdictError       = "Error"
	VerdictRetry       = "Retry"
	VerdictInterrupted = "Interrupted"
	VerdictAccept      = "Accept"
	VerdictBlock       = "Block"
	VerdictSkipped     = "Skipped"
)

// Record is one boundary crossed.
type Record struct {
	Stage   Stage     `json:"stage"`
	Verdict string    `json:"verdict"`
	Reason  string    `json:"reason,omitempty"`
	Time    time.Time `json:"time"`
}

// Body is what the body produced, validated and rendered (or its failure).
type Body struct {
	Value     string    `json:"value,omitempty"`
	Content   string    `json:"content,omitempty"`
	Contexts  []Context `json:"contexts,omitempty"`
	Truncated bool      `json:"truncated,omitempty"`
}

// State is a call's durable progress: everything needed to resume it in a
// fresh process. It serializes to JSON; the controllers keep it in
// ToolCall.status.
type State struct {
	Request Request `json:"request"`
	// Sandbox names where the latest attempt ran (Exec.Sandbox).
	Sandbox string   `json:"sandbox,omitempty"`
	Token   string   `json:"token,omitempty"`
	Next    Stage    `json:"next"`
	Records []Record `json:"records,omitempty"`
	Mode    Mode     `json:"mode,omitempty"`

	// AskedAt and AskReason describe a pending approval question;
	// AskDeadline is the deadline it was asked with, which is the one
	// enforced (the timeout of a profile changed since does not move it).
	AskedAt     time.Time `json:"askedAt,omitzero"`
	AskDeadline time.Time `json:"askDeadline,omitzero"`
	AskReason   string    `json:"askReason,omitempty"`
	AskText     string    `json:"askText,omitempty"`
	AskQuorum   *Quorum   `json:"askQuorum,omitempty"`

	// Attempt is the number of attempts dispatched; AttemptStartedAt the
	// persisted start of the current one (timeouts are measured from it).
	Attempt          int       `json:"attempt,omitempty"`
	AttemptStartedAt time.Time `json:"attemptStartedAt,omitzero"`
	// NotBefore delays the next dispatch (retry backoff).
	NotBefore time.Time `json:"notBefore,omitzero"`
	// Retried is the failure of the attempt a retry follows: the outcome
	// if the caller cancels before the retry is dispatched (cancellation
	// after invocation replaces only a success).
	Retried *Failure `json:"retried,omitempty"`

	// Body is the validated, rendered body output after execute and
	// post-execute; Failure the settled failure, if any.
	Body    *Body    `json:"body,omitempty"`
	Failure *Failure `json:"failure,omitempty"`
	// Decisions are the contexts decisions attached: the approvers'
	// message, then post-execute accepts'.
	Decisions []Context `json:"decisions,omitempty"`

	// Result is the single authoritative result, set at finalize.
	Result *Result `json:"result,omitempty"`

	// dispatched is true in the process that dispatched the current
	// attempt; after a restart it is false, which is how Execute knows the
	// attempt may already have run.
	dispatched bool
	// reattaching is true once a Reattach body answered Pending.
	reattaching bool
	// timedOut is true once the current attempt's timeout passed before the
	// caller cancelled, while its Reattach body was still stopping (it
	// answered Pending): the timeout stays the outcome.
	timedOut bool
	// entered is the tool whose body this process entered for the current
	// attempt: removed from the registry while its work runs elsewhere (a
	// Reattach body), that work is still stopped through it.
	entered *tool
	// args caches the frozen arguments.
	args Arguments
}

// LiveAttempt is what a process knows of the current attempt beyond the
// durable state: whether it dispatched it, whether its body was already
// invoked here (a Reattach body then re-attaches), and whether its timeout
// passed first while the body was still stopping.
type LiveAttempt struct {
	Dispatched, Invoked, TimedOut bool
}

// SetLive tells a state rebuilt from storage what this process knows of the
// current attempt. A driver that rebuilds the State on every step (a
// controller) keeps that knowledge in memory; after a restart it is lost,
// which is exactly what makes a resumed attempt look interrupted.
func (s *State) SetLive(l LiveAttempt) {
	s.dispatched, s.reattaching, s.timedOut = l.Dispatched, l.Invoked, l.TimedOut
}

// Live reports what SetLive sets.
func (s *State) Live() LiveAttempt {
	return LiveAttempt{Dispatched: s.dispatched, Invoked: s.reattaching, TimedOut: s.timedOut}
}

// NewState returns the state of a call just recorded (durable tool/call).
func NewState(req Request) *State {
	// A successful call crosses nine boundaries; one allocation holds them.
	return &State{Request: req, Next: StageCall, Records: make([]Record, 0, 10)}
}

// Done reports whether the call has its durable result.
func (s *State) Done() bool { return s.Next == StageDone }

func (s *State) record(stage Stage, verdict, reason string, now time.Time) {
	s.Records = append(s.Records, Record{Stage: stage, Verdict: verdict, Reason: reason, Time: now})
}

// Abort fails a call for a reason outside the pipeline (its profile is gone,
// its session was deleted) and skips to finalize. A call past finalize keeps
// its result: there is only ever one.
func (s *State) Abort(code Code, message string, now time.Time) {
	if !s.Next.Before(StageFinalize) {
		return
	}
	s.record(s.Next, VerdictError, string(code), now)
	s.Body, s.Decisions = nil, nil
	s.settle(code, message)
}

// FailResult replaces the result with a failure of code, for a driver
// whose durable layer cannot take the result as it is: a store that
// refused it (too large, or not valid there), so that the call still gets
// its one result, which says why it has no other, instead of a write
// retried forever; or an outcome already announced live by a process that
// stopped before writing it, which the result must repeat.
func (s *State) FailResult(code Code, message string) {
	if s.Result == nil {
		return
	}
	s.Result = s.failureResult(code, message)
}

// failureResult is the call's result as a failure of code.
func (s *State) failureResult(code Code, message string) *Result {
	f := &Failure{Code: code, Message: failureMessage(message)}
	return &Result{Token: s.Token, CallID: s.Request.CallID, Tool: s.Request.Tool, Outcome: OutcomeOf(code), Code: code, Message: f.Message, Content: failureContent(f)}
}

// settle fails the call with code and skips to finalize. The message,
// whoever wrote it (a body's own failure, a rule, an approver), is bounded
// and valid UTF-8, like every text of a result.
func (s *State) settle(code Code, message string) {
	s.Failure = &Failure{Code: code, Message: failureMessage(message)}
	s.Next = StageFinalize
}

// MaxMessageBytes bounds a result's message, as stored.
const MaxMessageBytes = 4096

// failureMessage is message as a result holds it.
func failureMessage(message string) string {
	m, _ := cutEncoded(textutil.Text(message), MaxMessageBytes)
	return m
}

// Mode is a call's execution mode.
type Mode string

// Execution modes.
const (
	Parallel  Mode = "Parallel"
	Exclusive Mode = "Exclusive"
)
