package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"time"
)

// Definition declares one tool: what the model sees, what it must return,
// and its body.
type Definition struct {
	// Name is the tool name the model calls.
	Name string
	// Description is shown to the model.
	Description string
	// Parameters is the JSON Schema (2020-12) of the arguments; it must
	// describe an object. Network and file $ref are not resolved.
	Parameters string
	// Output is the mandatory output declaration.
	Output Output
	// Execute is the body. It must observe ctx until its owned work has
	// quiesced.
	Execute func(ctx context.Context, args Arguments, exec *Exec) (any, error)
	// IsConcurrencySafe classifies a call; only the exact value true makes
	// it parallel. Nil means exclusive.
	IsConcurrencySafe func(args Arguments) any
	// FinalizeContent gets the last word on the content, synchronously, for
	// every result, failures included: it sees the content already within
	// the result's bound, and what it returns is the content (invalid bytes
	// aside, which become U+FFFD). It must be total; a panic, or more
	// content than a result holds, fails the result as a normalization
	// failure, which like every failure has the failure content and no
	// value or contexts.
	FinalizeContent func(content string, res ResultView) string
	// Timeout bounds one attempt of the body; zero means no timeout.
	Timeout time.Duration
	// TimesItself declares that the body measures Timeout from the moment
	// its work actually starts and reports CodeTimeout itself (a sandbox
	// runner does). The pipeline then sets no deadline of its own: time
	// spent getting a sandbox ready, or while no manager was looking, never
	// counts against the body, and a body that finished within its budget
	// gets its result however late it is collected.
	TimesItself bool
	// Idempotent declares that running the body twice has the effect of
	// running it once. Only an idempotent body is re-run: by retry, or when
	// resuming a call whose attempt was interrupted.
	Idempotent bool
	// Reattach declares that re-invoking Execute for an interrupted attempt
	// re-attaches to the work that attempt started (for example the pod it
	// started, found again by its name or labels) instead of starting it
	// again; such a body may also answer Pending.
	Reattach bool
	// MaxAttempts is the retry budget (first attempt included) for an
	// idempotent body; values below 2 mean no retry.
	MaxAttempts int
	// RetryBackoff is the wait before each further attempt.
	RetryBackoff time.Duration
}

// Output is a tool's mandatory output declaration.
type Output struct {
	// Schema is the JSON Schema every result value must satisfy.
	Schema string
	// Render turns a valid value into model-facing content. Nil renders the
	// canonical JSON text (or a string value as is).
	Render func(args Arguments, value any) (string, error)
}

// Pending is returned by a Reattach body whose work has not finished; the
// driver calls Execute again later (a controller requeues).
var Pending = &pendingMarker{}

type pendingMarker struct{}

func (*pendingMarker) Error() string { return "pending" }

// ErrAttemptLost is returned by a Reattach body asked to re-attach to an
// attempt whose work no longer exists (its process died with the previous
// manager). The pipeline then treats the attempt as interrupted: an
// idempotent body is dispatched again, any other settles as interrupted.
var ErrAttemptLost = errors.New("the attempt's work was lost")

// Arguments are a call's frozen arguments: the model's JSON text, byte for
// byte. Every accessor returns a fresh copy, so no stage can change what a
// later stage sees.
type Arguments struct {
	text  string
	value any // parsed once, never handed out
}

// ArgumentsOf freezes JSON text as Arguments (for drivers and tests; the
// pipeline itself freezes a call's arguments at admission).
func ArgumentsOf(text string) Arguments {
	v, _ := ParseJSON(text)
	return Arguments{text: text, value: v}
}

// JSON returns the arguments as the model sent them.
func (a Arguments) JSON() string { return a.text }

// Value returns a fresh decoded copy (maps, slices, strings, bools, nil,
// json.Number).
func (a Arguments) Value() any { return a.Copy(nil) }

// Copy returns a fresh deep copy of the arguments' value, each number passed
// through number (kept as json.Number when number is nil): one walk of the
// value frozen at admission, no new parse.
func (a Arguments) Copy(number func(json.Number) any) any {
	return copyValue(a.value, number)
}

func copyValue(v any, number func(json.Number) any) any {
	switch v := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			out[k] = copyValue(e, number)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = copyValue(e, number)
		}
		return out
	case json.Number:
		if number != nil {
			return number(v)
		}
	}
	return v
}

// Decode unmarshals the arguments into v.
func (a Arguments) Decode(v any) error {
	return json.Unmarshal([]byte(a.text), v)
}

// Field returns a top-level string field, and whether it was a string.
func (a Arguments) Field(name string) (string, bool) {
	m, ok := a.value.(map[string]any)
	if !ok {
		return "", false
	}
	s, ok := m[name].(string)
	return s, ok
}

// Request is what the agent loop submits: one model call.
type Request struct {
	// CallID is the model's identifier of the call.
	CallID string `json:"callID"`
	// Tool is the name called.
	Tool string `json:"tool"`
	// Arguments is the model's JSON text.
	Arguments string `json:"arguments"`
	// Parent is the parent call's token for a nested call.
	Parent string `json:"parent,omitempty"`
	// Requester is the identity that submitted the call.
	Requester string `json:"requester,omitempty"`
	// Session, Turn and Index place the call in model order.
	Session string `json:"session,omitempty"`
	Turn    int64  `json:"turn"`
	Index   int    `json:"index"`
}

// Call is the immutable identity every stage sees. It is passed by value;
// its Arguments are frozen.
type Call struct {
	Token     string
	CallID    string
	Tool      string
	Args      Arguments
	Parent    string
	Requester string
	Session   string
	Turn      int64
	Index     int
}

// Nested reports whether the call is a sub-call of another call.
func (c Call) Nested() bool { return c.Parent != "" }

// Exec is what a body receives besides its arguments.
type Exec struct {
	// Call is the call's identity.
	Call Call
	// Attempt is the 1-based attempt number.
	Attempt int
	// Resumed is true when Execute is re-invoked for an attempt that was
	// already started (Reattach bodies re-attach to it).
	Resumed bool
	// StartedAt is when this attempt was dispatched (persisted, so the same
	// after a restart): the attempt's Timeout runs from it unless the body
	// TimesItself, and a body may bound its own waiting by it (a sandbox
	// provider, the time its sandbox takes to get ready).
	StartedAt time.Time
	// Truncated is set by a body whose output hit its bound and was cut;
	// the result carries the flag, so a cut is never silent.
	Truncated bool
	// Sandbox is set by a Runner that knows where the attempt runs (a
	// pod's name); the state keeps it, whatever the attempt's outcome, so
	// that a settled call still names it.
	Sandbox string

	deferred []Context
	runner   Runner
}

// Run hands spec to the driver's Runner (Options.Runner): how a definition
// declared as data runs its body in the call's sandbox.
func (e *Exec) Run(ctx context.Context, spec any) (string, error) {
	if e.runner == nil {
		return "", Fail(CodeSandboxUnavailable, "no sandbox provider is available for this call")
	}
	return e.runner.Run(ctx, spec, e.Call.Args, e)
}

// DeferContext queues a message for the model, delivered after the whole
// turn has committed. Nested calls' contexts are dropped.
func (e *Exec) DeferContext(c Context) {
	c.Source = SourceTool
	e.deferred = append(e.deferred, c)
}

// Context is an additional message for the model.
type Context struct {
	// Source is SourceTool, SourcePolicy or SourceApproval.
	Source string `json:"source"`
	// Rule is the post-execute listener that attached it (SourcePolicy),
	// or the pre-execute rule that asked (SourceApproval).
	Rule string `json:"rule,omitempty"`
	// Message is the text.
	Message string `json:"message"`
}

// Context sources.
const (
	SourceTool   = "Tool"
	SourcePolicy = "Policy"
	// SourceApproval is the approvers' message on an approved call: a
	// decision context, attached before any post-execute rule's.
	SourceApproval = "Approval"
)

// Outcome classifies a result.
type Outcome string

// Outcomes.
const (
	Succeeded Outcome = "Succeeded"
	Failed    Outcome = "Failed"
	Denied    Outcome = "Denied"
	Cancelled Outcome = "Cancelled"
	TimedOut  Outcome = "TimedOut"
)

// Result is the single authoritative result of a call.
type Result struct {
	Token   string  `json:"token"`
	CallID  string  `json:"callID"`
	Tool    string  `json:"tool"`
	Outcome Outcome `json:"outcome"`
	// Code is the stable error code of a non-success outcome.
	Code Code `json:"code,omitempty"`
	// Message explains a non-success outcome.
	Message string `json:"message,omitempty"`
	// Value is the canonical value as JSON text; empty for failures.
	Value string `json:"value,omitempty"`
	// Content is the model-facing content.
	Content string `json:"content,omitempty"`
	// Contexts are delivered after the turn commits.
	Contexts []Context `json:"contexts,omitempty"`
	// Truncated says the body's output was cut at its bound.
	Truncated bool `json:"truncated,omitempty"`
}

// ResultView is a read-only view of a settled result, for finalizers and
// observers: they can read it, never change it.
type ResultView struct{ r *Result }

// Outcome of the result.
func (v ResultView) Outcome() Outcome { return v.r.Outcome }

// Code of the result.
func (v ResultView) Code() Code { return v.r.Code }

// Message of the result.
func (v ResultView) Message() string { return v.r.Message }

// Value of the result, as JSON text.
func (v ResultView) Value() string { return v.r.Value }

// Content of the result.
func (v ResultView) Content() string { return v.r.Content }

// CallID of the result.
func (v ResultView) CallID() string { return v.r.CallID }

// Token of the result.
func (v ResultView) Token() string { return v.r.Token }

// Truncated reports whether the output was cut at its bound.
func (v ResultView) Truncated() bool { return v.r.Truncated }

// Contexts returns a copy of the result's contexts.
func (v ResultView) Contexts() []Context { return append([]Context(nil), v.r.Contexts...) }
