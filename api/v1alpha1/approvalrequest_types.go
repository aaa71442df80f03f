package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ApprovalRequestSpec is one question about one call. toolgate writes
// everything but decision; a person sets decision once.
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.decision) || (has(self.decision) && self.decision == oldSelf.decision)",message="decision can be set once and never changed or removed",fieldPath=".decision"
// +kubebuilder:validation:XValidation:rule="has(self.sessionRef) == has(oldSelf.sessionRef)",message="sessionRef is immutable",fieldPath=".sessionRef"
// +kubebuilder:validation:XValidation:rule="has(self.approvers) == has(oldSelf.approvers)",message="approvers is immutable",fieldPath=".approvers"
// +kubebuilder:validation:XValidation:rule="has(self.notify) == has(oldSelf.notify)",message="notify is immutable",fieldPath=".notify"
// +kubebuilder:validation:XValidation:rule="has(self.relayApprovalMessages) == has(oldSelf.relayApprovalMessages)",message="relayApprovalMessages is immutable",fieldPath=".relayApprovalMessages"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.approvals) || has(self.approvals)",message="an approval, once recorded, is never changed or removed",fieldPath=".approvals"
type ApprovalRequestSpec struct {
	// toolCallRef names the ToolCall the question is about.
	// +required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="toolCallRef is immutable"
	ToolCallRef LocalObjectReference `json:"toolCallRef"`

	// sessionRef names the AgentSession the call belongs to: whose
	// transcript it enters if approved. toolgate sets it on every request
	// it creates; absent only on requests asked before it existed.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="sessionRef is immutable"
	SessionRef *LocalObjectReference `json:"sessionRef,omitempty"`

	// tool is the name of the tool called.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z]([a-z0-9_-]{0,61}[a-z0-9])?$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="tool is immutable"
	Tool string `json:"tool"`

	// argumentsPreview is the call's arguments with redacted fields replaced
	// and the text cut to a bound.
	// +optional
	// +kubebuilder:validation:MaxLength=8192
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="argumentsPreview is immutable"
	ArgumentsPreview string `json:"argumentsPreview,omitempty"`

	// reason says why the call was asked about (the rule and its message).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="reason is immutable"
	Reason string `json:"reason"`

	// requester is the identity that submitted the call; it may not decide.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="requester is immutable"
	Requester string `json:"requester"`

	// deadline is when an undecided request fails closed, to the
	// microsecond: the call's askedAt plus the approval timeout.
	// +required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="deadline is immutable"
	Deadline metav1.MicroTime `json:"deadline"`

	// approvers say who may answer and how many approvals decide, as the
	// rule that asked named them; absent: one approval from anyone allowed
	// the verb approve.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="approvers is immutable"
	Approvers *Approvers `json:"approvers,omitempty"`

	// notify names the install's notification sinks told of this question
	// (its profile's approval.notify when it was asked), beside the
	// install's default ones.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="notify is immutable"
	Notify []string `json:"notify,omitempty"`

	// relayApprovalMessages says the approvals' messages (and an Approve
	// decision's) reach the model with the call's result: write nothing
	// there the agent should not read.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="relayApprovalMessages is immutable"
	RelayApprovalMessages bool `json:"relayApprovalMessages,omitempty"`

	// approvals are the approvals recorded so far, one per approver, each
	// added by its approver (admission checks who): the call is approved
	// once approvers.required have. An approval is never changed or
	// removed.
	// +optional
	// +listType=map
	// +listMapKey=user
	// +kubebuilder:validation:MaxItems=10
	// +kubebuilder:validation:XValidation:rule="oldSelf.all(o, self.exists(n, n.user == o.user && n == o))",message="an approval, once recorded, is never changed or removed"
	Approvals []Approval `json:"approvals,omitempty"`

	// decision is set once by an approver: Deny decides, whatever was
	// approved; Approve decides only a request that needs one approval.
	// +optional
	Decision *ApprovalDecision `json:"decision,omitempty"`
}

// Approval is one approver's approval.
type Approval struct {
	// user is the approver's username; admission checks it is the user
	// adding the approval.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	User string `json:"user"`

	// message is the approver's note, shown to the model when the request
	// relays approval messages.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`

	// requestUID is the metadata.uid of the request its approver read:
	// admission refuses any other, so a question asked again under the
	// same name (its call deleted and submitted anew) is never answered by
	// a person who read its predecessor. kubectl toolgate sets it.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	RequestUID string `json:"requestUID,omitempty"`

	// question is the seal of the question its approver read (the
	// request's toolgate.dev/question-seal annotation, which covers the
	// tool, arguments, reason, requester and deadline): admission refuses
	// any other. kubectl toolgate sets it from the request it read, or
	// from the --question an approver was shown.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	Question string `json:"question,omitempty"`
}

// ApprovalDecision is a person's answer.
type ApprovalDecision struct {
	// action is Approve (the call may run once) or Deny.
	// +required
	// +kubebuilder:validation:Enum=Approve;Deny
	Action DecisionAction `json:"action"`

	// decidedBy is the approver's username; admission checks it equals the
	// user setting the decision.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	DecidedBy string `json:"decidedBy"`

	// message is the approver's note, shown to the model on Deny, and on
	// Approve when the request relays approval messages.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`

	// requestUID is the metadata.uid of the request its approver read:
	// admission refuses any other, so a question asked again under the
	// same name (its call deleted and submitted anew) is never answered by
	// a person who read its predecessor. kubectl toolgate sets it.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	RequestUID string `json:"requestUID,omitempty"`

	// question is the seal of the question its approver read (the
	// request's toolgate.dev/question-seal annotation, which covers the
	// tool, arguments, reason, requester and deadline): admission refuses
	// any other. kubectl toolgate sets it from the request it read, or
	// from the --question an approver was shown.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	Question string `json:"question,omitempty"`
}

// DecisionAction is an approver's answer.
type DecisionAction string

// Decision actions.
const (
	DecisionApprove DecisionAction = "Approve"
	DecisionDeny    DecisionAction = "Deny"
)

// ApprovalRequestStatus is what toolgate made of the request.
type ApprovalRequestStatus struct {
	// phase is Pending, Approved, Denied, Expired or Cancelled.
	// +optional
	// +kubebuilder:validation:Enum=Pending;Approved;Denied;Expired;Cancelled
	Phase ApprovalPhase `json:"phase,omitempty"`

	// resolvedAt is when the phase left Pending.
	// +optional
	ResolvedAt *metav1.Time `json:"resolvedAt,omitempty"`

	// approvals are the approvals toolgate counted, each with when it first
	// saw it.
	// +optional
	// +listType=map
	// +listMapKey=user
	// +kubebuilder:validation:MaxItems=10
	Approvals []RecordedApproval `json:"approvals,omitempty"`

	// conditions: Decided is True once a person's decision is recorded
	// (reason Approved or Denied) and False otherwise (reason Pending,
	// Expired or Cancelled), so `kubectl wait --for=condition=Decided`
	// returns when someone answered. Written together with phase.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// RecordedApproval is an approval as toolgate counted it.
type RecordedApproval struct {
	// user is the approver.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	User string `json:"user"`

	// recordedAt is when toolgate first saw the approval.
	// +required
	RecordedAt metav1.Time `json:"recordedAt"`
}

// ApprovalRequestConditionDecided is the ApprovalRequest's condition: True
// when a person decided, False while nobody has or when nobody did.
const ApprovalRequestConditionDecided = "Decided"

// ApprovalRequest reasons for the Decided condition; each equals the phase
// it is written with.
const (
	// ApprovalRequestReasonPending: nobody has decided yet (False).
	ApprovalRequestReasonPending = "Pending"
	// ApprovalRequestReasonApproved: a person approved the call (True).
	ApprovalRequestReasonApproved = "Approved"
	// ApprovalRequestReasonDenied: a person denied the call (True).
	ApprovalRequestReasonDenied = "Denied"
	// ApprovalRequestReasonExpired: the deadline passed undecided; the call
	// failed closed (False).
	ApprovalRequestReasonExpired = "Expired"
	// ApprovalRequestReasonCancelled: the call settled undecided for
	// another reason, a cancellation say (False).
	ApprovalRequestReasonCancelled = "Cancelled"
)

// ApprovalPhase is the state of an approval request.
type ApprovalPhase string

// Approval phases. Every phase but Approved fails the call closed.
const (
	ApprovalPending   ApprovalPhase = "Pending"
	ApprovalApproved  ApprovalPhase = "Approved"
	ApprovalDenied    ApprovalPhase = "Denied"
	ApprovalExpired   ApprovalPhase = "Expired"
	ApprovalCancelled ApprovalPhase = "Cancelled"
)

// ApprovalRequest asks a person to approve or deny one tool call.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=apr;approval,categories=toolgate
// +kubebuilder:printcolumn:name="Call",type=string,JSONPath=`.spec.toolCallRef.name`
// +kubebuilder:printcolumn:name="Session",type=string,JSONPath=`.spec.sessionRef.name`
// +kubebuilder:printcolumn:name="Tool",type=string,JSONPath=`.spec.tool`
// +kubebuilder:printcolumn:name="Decision",type=string,JSONPath=`.spec.decision.action`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Requester",type=string,JSONPath=`.spec.requester`,priority=1
// +kubebuilder:printcolumn:name="Deadline",type=string,JSONPath=`.spec.deadline`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ApprovalRequest struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the object's metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the question and, once set, its decision.
	// +required
	Spec ApprovalRequestSpec `json:"spec"`

	// status is what toolgate made of the request.
	// +optional
	Status ApprovalRequestStatus `json:"status,omitempty"`
}

// ApprovalRequestList is a list of ApprovalRequests.
// +kubebuilder:object:root=true
type ApprovalRequestList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ApprovalRequest `json:"items"`
}

func init() {
	register(&ApprovalRequest{}, &ApprovalRequestList{})
}
