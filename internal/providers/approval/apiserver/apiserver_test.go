package apiserver

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/keys"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/providers/approval"
)

// stored is ar as the API server stores it (times to the microsecond).
func stored(t *testing.T, ar *toolgatev1alpha1.ApprovalRequest) *toolgatev1alpha1.ApprovalRequest {
	t.Helper()
	data, err := json.Marshal(ar)
	if err != nil {
		t.Fatal(err)
	}
	out := &toolgatev1alpha1.ApprovalRequest{}
	if err := json.Unmarshal(data, out); err != nil {
		t.Fatal(err)
	}
	return out
}

var testKey = []byte("0123456789abcdef0123456789abcdef")

// TestAsksBindsTheWholeQuestion: a request asks the call's question only
// when toolgate wrote it (its seal, under the manager's key) about the same
// arguments, whatever the redaction list is now; a request someone else
// wrote, or changed (preview, reason, deadline, session, digest), or one
// sealed under another key, is not the question. The digest tells nothing
// of the arguments to whoever cannot compute it (a redacted value cannot
// be recovered by hashing guesses).
func TestAsksBindsTheWholeQuestion(t *testing.T) {
	p := New(nil, nil, testKey)
	call := &toolgatev1alpha1.ToolCall{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c1"}}
	ask := func(args string) pipeline.Question {
		return pipeline.Question{Call: pipeline.Call{Tool: "echo", Args: pipeline.ArgumentsOf(args), Requester: "agent"}, Reason: "ask-all",
			Deadline: time.Date(2026, 12, 2, 3, 0, 0, 123_456_789, time.UTC)}
	}
	subject := approval.Subject{Owner: call, Session: "s1", Redact: []string{"secret"}}
	asked := stored(t, p.question(subject, ask(`{"text":"hi","secret":"1234"}`)))
	changed := func(edit func(*toolgatev1alpha1.ApprovalRequest)) *toolgatev1alpha1.ApprovalRequest {
		ar := asked.DeepCopy()
		edit(ar)
		return ar
	}
	other := New(nil, nil, []byte("another key, another manager...")).question(subject, ask(`{"text":"hi","secret":"1234"}`))
	for _, tt := range []struct {
		name  string
		found *toolgatev1alpha1.ApprovalRequest
		now   approval.Subject
		args  string
		want  bool
	}{
		{"same arguments, same redaction", asked, subject, `{"secret":"1234","text":"hi"}`, true},
		{"same arguments, redaction changed since", asked, approval.Subject{Owner: call, Session: "s1", Redact: []string{"secret", "text"}}, `{"text":"hi","secret":"1234"}`, true},
		{"other arguments", asked, subject, `{"text":"hi","secret":"9999"}`, false},
		{"the preview changed", changed(func(ar *toolgatev1alpha1.ApprovalRequest) { ar.Spec.ArgumentsPreview = `{"text":"ls"}` }), subject, `{"text":"hi","secret":"1234"}`, false},
		{"the reason changed", changed(func(ar *toolgatev1alpha1.ApprovalRequest) { ar.Spec.Reason = "routine" }), subject, `{"text":"hi","secret":"1234"}`, false},
		{"the deadline changed", changed(func(ar *toolgatev1alpha1.ApprovalRequest) {
			ar.Spec.Deadline = metav1.NewMicroTime(ar.Spec.Deadline.Add(time.Hour))
		}), subject, `{"text":"hi","secret":"1234"}`, false},
		{"no session", changed(func(ar *toolgatev1alpha1.ApprovalRequest) { ar.Spec.SessionRef = nil }), subject, `{"text":"hi","secret":"1234"}`, false},
		{"no seal", changed(func(ar *toolgatev1alpha1.ApprovalRequest) {
			delete(ar.Annotations, toolgatev1alpha1.AnnotationQuestionSeal)
		}), subject, `{"text":"hi","secret":"1234"}`, false},
		{"sealed under another key", stored(t, other), subject, `{"text":"hi","secret":"1234"}`, false},
	} {
		if got := p.asks(tt.found, p.question(tt.now, ask(tt.args))); got != tt.want {
			t.Errorf("%s: asks = %v, want %v", tt.name, got, tt.want)
		}
	}
	// Guessing the redacted value against the digest: every guess's plain
	// hash differs from it, and so does the digest under another key.
	d := asked.Annotations[toolgatev1alpha1.AnnotationArgumentsDigest]
	sum := sha256.Sum256([]byte(`{"secret":"1234","text":"hi"}`))
	if strings.Contains(d, hex.EncodeToString(sum[:])) || d == other.Annotations[toolgatev1alpha1.AnnotationArgumentsDigest] {
		t.Fatalf("the digest %s is computable without the manager's key", d)
	}
}

// TestTheRequestShowsTheDeadlineEnforced: the deadline an approver reads
// (spec.deadline, as the API server stores it) is the pipeline's, to the
// microsecond, even late in a second.
func TestTheRequestShowsTheDeadlineEnforced(t *testing.T) {
	call := &toolgatev1alpha1.ToolCall{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c1"}}
	deadline := time.Date(2026, 11, 30, 12, 15, 0, 900_123_000, time.UTC)
	q := pipeline.Question{Call: pipeline.Call{Tool: "echo", Args: pipeline.ArgumentsOf(`{}`), Requester: "agent"}, Reason: "ask-all", Deadline: deadline}
	data, err := json.Marshal(New(nil, nil, testKey).question(approval.Subject{Owner: call}, q))
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
	p := New(nil, nil, testKey)
	asked := stored(t, p.question(approval.Subject{Owner: call, Session: "s1"}, q))
	if ref := asked.Spec.SessionRef; ref == nil || ref.Name != "s1" {
		t.Fatalf("sessionRef %+v, want s1", ref)
	}
	if p.asks(asked, p.question(approval.Subject{Owner: call, Session: "s2"}, q)) {
		t.Error("a request about session s1 answers a call of session s2")
	}
	if !p.asks(asked, p.question(approval.Subject{Owner: call, Session: "s1"}, q)) {
		t.Error("the same question is not recognized")
	}
}

// TestAQuestionOutlivesOneKeyRotation: a question asked under the key
// before the last rotation is still the call's; one asked under a key two
// rotations ago is not (the ask fails closed).
func TestAQuestionOutlivesOneKeyRotation(t *testing.T) {
	call := &toolgatev1alpha1.ToolCall{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c1"}}
	subject := approval.Subject{Owner: call, Session: "s1"}
	q := pipeline.Question{Call: pipeline.Call{Tool: "echo", Args: pipeline.ArgumentsOf(`{"text":"hi"}`), Requester: "agent"}, Reason: "ask-all",
		Deadline: time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)}
	k1, k2, k3 := []byte("the key before the rotation......"), []byte("the key after the rotation......."), []byte("the key after a second rotation..")
	asked := stored(t, New(nil, nil, k1).question(subject, q))
	rotated := New(nil, nil, k2)
	if rotated.asksUnderAnyKey(asked, subject, q) {
		t.Fatal("a manager that does not hold the previous key took the question")
	}
	rotated.Previous = k1
	if !rotated.asksUnderAnyKey(asked, subject, q) {
		t.Fatal("the question asked before the rotation is no longer the call's")
	}
	twice := New(nil, nil, k3)
	twice.Previous = k2
	if twice.asksUnderAnyKey(asked, subject, q) {
		t.Fatal("a question of two rotations ago still counts")
	}
	if !rotated.asksUnderAnyKey(stored(t, rotated.question(subject, q)), subject, q) {
		t.Fatal("a question asked under the current key")
	}

	// The audit trail names the key of each digest: a question asked
	// before the rotation, ending after it, is recorded with the key that
	// made its annotation, not the one the manager holds now.
	if got, want := rotated.sealKeyID(asked), keys.KeyID(k1); got != want || got == keys.KeyID(k2) {
		t.Errorf("the question asked under the old key ended recorded under %q, want %q", got, want)
	}
	if got := rotated.sealKeyID(stored(t, rotated.question(subject, q))); got != keys.KeyID(k2) {
		t.Errorf("a question asked under the current key: %q", got)
	}
	if got := twice.sealKeyID(asked); got != "" {
		t.Errorf("a question no held key sealed is credited to %q", got)
	}
	if d := AuditDigests(k2); d.KeyID != keys.KeyID(k2) || d.Arguments(q.Call.Args) != ArgumentsDigest(k2, q.Call.Args) ||
		d.Arguments(q.Call.Args) == asked.Annotations[toolgatev1alpha1.AnnotationArgumentsDigest] {
		t.Errorf("the call record's digests and key ID disagree: %+v", d.KeyID)
	}
	if strings.Contains(keys.KeyID(k1), hex.EncodeToString(k1[:4])) {
		t.Error("the key ID shows the key")
	}
}

// TestAQuestionLeftWithoutAPhaseIsPending: a manager that stopped between
// creating a request and writing its phase leaves it without one; the
// next ask writes Pending, the phase approvers look for (a one-replica
// kill storm left such a question unanswered until its deadline).
func TestAQuestionLeftWithoutAPhaseIsPending(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := toolgatev1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	call := &toolgatev1alpha1.ToolCall{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c1", UID: "u1"}}
	c := fake.NewClientBuilder().WithScheme(scheme).WithStatusSubresource(&toolgatev1alpha1.ApprovalRequest{}).Build()
	p := New(c, clocktesting.NewFakePassiveClock(time.Now()), testKey)
	subj := approval.Subject{Owner: call}
	q := pipeline.Question{Call: pipeline.Call{Tool: "echo", Args: pipeline.ArgumentsOf(`{}`), Requester: "agent"}, Reason: "ask-all", Deadline: time.Now().Add(time.Hour)}
	left := p.question(subj, q)
	if err := controllerutil.SetControllerReference(call, left, scheme); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(context.Background(), left); err != nil {
		t.Fatal(err)
	}
	if answer, _ := p.Approve(context.Background(), subj, q); answer != pipeline.AnswerPending {
		t.Fatalf("answer %v, want pending", answer)
	}
	got := &toolgatev1alpha1.ApprovalRequest{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(left), got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != toolgatev1alpha1.ApprovalPending {
		t.Fatalf("phase %q, want Pending", got.Status.Phase)
	}
}

// TestAnEndedQuestionIsLoggedWithWhoAnswered: the manager's log says who
// approved or denied, never the arguments.
func TestAnEndedQuestionIsLoggedWithWhoAnswered(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := toolgatev1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	ctx := log.IntoContext(context.Background(), funcr.New(func(prefix, args string) { logs.WriteString(args + "\n") }, funcr.Options{}))
	call := &toolgatev1alpha1.ToolCall{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c1", UID: "u1"}}
	c := withUIDs(fake.NewClientBuilder().WithScheme(scheme).WithStatusSubresource(&toolgatev1alpha1.ApprovalRequest{}).Build())
	p := New(c, clocktesting.NewFakePassiveClock(time.Now()), testKey)
	subj := approval.Subject{Owner: call}
	q := pipeline.Question{Call: pipeline.Call{Tool: "echo", Args: pipeline.ArgumentsOf(`{"text":"log-argument-marker"}`), Requester: "agent"},
		Reason: "ask-all", Deadline: time.Now().Add(time.Hour)}
	if answer, _ := p.Approve(ctx, subj, q); answer != pipeline.AnswerPending {
		t.Fatalf("answer %v", answer)
	}
	ar := &toolgatev1alpha1.ApprovalRequest{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "c1"}, ar); err != nil {
		t.Fatal(err)
	}
	ar.Spec.Decision = ar.DecisionOf(toolgatev1alpha1.DecisionDeny, "carol", "")
	if err := c.Update(ctx, ar); err != nil {
		t.Fatal(err)
	}
	if answer, _ := p.Approve(ctx, subj, q); answer != pipeline.Rejected {
		t.Fatalf("answer %v", answer)
	}
	if !strings.Contains(logs.String(), `"msg"="approval question ended"`) || !strings.Contains(logs.String(), `"approvers"=["carol"]`) ||
		!strings.Contains(logs.String(), `"phase"="Denied"`) {
		t.Errorf("logs:\n%s", logs.String())
	}
	if strings.Contains(logs.String(), "log-argument-marker") {
		t.Errorf("the arguments in the log:\n%s", logs.String())
	}
}

// withUIDs gives each object c creates a UID, as the API server does.
func withUIDs(c client.WithWatch) client.WithWatch {
	n := 0
	return interceptor.NewClient(c, interceptor.Funcs{Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
		n++
		obj.SetUID(types.UID(fmt.Sprintf("uid-%d", n)))
		return c.Create(ctx, obj, opts...)
	}})
}

// TestOnlyAnAnswerToThisQuestionCounts: a decision or an approval counts
// only when it names this request (its UID) as toolgate sealed it (its
// question seal). Admission refuses others; one written around admission
// (a cluster without the policies) decides nothing, and a decision, which
// is never changed, then fails the call closed.
func TestOnlyAnAnswerToThisQuestionCounts(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := toolgatev1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	q := pipeline.Question{Call: pipeline.Call{Tool: "echo", Args: pipeline.ArgumentsOf(`{"cmd":"ls"}`), Requester: "agent"},
		Reason: "ask-all", Deadline: time.Now().Add(time.Hour)}
	for _, tt := range []struct {
		name   string
		answer func(ar *toolgatev1alpha1.ApprovalRequest)
		want   pipeline.Answer
	}{
		{"a decision naming this question", func(ar *toolgatev1alpha1.ApprovalRequest) {
			ar.Spec.Decision = ar.DecisionOf(toolgatev1alpha1.DecisionApprove, "carol", "")
		}, pipeline.AllowedOnce},
		{"a decision naming no question", func(ar *toolgatev1alpha1.ApprovalRequest) {
			ar.Spec.Decision = &toolgatev1alpha1.ApprovalDecision{Action: toolgatev1alpha1.DecisionApprove, DecidedBy: "carol"}
		}, pipeline.Unavailable},
		{"a decision naming a predecessor's UID", func(ar *toolgatev1alpha1.ApprovalRequest) {
			ar.Spec.Decision = ar.DecisionOf(toolgatev1alpha1.DecisionApprove, "carol", "")
			ar.Spec.Decision.RequestUID = "the-predecessor"
		}, pipeline.Unavailable},
		{"a decision naming another seal", func(ar *toolgatev1alpha1.ApprovalRequest) {
			ar.Spec.Decision = ar.DecisionOf(toolgatev1alpha1.DecisionApprove, "carol", "")
			ar.Spec.Decision.Question = "0123456789ab"
		}, pipeline.Unavailable},
		{"an approval naming this question", func(ar *toolgatev1alpha1.ApprovalRequest) {
			ar.Spec.Approvals = []toolgatev1alpha1.Approval{ar.ApprovalOf("carol", "")}
		}, pipeline.AllowedOnce},
		{"an approval naming a predecessor", func(ar *toolgatev1alpha1.ApprovalRequest) {
			a := ar.ApprovalOf("carol", "")
			a.RequestUID = "the-predecessor"
			ar.Spec.Approvals = []toolgatev1alpha1.Approval{a}
		}, pipeline.AnswerPending},
	} {
		t.Run(tt.name, func(t *testing.T) {
			call := &toolgatev1alpha1.ToolCall{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c1", UID: "u1"}}
			c := withUIDs(fake.NewClientBuilder().WithScheme(scheme).WithStatusSubresource(&toolgatev1alpha1.ApprovalRequest{}).Build())
			p := New(c, clocktesting.NewFakePassiveClock(time.Now()), testKey)
			subj := approval.Subject{Owner: call}
			if answer, _ := p.Approve(ctx, subj, q); answer != pipeline.AnswerPending {
				t.Fatalf("asked: %v", answer)
			}
			ar := &toolgatev1alpha1.ApprovalRequest{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "c1"}, ar); err != nil {
				t.Fatal(err)
			}
			tt.answer(ar)
			if err := c.Update(ctx, ar); err != nil {
				t.Fatal(err)
			}
			if answer, why := p.Approve(ctx, subj, q); answer != tt.want {
				t.Fatalf("answer %v (%s), want %v", answer, why, tt.want)
			}
		})
	}
}

// TestACallNamedLikeADeletedOneIsAskedItsOwnQuestion: a call deleted while
// its question waited, and submitted again under the same name, finds its
// predecessor's request (the garbage collector has not removed it yet): the
// request is removed and the call asked its own question; the approval
// recorded on the old one never counts for it.
func TestACallNamedLikeADeletedOneIsAskedItsOwnQuestion(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := toolgatev1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c := withUIDs(fake.NewClientBuilder().WithScheme(scheme).WithStatusSubresource(&toolgatev1alpha1.ApprovalRequest{}).Build())
	p := New(c, clocktesting.NewFakePassiveClock(time.Now()), testKey)
	ask := func(uid types.UID, args string) (pipeline.Answer, approval.Subject, pipeline.Question) {
		subj := approval.Subject{Owner: &toolgatev1alpha1.ToolCall{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "deploy", UID: uid}}}
		q := pipeline.Question{Call: pipeline.Call{Tool: "deploy", Args: pipeline.ArgumentsOf(args), Requester: "agent"}, Reason: "ask-all", Deadline: time.Now().Add(time.Hour)}
		answer, _ := p.Approve(ctx, subj, q)
		return answer, subj, q
	}
	if answer, _, _ := ask("u-old", `{"cmd":"ls -l /tmp"}`); answer != pipeline.AnswerPending {
		t.Fatalf("the first call: %v", answer)
	}
	old := &toolgatev1alpha1.ApprovalRequest{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "deploy"}, old); err != nil {
		t.Fatal(err)
	}
	old.Spec.Decision = old.DecisionOf(toolgatev1alpha1.DecisionApprove, "carol", "")
	if err := c.Update(ctx, old); err != nil {
		t.Fatal(err)
	}
	// The call is deleted and sent again, other arguments, same name.
	answer, subj, q := ask("u-new", `{"cmd":"rm -rf /data"}`)
	if answer != pipeline.AnswerPending {
		t.Fatalf("the second call, beside its predecessor's approved question: %v", answer)
	}
	if answer, _ := p.Approve(ctx, subj, q); answer != pipeline.AnswerPending {
		t.Fatalf("asked again: %v, want its own question pending", answer)
	}
	now := &toolgatev1alpha1.ApprovalRequest{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "deploy"}, now); err != nil {
		t.Fatal(err)
	}
	if now.UID == old.UID || now.Spec.Decision != nil || !metav1.IsControlledBy(now, subj.Owner) {
		t.Fatalf("the call's question is not its own: uid %s (old %s), decision %+v", now.UID, old.UID, now.Spec.Decision)
	}
}
