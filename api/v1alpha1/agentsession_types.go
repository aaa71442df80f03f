package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AgentSessionSpec describes one agent conversation whose tool calls toolgate
// executes and commits in model order.
type AgentSessionSpec struct {
	// owner is the identity the session belongs to: it must be the user
	// creating the session (checked by admission), and only its calls enter
	// the session (a call with another requester is refused,
	// not_session_owner).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="owner is immutable"
	Owner string `json:"owner"`

	// profileRef names the ToolProfile (same namespace) that governs every
	// call of the session.
	// +required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="profileRef is immutable"
	ProfileRef LocalObjectReference `json:"profileRef"`

	// workspace is the volume mounted at the profile's workspace root. Unset
	// means calls run without a workspace.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="workspace is immutable"
	Workspace *WorkspaceSpec `json:"workspace,omitempty"`

	// maxParallel bounds how many parallel-safe calls of a turn run at once.
	// +optional
	// +kubebuilder:default=4
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=256
	MaxParallel int32 `json:"maxParallel,omitempty"`

	// warmPods is how many tool pods the Pod sandbox keeps started ahead of
	// need for each kind of pod this session's calls use (same image,
	// policy and workspace), never more than maxParallel. Each still serves
	// exactly one call and is replaced as it is used; the pods of a session
	// that made no call for a while are released. 0 turns it off: every
	// call starts its own pod when it is dispatched.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=16
	WarmPods *int32 `json:"warmPods,omitempty"`

	// approvalTimeoutSeconds, when set, replaces the profile's approval
	// timeout for this session's calls.
	// +optional
	// +kubebuilder:validation:Minimum=10
	// +kubebuilder:validation:Maximum=604800
	ApprovalTimeoutSeconds *int32 `json:"approvalTimeoutSeconds,omitempty"`

	// ttlSecondsAfterCommit, when set, is how long a committed call is kept
	// once its turn is complete (status.committedTurn reached it), counted
	// from its result: then the session deletes it, so that a long session
	// holds only its recent calls. The session's committedTurn,
	// nextSequence, commitCursor and deferredContexts keep what deleted
	// calls contributed; committedCalls and counts are of the calls
	// present. Unset takes the install's default (the manager's
	// --default-call-retention; the chart's callRetention, a week), and
	// keeps every call until the session is deleted where it has none; 0
	// deletes each as soon as its turn is complete.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=2592000
	TTLSecondsAfterCommit *int32 `json:"ttlSecondsAfterCommit,omitempty"`
}

// LocalObjectReference names an object in the same namespace.
type LocalObjectReference struct {
	// name of the object.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	Name string `json:"name"`
}

// WorkspaceSpec selects the session's workspace volume: an existing claim, or
// a claim toolgate creates (and deletes with the session).
// +kubebuilder:validation:XValidation:rule="has(self.existingClaim) != has(self.volumeClaimTemplate)",message="exactly one of existingClaim or volumeClaimTemplate must be set"
type WorkspaceSpec struct {
	// existingClaim is the name of a PersistentVolumeClaim to mount.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	ExistingClaim string `json:"existingClaim,omitempty"`

	// volumeClaimTemplate makes toolgate create a claim owned by the session.
	// +optional
	VolumeClaimTemplate *WorkspaceClaimTemplate `json:"volumeClaimTemplate,omitempty"`
}

// WorkspaceClaimTemplate is the part of a PersistentVolumeClaim a session
// may choose.
type WorkspaceClaimTemplate struct {
	// storageClassName of the claim; unset uses the cluster default.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	StorageClassName *string `json:"storageClassName,omitempty"`

	// size is the requested storage.
	// +required
	// +kubebuilder:validation:XValidation:rule="quantity(self).isGreaterThan(quantity('0'))",message="size must be positive"
	Size resource.Quantity `json:"size"`
}

// AgentSessionStatus is the session's durable log head.
type AgentSessionStatus struct {
	// observedGeneration is the generation the controller last reconciled,
	// whatever the outcome (Ready says what it made of it).
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions: Ready says whether the session accepts calls.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// currentTurn is the turn now being executed or committed; 0 before
	// any call. Always present once the session has a status (a default:
	// a merge patch does not send a value that stays at zero).
	// +optional
	// +kubebuilder:default=0
	CurrentTurn int64 `json:"currentTurn"`

	// committedTurn is the last complete turn: as many of its calls as it
	// declared (turnSize) have committed. It never goes back, even when a
	// committed call is deleted. -1 before any. Always present once the
	// session has a status.
	// +optional
	// +kubebuilder:default=-1
	CommittedTurn int64 `json:"committedTurn"`

	// committedCalls is the number of the session's calls present that
	// have committed (the sum of counts): a deleted call, expired ones
	// included, is no longer counted. Always present once the session has
	// a status.
	// +optional
	// +kubebuilder:default=0
	CommittedCalls int64 `json:"committedCalls"`

	// commitCursor is the position just after the last committed call.
	// +optional
	CommitCursor *CallPosition `json:"commitCursor,omitempty"`

	// nextSequence is the commit sequence the next released call receives;
	// it never decreases, even when committed calls are deleted.
	// +optional
	// +kubebuilder:default=0
	NextSequence int64 `json:"nextSequence,omitempty"`

	// counts are the committed calls per outcome, each present (at zero
	// before any) once the session has a status.
	// +optional
	// +kubebuilder:default={}
	Counts OutcomeCounts `json:"counts,omitempty"`

	// deferredContexts are the contexts of the last committed turn, in call
	// order, ready for the model's next step: at most 256, and at most
	// 512 KiB as stored, so that the session's status stays writable
	// whatever a turn's calls defer.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=256
	DeferredContexts []SessionContext `json:"deferredContexts,omitempty"`

	// deferredContextsOmitted is how many contexts of that turn are not in
	// deferredContexts (beyond its bounds, the later ones in call order):
	// each is still in its call's result (pkg/agent reads them there).
	// +optional
	DeferredContextsOmitted int32 `json:"deferredContextsOmitted,omitempty"`

	// workspaceClaimName is the claim mounted as the workspace.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	WorkspaceClaimName string `json:"workspaceClaimName,omitempty"`
}

// CallPosition is a call's place in model order.
type CallPosition struct {
	// turn of the call.
	// +required
	Turn int64 `json:"turn"`
	// index of the call within its turn.
	// +required
	Index int32 `json:"index"`
}

// OutcomeCounts count committed calls per outcome.
type OutcomeCounts struct {
	// succeeded calls.
	// +optional
	// +kubebuilder:default=0
	Succeeded int64 `json:"succeeded,omitempty"`
	// failed calls (body, wrapper, post-execute or normalization failures).
	// +optional
	// +kubebuilder:default=0
	Failed int64 `json:"failed,omitempty"`
	// denied calls (policy, approval or guard).
	// +optional
	// +kubebuilder:default=0
	Denied int64 `json:"denied,omitempty"`
	// cancelled calls.
	// +optional
	// +kubebuilder:default=0
	Cancelled int64 `json:"cancelled,omitempty"`
	// timedOut calls.
	// +optional
	// +kubebuilder:default=0
	TimedOut int64 `json:"timedOut,omitempty"`
}

// SessionContext is a released context with the call it came from.
type SessionContext struct {
	// callID of the call that produced the context.
	// +required
	// +kubebuilder:validation:MaxLength=128
	CallID string `json:"callID"`

	// AdditionalContext is the context itself.
	AdditionalContext `json:",inline"`
}

// AgentSession reasons for the Ready condition.
const (
	// AgentSessionReasonActive: the profile is usable (it compiles and its
	// providers are mounted); the session accepts calls.
	AgentSessionReasonActive = "Active"
	// AgentSessionReasonProfileNotFound: profileRef names no ToolProfile.
	AgentSessionReasonProfileNotFound = "ProfileNotFound"
	// AgentSessionReasonProfileNotReady: the ToolProfile does not compile,
	// selects a provider this manager has not mounted, or could not be
	// read; the message says which.
	AgentSessionReasonProfileNotReady = "ProfileNotReady"
	// AgentSessionReasonWorkspaceConflict: a PersistentVolumeClaim of the
	// name the session's claim template would create exists and was not
	// created by the session; toolgate never adopts it. Calls wait.
	AgentSessionReasonWorkspaceConflict = "WorkspaceConflict"
	// AgentSessionReasonWorkspaceUnavailable: the workspace claim cannot
	// be mounted (it does not exist, lost its volume, names a StorageClass
	// that does not exist, or has not bound within a grace period although
	// nothing waits for a first consumer); the message says which. Calls
	// that have not started settle with workspace_unavailable.
	AgentSessionReasonWorkspaceUnavailable = "WorkspaceUnavailable"
	// AgentSessionReasonWorkspacePending: the workspace claim has not bound
	// yet, though its class binds at once (not on first consumer); it has
	// a grace period to, then the session says WorkspaceUnavailable. Calls
	// go on: their pods wait for the claim.
	AgentSessionReasonWorkspacePending = "WorkspacePending"
	// AgentSessionReasonWorkspaceRefused: the session's claim template asks
	// for a storage class or a size its profile's sandbox.workspace does
	// not allow; no claim is created and no call starts.
	AgentSessionReasonWorkspaceRefused = "WorkspaceRefused"
)

// ConditionSandboxIsolated says whether anything in the session's
// namespace widens its tool pods' network isolation (a NetworkPolicy of
// someone else's selecting them); set when the profile's sandbox provider
// can tell.
const ConditionSandboxIsolated = "SandboxIsolated"

// AgentSession reasons for the SandboxIsolated condition.
const (
	// AgentSessionReasonIsolated: no other object widens the isolation.
	AgentSessionReasonIsolated = "Isolated"
	// AgentSessionReasonAdditiveNetworkPolicy: another NetworkPolicy selects
	// the tool pods and allows them traffic; the message names it. Calls
	// still run: the platform team decides.
	AgentSessionReasonAdditiveNetworkPolicy = "AdditiveNetworkPolicy"
)

// AgentSession is one agent conversation: its profile, workspace and the
// durable head of its committed tool results.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=ags;asess,categories=toolgate
// +kubebuilder:printcolumn:name="Profile",type=string,JSONPath=`.spec.profileRef.name`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Turn",type=integer,JSONPath=`.status.currentTurn`
// +kubebuilder:printcolumn:name="Committed",type=integer,JSONPath=`.status.committedCalls`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1
// +kubebuilder:printcolumn:name="Parallel",type=integer,JSONPath=`.spec.maxParallel`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type AgentSession struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the object's metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the session's configuration.
	// +required
	Spec AgentSessionSpec `json:"spec"`

	// status is the session's durable log head.
	// +optional
	Status AgentSessionStatus `json:"status,omitempty"`
}

// AgentSessionList is a list of AgentSessions.
// +kubebuilder:object:root=true
type AgentSessionList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []AgentSession `json:"items"`
}

func init() {
	register(&AgentSession{}, &AgentSessionList{})
}
