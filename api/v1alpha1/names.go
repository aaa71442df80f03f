package v1alpha1

import (
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The names toolgate puts on objects, in one place: the manager, its
// providers, the gateway, pkg/agent, the hack/ tools and the tests all
// speak of them through these constants.
const (
	// FinalizerStopWork is on every ToolCall: deleting the call stops its
	// work first and still commits its one result.
	FinalizerStopWork = "toolgate.dev/stop-work"
	// FinalizerSettleCalls is on every AgentSession: deleting the session
	// cancels its calls, and each still settles and commits.
	FinalizerSettleCalls = "toolgate.dev/settle-calls"

	// LabelSandbox marks every tool pod ("true").
	LabelSandbox = "toolgate.dev/sandbox"
	// LabelEgress is "true" on a tool pod its profile allows egress,
	// "proxy" on one whose tool names its hosts (reached through the
	// egress proxy only), "false" on any other.
	LabelEgress = "toolgate.dev/egress"
	// LabelCall names the ToolCall a pod made for it serves. A warm pod a
	// call claimed carries it, LabelCallUID and LabelAttempt as
	// annotations instead (PodCall reads either).
	LabelCall = "toolgate.dev/call"
	// LabelCallUID is the UID of the ToolCall a pod serves.
	LabelCallUID = "toolgate.dev/call-uid"
	// LabelAttempt is the attempt of the call a pod serves.
	LabelAttempt = "toolgate.dev/attempt"
	// LabelWarm is "true" on a pod started warm, before any call needed
	// it. A claim changes no label (a pod's label change makes the
	// node's policy engine resync, or gives the pod a new identity, while
	// the call waits): the pod waits for a call until AnnotationClaimed
	// is on it (WarmWaiting).
	LabelWarm = "toolgate.dev/warm"
	// LabelSession names the session a warm pod was started for, and the
	// session of a call pkg/agent or the gateway made (as a label value:
	// cut at 63 characters).
	LabelSession = "toolgate.dev/session"
	// LabelTurn is the turn of a call pkg/agent or the gateway made: with
	// LabelSession, a client lists one turn's calls, not the namespace's.
	LabelTurn = "toolgate.dev/turn"
	// LabelListing names the MCP server (a ToolProfile's, by its name in
	// the profile) whose tools a pod lists (discovery): such a pod serves
	// no call.
	LabelListing = "toolgate.dev/listing"
	// LabelTemplate is the hash of a warm pod's spec: a call takes a warm
	// pod only of its own template.
	LabelTemplate = "toolgate.dev/template"

	// AnnotationClaimed records when a warm pod was claimed by its call;
	// the claim also moves the pod's controller reference to the call.
	AnnotationClaimed = "toolgate.dev/claimed"
	// AnnotationSeal proves toolgate created a tool pod: a MAC of the
	// pod's namespace, name and UID under a key only the manager holds,
	// written right after the pod was created. A pod without a valid seal
	// never receives a call, yields a result or is claimed.
	AnnotationSeal = "toolgate.dev/seal"
	// AnnotationArgumentsDigest is the digest of the arguments an
	// ApprovalRequest shows, so that a person approves exactly those.
	AnnotationArgumentsDigest = "toolgate.dev/arguments-digest"
	// AnnotationTraceparent is the W3C trace context of the agent's request
	// that made a ToolCall: the call's trace joins the agent's
	// (docs/operations.md, Tracing). The MCP gateway and pkg/agent set it.
	AnnotationTraceparent = "toolgate.dev/traceparent"
	// AnnotationQuestionSeal is a MAC, under a key only the manager holds,
	// of everything an ApprovalRequest asks (call, session, tool,
	// arguments preview and digest, reason, requester, deadline): only a
	// request toolgate wrote, unchanged, is the call's question.
	AnnotationQuestionSeal = "toolgate.dev/question-seal"
)

// Settled reports whether the call's result is durable: it is never
// rewritten, and only the work that follows a settlement is left.
func (tc *ToolCall) Settled() bool {
	return tc.Status.Result != nil && tc.Status.Checkpoint == nil
}

// Committed reports whether the call's result is committed to its
// session's log, in model order.
func (tc *ToolCall) Committed() bool {
	return tc.Status.Phase == PhaseCommitted
}

// Final reports whether the call's result is what its caller gets for
// good: committed to the log, or settled where it will never be (the
// Committed condition is False: refused out of the log, nested, or without
// a session). An agent waits for this, not for Committed alone.
func (tc *ToolCall) Final() bool {
	if tc.Status.Result == nil {
		return false
	}
	if tc.Committed() {
		return true
	}
	cond := apimeta.FindStatusCondition(tc.Status.Conditions, ToolCallConditionCommitted)
	return cond != nil && cond.Status == metav1.ConditionFalse
}

// ApprovalCount is how many approvals the request holds that count, and
// how many it needs: every entry of spec.approvals that answers this
// question but the requester's (admission lets only eligible approvers add
// them, once each, bound to the question), against spec.approvers.required
// (1 when it names none).
func (ar *ApprovalRequest) ApprovalCount() (approved, required int) {
	required = 1
	if a := ar.Spec.Approvers; a != nil && a.Required > 1 {
		required = int(a.Required)
	}
	for _, a := range ar.Spec.Approvals {
		if a.User != ar.Spec.Requester && ar.Answered(a.RequestUID, a.Question) {
			approved++
		}
	}
	return approved, required
}

// QuestionIDShort is how much of a question's ID people are shown and
// name: enough that no other question shares it by chance.
const QuestionIDShort = 12

// ShortQuestionID is id as people are shown it.
func ShortQuestionID(id string) string {
	if len(id) > QuestionIDShort {
		return id[:QuestionIDShort]
	}
	if id == "" {
		return "<unsealed>"
	}
	return id
}

// QuestionID is the request's question seal: what an approver names to
// say which question she read (shown shortened by kubectl toolgate and in
// notifications).
func (ar *ApprovalRequest) QuestionID() string { return ar.Annotations[AnnotationQuestionSeal] }

// Answered reports whether an answer naming uid and question answers this
// request: the one its approver read, as toolgate sealed it.
func (ar *ApprovalRequest) Answered(uid, question string) bool {
	return uid != "" && uid == string(ar.UID) && question != "" && question == ar.QuestionID()
}

// DecisionOf is a decision on this request, as read, by user.
func (ar *ApprovalRequest) DecisionOf(action DecisionAction, user, message string) *ApprovalDecision {
	return &ApprovalDecision{Action: action, DecidedBy: user, Message: message, RequestUID: string(ar.UID), Question: ar.QuestionID()}
}

// ApprovalOf is user's approval of this request, as read.
func (ar *ApprovalRequest) ApprovalOf(user, message string) Approval {
	return Approval{User: user, Message: message, RequestUID: string(ar.UID), Question: ar.QuestionID()}
}

// PodCall names the ToolCall a tool pod serves, its UID and the attempt:
// from the labels of a pod made for the call, from the annotations of a
// warm pod the call claimed; empty for a warm pod still waiting. Which
// call controls a pod is its controller reference; this is for finding
// and reading.
func PodCall(pod metav1.Object) (name, uid, attempt string) {
	if l := pod.GetLabels(); l[LabelCall] != "" {
		return l[LabelCall], l[LabelCallUID], l[LabelAttempt]
	}
	a := pod.GetAnnotations()
	return a[LabelCall], a[LabelCallUID], a[LabelAttempt]
}

// WarmWaiting reports whether pod is a warm pod no call has claimed.
func WarmWaiting(pod metav1.Object) bool {
	return pod.GetLabels()[LabelWarm] == "true" && pod.GetAnnotations()[AnnotationClaimed] == ""
}
