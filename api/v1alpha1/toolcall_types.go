package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ToolCallSpec is a call's immutable identity: one tool call of one model
// turn, with its arguments exactly as the model produced them. Only a
// cancellation can be requested after create.
// +kubebuilder:validation:XValidation:rule="has(self.parentRef) == has(oldSelf.parentRef)",message="parentRef is immutable",fieldPath=".parentRef"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.cancelRequested) || !oldSelf.cancelRequested || (has(self.cancelRequested) && self.cancelRequested)",message="cancelRequested cannot be withdrawn once true",fieldPath=".cancelRequested"
// +kubebuilder:validation:XValidation:rule="!has(self.turnSize) || self.index < self.turnSize",message="index must be below turnSize (indexes of a turn run from 0 to turnSize-1)",fieldPath=".index"
type ToolCallSpec struct {
	// sessionRef names the AgentSession (same namespace) the call belongs to.
	// +required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="sessionRef is immutable"
	SessionRef LocalObjectReference `json:"sessionRef"`

	// turn is the model turn that produced the call.
	// +required
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000000000
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="turn is immutable"
	Turn int64 `json:"turn"`

	// index is the call's position within its turn (model order).
	// +required
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1023
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="index is immutable"
	Index int32 `json:"index"`

	// turnSize is the number of tool calls in the model turn: every call of
	// a turn declares the same size. The turn is complete once that many
	// calls have committed: only then are its deferred contexts released
	// and may the next turn start. A call whose size disagrees with its
	// turn's is refused (turn_size_mismatch).
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1024
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="turnSize is immutable"
	TurnSize int32 `json:"turnSize,omitempty"`

	// callID is the model's identifier of the call.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_.:-]+$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="callID is immutable"
	CallID string `json:"callID"`

	// tool is the name of the tool called.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z]([a-z0-9_-]{0,61}[a-z0-9])?$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="tool is immutable"
	Tool string `json:"tool"`

	// arguments is the call's arguments as JSON text, byte for byte as the
	// model produced them. Text (not an embedded object) keeps large
	// integers and number spellings lossless; toolgate validates it against
	// the tool's parameters and settles invalid JSON as an invalid-arguments
	// result. At most MaxArgumentsBytes (200 KiB), checked at create,
	// before anyone is asked.
	// +required
	// +kubebuilder:validation:MinLength=2
	// +kubebuilder:validation:MaxLength=204800
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="arguments is immutable"
	// +kubebuilder:validation:XValidation:rule="bytes(self).size() <= 204800",message="arguments are at most 204800 bytes as UTF-8 (200 KiB; a character outside ASCII takes 2 to 4)"
	Arguments string `json:"arguments"`

	// parentRef names the parent ToolCall when this is a nested call; nested
	// calls carry no additional contexts.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="parentRef is immutable"
	ParentRef *LocalObjectReference `json:"parentRef,omitempty"`

	// requester is the identity that submitted the call; it must equal the
	// creating user (checked by admission) and may not approve the call.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="requester is immutable"
	Requester string `json:"requester"`

	// cancelRequested asks toolgate to cancel the call; it can only go from
	// false to true. The call still settles with exactly one result.
	// +optional
	CancelRequested bool `json:"cancelRequested,omitempty"`
}

// MaxArgumentsBytes bounds a call's arguments: one limit for the API server
// (the MaxLength marker above spells it out, as a marker cannot name a
// constant) and every sandbox provider, so a call a person approved is
// never refused for its size afterwards.
const MaxArgumentsBytes = 200 << 10

// ToolCallStatus is the pipeline's durable state for the call.
type ToolCallStatus struct {
	// conditions are Final (True once the result is final, whatever the
	// outcome; kubectl wait --for=condition=Final), Committed (True once the
	// result is appended to the session's log in model order, False when it
	// settled outside the log) and Succeeded (True for a success, False for
	// any other outcome). Each is Unknown while the call is in flight. The
	// ToolCall controller writes them.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// phase is the call's place in the pipeline. It is empty while the
	// call waits for its session to admit it: nothing has happened to it
	// yet, and toolgate spends no write on saying so.
	// +optional
	// +kubebuilder:validation:Enum=Pending;AwaitingApproval;Running;Settled;Committed
	Phase ToolCallPhase `json:"phase,omitempty"`

	// token is the opaque execution identity assigned at admission.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	Token string `json:"token,omitempty"`

	// stages has one entry per pipeline boundary crossed, in order.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	Stages []StageRecord `json:"stages,omitempty"`

	// startTime is when the current attempt was dispatched, to the
	// microsecond: the time a sandbox may take to get ready is measured
	// from it, so a restarted manager gets the exact remainder.
	// +optional
	StartTime *metav1.MicroTime `json:"startTime,omitempty"`

	// attempt is the number of body attempts started.
	// +optional
	Attempt int32 `json:"attempt,omitempty"`

	// sandbox names where the latest attempt ran, as its provider knows it:
	// the pod's name for the pod provider (a claimed warm pod keeps a name
	// of its own). It stays once the pod is gone, so its events and logs
	// can still be found (kubectl get events --field-selector
	// involvedObject.name=POD).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Sandbox string `json:"sandbox,omitempty"`

	// result is the single authoritative result; written once.
	// +optional
	Result *ToolCallResult `json:"result,omitempty"`

	// schedule is the session's plan for the call (see CallSchedule): the
	// AgentSession controller writes refusals, a nested call's admission
	// and the release of a call that never starts; a call that starts
	// writes its own admission and release as the plan allows them.
	// +optional
	Schedule CallSchedule `json:"schedule,omitzero"`

	// checkpoint is the rest of the pipeline's durable state, so that a
	// restarted manager resumes the call exactly where it stopped.
	// +optional
	Checkpoint *PipelineCheckpoint `json:"checkpoint,omitempty"`
}

// CallSchedule is the session's plan for a call: when it may start
// (executionMode), when it may settle (released, with its place in the log)
// or that it is refused. It has two writers, both under optimistic
// locking: the AgentSession controller writes refusal, a nested call's
// admission and the release of a call that never starts (or of any call of
// a session being deleted); the ToolCall controller writes a call's own
// admission and release, with its next boundary, when the session's plan
// allows them. Every other status field is the ToolCall controller's.
type CallSchedule struct {
	// executionMode is Parallel or Exclusive, as classified just before the
	// call started; the call starts once it is set.
	// +optional
	// +kubebuilder:validation:Enum=Parallel;Exclusive
	ExecutionMode ExecutionMode `json:"executionMode,omitempty"`

	// released is set when every earlier call of the session has
	// committed: the call may run post-execute and settle. It keeps
	// post-execute and commitment in model order.
	// +optional
	Released bool `json:"released,omitempty"`

	// commitSequence is the call's position in the session's committed
	// log, assigned with released; the call is committed (phase Committed)
	// once its result is written.
	// +optional
	// +kubebuilder:validation:Minimum=0
	CommitSequence *int64 `json:"commitSequence,omitempty"`

	// refusal is set when the session will never start the call
	// (turn_closed: the call arrived after a call later in model order had
	// started); the call then settles with that code, and still commits.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Refusal string `json:"refusal,omitempty"`
}

// PipelineCheckpoint is the part of a call's pipeline state not shown
// elsewhere in its status.
type PipelineCheckpoint struct {
	// next is the next pipeline stage to run.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	Next string `json:"next,omitempty"`

	// askedAt is when pre-execute asked for approval, to the microsecond;
	// the approval deadline is measured from it.
	// +optional
	AskedAt *metav1.MicroTime `json:"askedAt,omitempty"`

	// askDeadline is the deadline the question was asked with, to the
	// microsecond: the one enforced, even when the profile's approval
	// timeout changes while the question is open.
	// +optional
	AskDeadline *metav1.MicroTime `json:"askDeadline,omitempty"`

	// askReason is the rule that asked.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	AskReason string `json:"askReason,omitempty"`

	// askMessage is the rule's message to the approver.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	AskMessage string `json:"askMessage,omitempty"`

	// askApprovers are who may answer the question and how many must, as
	// the rule that asked named them.
	// +optional
	AskApprovers *Approvers `json:"askApprovers,omitempty"`

	// notBefore delays the next attempt (retry backoff), to the
	// microsecond.
	// +optional
	NotBefore *metav1.MicroTime `json:"notBefore,omitempty"`

	// retried is the failure of the attempt a retry follows: the call's
	// outcome if it is cancelled before the retry is dispatched (after its
	// body ran, cancellation replaces only a success).
	// +optional
	Retried *CheckpointFailure `json:"retried,omitempty"`

	// body is the output of the body once post-execute has passed it; a
	// body that has not passed post-execute yet is never stored here.
	// +optional
	Body *CheckpointBody `json:"body,omitempty"`

	// bodyHeld says the body has finished and its output, which no
	// post-execute rule has passed yet, is held by the sandbox (never in
	// this status, which the agent reads) until the call's turn releases
	// it.
	// +optional
	BodyHeld bool `json:"bodyHeld,omitempty"`

	// failure is the settled failure, before finalization.
	// +optional
	Failure *CheckpointFailure `json:"failure,omitempty"`

	// decisions are the contexts post-execute rules attached.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Decisions []AdditionalContext `json:"decisions,omitempty"`
}

// CheckpointBody is a body's output.
type CheckpointBody struct {
	// value is the canonical value as JSON text.
	// +optional
	// +kubebuilder:validation:MaxLength=1048576
	Value string `json:"value,omitempty"`
	// content is the rendered content.
	// +optional
	// +kubebuilder:validation:MaxLength=1048576
	Content string `json:"content,omitempty"`
	// contexts are the tool-deferred contexts.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Contexts []AdditionalContext `json:"contexts,omitempty"`
	// truncated says the output was cut at its bound.
	// +optional
	Truncated bool `json:"truncated,omitempty"`
}

// CheckpointFailure is a settled failure.
type CheckpointFailure struct {
	// code is the stable error code.
	// +required
	// +kubebuilder:validation:MaxLength=64
	Code string `json:"code"`
	// message explains it.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Message string `json:"message,omitempty"`
}

// ToolCallPhase is a call's place in the pipeline.
type ToolCallPhase string

// ToolCall phases.
const (
	// PhasePending: admitted, waiting for pre-execute policy (written only
	// when that wait outlives a reconcile).
	PhasePending ToolCallPhase = "Pending"
	// PhaseAwaitingApproval: policy asked; a person has not answered.
	PhaseAwaitingApproval ToolCallPhase = "AwaitingApproval"
	// PhaseRunning: permitted; the body is dispatched or queued to be.
	PhaseRunning ToolCallPhase = "Running"
	// PhaseSettled: the result is written; not yet committed.
	PhaseSettled ToolCallPhase = "Settled"
	// PhaseCommitted: the result is committed to the session in model order.
	PhaseCommitted ToolCallPhase = "Committed"
)

// ToolCall conditions and their reasons. While a call is in flight every
// condition is Unknown with its phase as the reason.
const (
	// ToolCallConditionCommitted is True once the result is final and
	// appended to the session's log; False when it settled outside the log.
	ToolCallConditionCommitted = "Committed"
	// ToolCallConditionSucceeded is True for a success and False for any
	// other outcome (the reason is the outcome, the message the code).
	ToolCallConditionSucceeded = "Succeeded"
	// ToolCallConditionFinal is True once the result is final, whatever
	// the outcome: committed to the log (reason Committed) or settled
	// outside it (reason NotCommitted). It is the one condition an agent
	// waits on (kubectl wait --for=condition=Final).
	ToolCallConditionFinal = "Final"

	// ToolCallReasonCommitted: the result is in the session's log.
	ToolCallReasonCommitted = "Committed"
	// ToolCallReasonNotCommitted: the call settled outside the session's
	// log (its session is gone, or the session refused it as a duplicate
	// or for a mismatched turnSize).
	ToolCallReasonNotCommitted = "NotCommitted"
)

// ExecutionMode says whether a call may overlap its neighbours.
type ExecutionMode string

// Execution modes.
const (
	ModeParallel  ExecutionMode = "Parallel"
	ModeExclusive ExecutionMode = "Exclusive"
)

// StageRecord is one pipeline boundary crossed. Stages and verdicts are
// CamelCase enums; reasons carry the stable snake_case error codes (the
// machine vocabulary shared with results, metrics and logs) or the name of
// the deciding rule.
type StageRecord struct {
	// stage is the boundary, in the pipeline's order.
	// +required
	// +kubebuilder:validation:Enum=Call;PreExecute;Approval;Guard;Dispatch;Execute;PostExecute;Finalize;Observe;Result
	Stage string `json:"stage"`

	// verdict is the stage's outcome. The Result stage's verdict is the
	// call's outcome.
	// +required
	// +kubebuilder:validation:Enum=Admitted;Allow;Deny;Ask;AllowedOnce;Rejected;Cancelled;Unavailable;Expired;Abstain;Dispatched;OK;Error;Retry;Interrupted;Accept;Block;Skipped;Succeeded;Failed;Denied;TimedOut
	Verdict string `json:"verdict"`

	// reason is a stable code or the deciding rule's name.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	Reason string `json:"reason,omitempty"`

	// time the boundary was crossed.
	// +required
	Time metav1.Time `json:"time"`
}

// ToolCallResult is the single authoritative result of a call.
type ToolCallResult struct {
	// outcome is Succeeded, Failed, Denied, Cancelled or TimedOut.
	// +required
	// +kubebuilder:validation:Enum=Succeeded;Failed;Denied;Cancelled;TimedOut
	Outcome Outcome `json:"outcome"`

	// errorCode is the stable code of a non-success outcome.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	ErrorCode string `json:"errorCode,omitempty"`

	// message is a human-readable explanation of a non-success outcome.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Message string `json:"message,omitempty"`

	// value is the canonical result value as JSON text (absent for failures).
	// +optional
	// +kubebuilder:validation:MaxLength=1048576
	Value string `json:"value,omitempty"`

	// content is the model-facing content.
	// +optional
	// +kubebuilder:validation:MaxLength=1048576
	Content string `json:"content,omitempty"`

	// truncated says the tool's output exceeded its bound and was cut.
	// +optional
	Truncated bool `json:"truncated,omitempty"`

	// contexts are delivered to the model after the turn commits.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Contexts []AdditionalContext `json:"contexts,omitempty"`

	// settledAt is when the result was written.
	// +required
	SettledAt metav1.Time `json:"settledAt"`
}

// Outcome classifies a result.
type Outcome string

// Outcomes.
const (
	OutcomeSucceeded Outcome = "Succeeded"
	OutcomeFailed    Outcome = "Failed"
	OutcomeDenied    Outcome = "Denied"
	OutcomeCancelled Outcome = "Cancelled"
	OutcomeTimedOut  Outcome = "TimedOut"
)

// ToolCall is one tool call of an agent's model, executed through the policy
// pipeline and committed to its session in model order. A session's calls
// are listed with the field selector spec.sessionRef.name=SESSION.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=tc;tcall,categories=toolgate
// +kubebuilder:selectablefield:JSONPath=`.spec.sessionRef.name`
// +kubebuilder:printcolumn:name="Session",type=string,JSONPath=`.spec.sessionRef.name`
// +kubebuilder:printcolumn:name="Turn",type=integer,JSONPath=`.spec.turn`
// +kubebuilder:printcolumn:name="Index",type=integer,JSONPath=`.spec.index`
// +kubebuilder:printcolumn:name="Tool",type=string,JSONPath=`.spec.tool`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Outcome",type=string,JSONPath=`.status.result.outcome`
// +kubebuilder:printcolumn:name="Code",type=string,JSONPath=`.status.result.errorCode`,priority=1
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.status.schedule.executionMode`,priority=1
// +kubebuilder:printcolumn:name="Seq",type=integer,JSONPath=`.status.schedule.commitSequence`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ToolCall struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the object's metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the call's immutable identity.
	// +required
	Spec ToolCallSpec `json:"spec"`

	// status is the pipeline's durable state for the call.
	// +optional
	Status ToolCallStatus `json:"status,omitempty"`
}

// ToolCallList is a list of ToolCalls.
// +kubebuilder:object:root=true
type ToolCallList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ToolCall `json:"items"`
}

func init() {
	register(&ToolCall{}, &ToolCallList{})
}
