package notify

import (
	"fmt"
	"strings"
	"time"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/textutil"
)

// Event types.
const (
	TypeRequested = "requested" // a question opened
	TypeDecided   = "decided"   // approved or denied by people
	TypeExpired   = "expired"   // nobody decided before the deadline
	TypeCancelled = "cancelled" // the call settled undecided
)

// Event is what a notification says. It holds the approver's redacted
// preview, never the arguments.
type Event struct {
	ID        string    `json:"id"`
	Type      string    `json:"type"`
	Time      time.Time `json:"time"`
	Namespace string    `json:"namespace"`
	Request   string    `json:"approvalRequest"`
	Call      string    `json:"call"`
	Session   string    `json:"session,omitempty"`
	Tool      string    `json:"tool"`
	Requester string    `json:"requester"`
	Reason    string    `json:"reason"`
	Preview   string    `json:"argumentsPreview"`
	Phase     string    `json:"phase"`
	Required  int32     `json:"required"`
	Approved  int32     `json:"approved"`
	DecidedBy string    `json:"decidedBy,omitempty"`
	Message   string    `json:"message,omitempty"`
	Deadline  time.Time `json:"deadline"`
	// Question is the question's ID (its seal): an answer names it, so
	// this question, and no other asked later under the same name, is the
	// one decided.
	Question string `json:"question,omitempty"`
	// Command decides the question (requested events).
	Command string `json:"command,omitempty"`
}

// maxPreview bounds the preview a notification carries (a chat message
// has room for less than an ApprovalRequest).
const maxPreview = 1500

// EventOf is the event of type typ about ar, at now.
func EventOf(ar *toolgatev1alpha1.ApprovalRequest, typ string, now time.Time) Event {
	approved, required := ar.ApprovalCount()
	e := Event{
		ID: fmt.Sprintf("%s/%s", ar.UID, typ), Type: typ, Time: now.UTC(),
		Namespace: ar.Namespace, Request: ar.Name, Call: ar.Spec.ToolCallRef.Name,
		Tool: ar.Spec.Tool, Requester: ar.Spec.Requester, Reason: ar.Spec.Reason,
		Preview: textutil.Truncate(ar.Spec.ArgumentsPreview, maxPreview),
		Phase:   string(ar.Status.Phase), Required: int32(required), Approved: int32(approved), Deadline: ar.Spec.Deadline.UTC(),
		Question: ar.QuestionID(),
	}
	if ar.Spec.SessionRef != nil {
		e.Session = ar.Spec.SessionRef.Name
	}
	if d := ar.Spec.Decision; d != nil {
		e.DecidedBy, e.Message = d.DecidedBy, d.Message
	} else if typ == TypeDecided && len(ar.Spec.Approvals) > 0 {
		names := make([]string, 0, len(ar.Spec.Approvals))
		for _, a := range ar.Spec.Approvals {
			names = append(names, a.User)
		}
		e.DecidedBy = strings.Join(names, ", ")
	}
	if typ == TypeRequested {
		q := toolgatev1alpha1.ShortQuestionID(e.Question)
		e.Command = fmt.Sprintf("kubectl toolgate approve %s -n %s --question %s   (or: kubectl toolgate deny %s -n %s --question %s -m WHY)", ar.Name, ar.Namespace, q, ar.Name, ar.Namespace, q)
	}
	return e
}

// summary is the event in one line for people.
func (e Event) summary() string {
	switch e.Type {
	case TypeRequested:
		return fmt.Sprintf("Approval needed: %s wants to run %s (session %s, namespace %s)", e.Requester, e.Tool, orDash(e.Session), e.Namespace)
	case TypeDecided:
		return fmt.Sprintf("%s: %s's call of %s (namespace %s), by %s", e.Phase, e.Requester, e.Tool, e.Namespace, orDash(e.DecidedBy))
	case TypeExpired:
		return fmt.Sprintf("Expired: nobody decided %s's call of %s (namespace %s) before its deadline; it failed closed", e.Requester, e.Tool, e.Namespace)
	default:
		return fmt.Sprintf("Withdrawn: %s's call of %s (namespace %s) settled before a decision", e.Requester, e.Tool, e.Namespace)
	}
}

// details are the event's facts for people, one per line.
func (e Event) details() []string {
	out := []string{
		"Request: " + e.Request,
		"Reason: " + e.Reason,
		"Arguments (redacted): " + e.Preview,
		fmt.Sprintf("Approvals: %d of %d", e.Approved, e.Required),
		"Deadline: " + e.Deadline.Format(time.RFC3339),
	}
	if e.Message != "" {
		out = append(out, "Message: "+e.Message)
	}
	if e.Command != "" {
		out = append(out, "Decide: "+e.Command)
	}
	return out
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
