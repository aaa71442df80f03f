package audit

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// CallFacts are what a call's record holds beyond the call and its
// request: computed by the manager, never read back from objects anyone
// else may write.
type CallFacts struct {
	ArgumentsDigest  string
	DigestKey        string // the key ID of ArgumentsDigest and ResultDigest
	ArgumentsPreview string // redacted as the profile redacts an approver's preview
	ResultDigest     string
	Profile          string
	RuntimeClass     string
}

// ForCall is the record of a settled call; ar is its ApprovalRequest when
// it was asked about (nil otherwise).
func ForCall(tc *toolgatev1alpha1.ToolCall, ar *toolgatev1alpha1.ApprovalRequest, f CallFacts) Record {
	r := Record{
		ID: string(tc.UID) + "/call", Type: TypeCall, Time: time.Now().UTC(),
		Namespace: tc.Namespace, Session: tc.Spec.SessionRef.Name, Call: tc.Name, CallUID: string(tc.UID), CallID: tc.Spec.CallID,
		Turn: tc.Spec.Turn, Index: tc.Spec.Index, Tool: tc.Spec.Tool, Requester: tc.Spec.Requester,
		ArgumentsDigest: f.ArgumentsDigest, ArgumentsPreview: f.ArgumentsPreview, DigestKey: f.DigestKey,
		ResultDigest: f.ResultDigest, Attempts: tc.Status.Attempt, Pod: tc.Status.Sandbox,
		Profile: f.Profile, RuntimeClass: f.RuntimeClass,
	}
	if tc.Spec.ParentRef != nil {
		r.Parent = tc.Spec.ParentRef.Name
	}
	for _, s := range tc.Status.Stages {
		r.Verdicts = append(r.Verdicts, Verdict{Stage: s.Stage, Verdict: s.Verdict, Reason: s.Reason, Time: s.Time.UTC()})
	}
	if res := tc.Status.Result; res != nil {
		r.Outcome, r.Code, r.Time = string(res.Outcome), res.ErrorCode, res.SettledAt.UTC()
	}
	if ar != nil {
		r.Approval = approvalOf(ar)
	}
	return r
}

// ForDecision is the record of an approval question's end: approved,
// denied, expired or withdrawn. Its arguments digest is the question's
// annotation, made under the key digestKey names.
func ForDecision(ar *toolgatev1alpha1.ApprovalRequest, digestKey string) Record {
	r := Record{
		DigestKey: digestKey,
		ID:        callUID(ar) + "/decision", Type: TypeDecision, Time: time.Now().UTC(),
		Namespace: ar.Namespace, Call: ar.Spec.ToolCallRef.Name, CallUID: callUID(ar),
		Tool: ar.Spec.Tool, Requester: ar.Spec.Requester,
		ArgumentsDigest:  ar.Annotations[toolgatev1alpha1.AnnotationArgumentsDigest],
		ArgumentsPreview: ar.Spec.ArgumentsPreview,
		Approval:         approvalOf(ar),
	}
	if ar.Spec.SessionRef != nil {
		r.Session = ar.Spec.SessionRef.Name
	}
	if at := ar.Status.ResolvedAt; at != nil {
		r.Time = at.UTC()
	}
	return r
}

func callUID(ar *toolgatev1alpha1.ApprovalRequest) string {
	if o := metav1.GetControllerOf(ar); o != nil && o.Kind == "ToolCall" {
		return string(o.UID)
	}
	return ""
}

func approvalOf(ar *toolgatev1alpha1.ApprovalRequest) *Approval {
	_, required := ar.ApprovalCount()
	a := &Approval{Request: ar.Name, Question: ar.QuestionID(), Phase: string(ar.Status.Phase), Reason: ar.Spec.Reason, Required: int32(required), Deadline: ar.Spec.Deadline.UTC()}
	if q := ar.Spec.Approvers; q != nil {
		a.Users, a.Groups = q.Users, q.Groups
	}
	for _, x := range ar.Spec.Approvals {
		ap := Approver{User: x.User, Message: x.Message}
		for _, rec := range ar.Status.Approvals {
			if rec.User == x.User {
				t := rec.RecordedAt.UTC()
				ap.RecordedAt = &t
			}
		}
		a.Approvals = append(a.Approvals, ap)
	}
	if d := ar.Spec.Decision; d != nil {
		a.Decision = &Decision{Action: string(d.Action), DecidedBy: d.DecidedBy, Message: d.Message}
	}
	if t := ar.Status.ResolvedAt; t != nil {
		u := t.UTC()
		a.Resolved = &u
	}
	return a
}
