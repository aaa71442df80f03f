package apiserver

import (
	"encoding/json"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/providers/approval"
)

// TestAsksBindsTheArgumentsDigest: a request asks the call's question when
// it was asked about the same arguments, whatever the redaction list is
// now; a request without a digest is compared by its preview.
func TestAsksBindsTheArgumentsDigest(t *testing.T) {
	call := &toolgatev1alpha1.ToolCall{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c1"}}
	ask := func(args string) pipeline.Question {
		return pipeline.Question{Call: pipeline.Call{Tool: "echo", Args: pipeline.ArgumentsOf(args), Requester: "agent"}, Reason: "ask-all", Deadline: time.Now()}
	}
	asked := question(approval.Subject{Owner: call, Redact: []string{"secret"}}, ask(`{"text":"hi","secret":"x"}`))
	legacy := asked.DeepCopy()
	legacy.Annotations = nil

	for _, tt := range []struct {
		name  string
		found bool
		now   approval.Subject
		args  string
		want  bool
	}{
		{"same arguments, same redaction", true, approval.Subject{Owner: call, Redact: []string{"secret"}}, `{"secret":"x","text":"hi"}`, true},
		{"same arguments, redaction changed since", true, approval.Subject{Owner: call, Redact: []string{"secret", "text"}}, `{"text":"hi","secret":"x"}`, true},
		{"other arguments", true, approval.Subject{Owner: call, Redact: []string{"secret"}}, `{"text":"hi","secret":"y"}`, false},
		{"no digest: same preview", false, approval.Subject{Owner: call, Redact: []string{"secret"}}, `{"text":"hi","secret":"x"}`, true},
		{"no digest: other preview", false, approval.Subject{Owner: call, Redact: []string{"secret", "text"}}, `{"text":"hi","secret":"x"}`, false},
	} {
		found := asked
		if !tt.found {
			found = legacy
		}
		if got := asks(found, question(tt.now, ask(tt.args))); got != tt.want {
			t.Errorf("%s: asks = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestTheRequestShowsTheDeadlineEnforced: the deadline an approver reads
// (spec.deadline, as the API server stores it) is the pipeline's, to the
// microsecond, even late in a second.
func TestTheRequestShowsTheDeadlineEnforced(t *testing.T) {
	call := &toolgatev1alpha1.ToolCall{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c1"}}
	deadline := time.Date(2026, 11, 30, 12, 15, 0, 900_123_000, time.UTC)
	q := pipeline.Question{Call: pipeline.Call{Tool: "echo", Args: pipeline.ArgumentsOf(`{}`), Requester: "agent"}, Reason: "ask-all", Deadline: deadline}
	data, err := json.Marshal(question(approval.Subject{Owner: call}, q))
	if err != nil {
		t.Fatal(err)
	}
	stored := &toolgatev1alpha1.ApprovalRequest{}
	if err := json.Unmarshal(data, stored); err != nil {
		t.Fatal(err)
	}
	if got := stored.Spec.Deadline.Time; !got.Equal(deadline) {
		t.Errorf("the request shows the deadline %s, the pipeline enforces %s", got.UTC().Format(time.RFC3339Nano), deadline.Format(time.RFC3339Nano))
	}
}

// TestTheRequestNamesTheSession: an approver reads whose session (whose
// transcript) the call would enter, and a request of another session is
// not the call's question.
func TestTheRequestNamesTheSession(t *testing.T) {
	call := &toolgatev1alpha1.ToolCall{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c1"}}
	q := pipeline.Question{Call: pipeline.Call{Tool: "echo", Args: pipeline.ArgumentsOf(`{}`), Requester: "agent"}, Reason: "ask-all", Deadline: time.Now()}
	asked := question(approval.Subject{Owner: call, Session: "s1"}, q)
	if ref := asked.Spec.SessionRef; ref == nil || ref.Name != "s1" {
		t.Fatalf("sessionRef %+v, want s1", ref)
	}
	if asks(asked, question(approval.Subject{Owner: call, Session: "s2"}, q)) {
		t.Error("a request about session s1 answers a call of session s2")
	}
	if !asks(asked, question(approval.Subject{Owner: call, Session: "s1"}, q)) {
		t.Error("the same question is not recognized")
	}
}
