package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	tu "github.com/toolgate/toolgate/internal/testutil"
	"github.com/toolgate/toolgate/internal/textutil"
)

func TestDecidableRefuses(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	fresh := func() *toolgatev1alpha1.ApprovalRequest {
		return tu.MakeApprovalRequest("ns", "a", "a", metav1.NewTime(now.Add(time.Minute))).Obj()
	}
	if err := decidable(fresh(), now); err != nil {
		t.Fatalf("an undecided request before its deadline: %v", err)
	}
	cases := map[string]struct {
		edit func(*toolgatev1alpha1.ApprovalRequest)
		want string
	}{
		"decided": {func(ar *toolgatev1alpha1.ApprovalRequest) {
			ar.Spec.Decision = &toolgatev1alpha1.ApprovalDecision{Action: toolgatev1alpha1.DecisionDeny, DecidedBy: "carol"}
		}, "already decided: Deny by carol"},
		"expired":   {func(ar *toolgatev1alpha1.ApprovalRequest) { ar.Status.Phase = toolgatev1alpha1.ApprovalExpired }, "expired undecided at 2026-11-30T12:01:00Z"},
		"cancelled": {func(ar *toolgatev1alpha1.ApprovalRequest) { ar.Status.Phase = toolgatev1alpha1.ApprovalCancelled }, "was cancelled"},
		"deadline passed, not yet marked": {func(ar *toolgatev1alpha1.ApprovalRequest) {
			ar.Spec.Deadline = metav1.NewMicroTime(now.Add(-time.Second))
		}, "expired undecided"},
	}
	for name, c := range cases {
		ar := fresh()
		c.edit(ar)
		if err := decidable(ar, now); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", name, err, c.want)
		}
	}
}

// TestDecideRetriesOnConflict: a write that loses a race reads the request
// again; when the winner decided it, the loser is told so instead of
// overwriting (the API server would refuse that too).
func TestDecideRetriesOnConflict(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := toolgatev1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	deadline := metav1.NewTime(time.Now().Add(time.Hour))
	base := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		withUID(tu.MakeApprovalRequest("ns", "raced", "raced", deadline).Obj()),
		withUID(tu.MakeApprovalRequest("ns", "lost", "lost", deadline).Obj()),
	).Build()
	updates := 0
	c := interceptor.NewClient(base, interceptor.Funcs{Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
		updates++
		if updates == 1 { // someone else writes first: a conflict
			return apierrors.NewConflict(schema.GroupResource{Group: "toolgate.dev", Resource: "approvalrequests"}, obj.GetName(), nil)
		}
		if obj.GetName() == "lost" { // the winner decided
			other := &toolgatev1alpha1.ApprovalRequest{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(obj), other); err != nil {
				return err
			}
			other.Spec.Decision = &toolgatev1alpha1.ApprovalDecision{Action: toolgatev1alpha1.DecisionDeny, DecidedBy: "carol"}
			if err := c.Update(ctx, other); err != nil {
				return err
			}
			return apierrors.NewConflict(schema.GroupResource{Group: "toolgate.dev", Resource: "approvalrequests"}, obj.GetName(), nil)
		}
		return c.Update(ctx, obj, opts...)
	}})
	approve := toolgatev1alpha1.ApprovalDecision{Action: toolgatev1alpha1.DecisionApprove, DecidedBy: "alice"}

	if _, err := decide(ctx, c, readFrom(t, base, "raced"), approve, time.Now()); err != nil {
		t.Fatalf("decide after a conflict: %v", err)
	}
	got := &toolgatev1alpha1.ApprovalRequest{}
	if err := base.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "raced"}, got); err != nil {
		t.Fatal(err)
	}
	if d := got.Spec.Decision; d == nil || d.DecidedBy != "alice" || updates != 2 {
		t.Fatalf("decision %+v after %d updates, want alice's after 2", d, updates)
	}

	_, err := decide(ctx, c, readFrom(t, base, "lost"), approve, time.Now())
	if err == nil || !strings.Contains(err.Error(), "already decided: Deny by carol") {
		t.Fatalf("deciding a request someone decided meanwhile: %v", err)
	}
	gone := readFrom(t, base, "raced")
	gone.Name = "nosuch"
	if _, err := decide(ctx, c, gone, approve, time.Now()); err == nil || !strings.Contains(err.Error(), `approvalrequest "nosuch" not found in namespace "ns"`) {
		t.Fatalf("a missing request: %v", err)
	}
}

func TestPreviewCutsWholeCharacters(t *testing.T) {
	s := strings.Repeat("é", 100) + "\nnext line"
	p := preview(s)
	if !utf8.ValidString(p) || len(p) > previewBytes || !strings.HasSuffix(p, "…") || strings.Contains(p, "\n") {
		t.Fatalf("preview %q (%d bytes)", p, len(p))
	}
	if got := preview("a\nb"); got != "a b" {
		t.Fatalf("short preview %q", got)
	}
}

// A request that needs several approvals takes an approve as one of them
// (a deny still decides), refuses a second from the same approver, and
// pending shows the count and who may still approve.
func TestApproveAddsOneOfSeveralApprovals(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := toolgatev1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	deadline := metav1.NewTime(time.Now().Add(time.Hour))
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		withUID(tu.MakeApprovalRequest("ns", "two", "two", deadline).Approvers(2, []string{"erin"}, []string{"reviewers"}).Obj()),
	).Build()
	approve := toolgatev1alpha1.ApprovalDecision{Action: toolgatev1alpha1.DecisionApprove, DecidedBy: "erin", Message: "fine"}
	read := readFrom(t, c, "two")
	ar, err := decide(ctx, c, read, approve, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if ar.Spec.Decision != nil || len(ar.Spec.Approvals) != 1 || ar.Spec.Approvals[0] != read.ApprovalOf("erin", "fine") {
		t.Fatalf("after one approve: decision %+v, approvals %+v", ar.Spec.Decision, ar.Spec.Approvals)
	}
	if got := decidedLine(ar, "erin", toolgatev1alpha1.DecisionApprove, "fine"); got != "approvalrequest/two: approved by erin, 1 of 2 approvals\n" {
		t.Errorf("approve said %q", got)
	}
	relaying := ar.DeepCopy()
	relaying.Spec.RelayApprovalMessages = true
	if got := decidedLine(relaying, "erin", toolgatev1alpha1.DecisionApprove, "fine"); !strings.Contains(got, "reaches the model") {
		t.Errorf("an approval whose message is relayed does not say so: %q", got)
	}
	if _, err := decide(ctx, c, read, approve, time.Now()); err == nil || !strings.Contains(err.Error(), "already holds your approval") {
		t.Fatalf("a second approve by the same approver: %v", err)
	}
	var out bytes.Buffer
	if err := writePending(&out, []toolgatev1alpha1.ApprovalRequest{*ar}, false, true, time.Now()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "1/2") || !strings.Contains(out.String(), "group reviewers") || strings.Contains(out.String(), "user erin") {
		t.Errorf("pending -o wide:\n%s", out.String())
	}
	deny := toolgatev1alpha1.ApprovalDecision{Action: toolgatev1alpha1.DecisionDeny, DecidedBy: "carol", Message: "no"}
	if ar, err = decide(ctx, c, read, deny, time.Now()); err != nil || ar.Spec.Decision == nil || ar.Spec.Decision.Action != toolgatev1alpha1.DecisionDeny {
		t.Fatalf("a deny: %+v %v", ar.Spec.Decision, err)
	}
}

// withUID gives ar the UID an API server would (the fake client gives none).
func withUID(ar *toolgatev1alpha1.ApprovalRequest) *toolgatev1alpha1.ApprovalRequest {
	ar.UID = types.UID("uid-" + ar.Name)
	return ar
}

// readFrom is the request name of namespace ns as an approver reads it.
func readFrom(t *testing.T, c client.Client, name string) *toolgatev1alpha1.ApprovalRequest {
	t.Helper()
	ar := &toolgatev1alpha1.ApprovalRequest{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: name}, ar); err != nil {
		t.Fatal(err)
	}
	return ar
}

// TestApproveInATerminalShowsTheQuestionAndAsks: without --question, approve
// shows what it would approve (made safe for the terminal) and approves
// only that, after a yes; outside a terminal it refuses; deny needs no
// question (a denial fails closed).
func TestApproveInATerminalShowsTheQuestionAndAsks(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := toolgatev1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ar := withUID(tu.MakeApprovalRequest("ns", "deploy", "deploy", metav1.NewTime(time.Now().Add(time.Hour))).Obj())
	ar.Spec.ArgumentsPreview = "{\"cmd\":\"ls\u001b[2K\u001b[1Arm -rf /\"}"
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(ar).Build()
	run := func(answer string, terminal bool, action toolgatev1alpha1.DecisionAction) (string, error) {
		var out bytes.Buffer
		o := &Options{Interactive: func() bool { return terminal }}
		o.In, o.Out = strings.NewReader(answer), textutil.NewTerminalWriter(&out)
		_, err := o.questionRead(ctx, c, "ns", "deploy", "", action)
		return out.String(), err
	}
	out, err := run("y\n", true, toolgatev1alpha1.DecisionApprove)
	if err != nil || !strings.Contains(out, "question test-seal-d") || !strings.Contains(out, `\u001b[2K\u001b[1Arm -rf /`) ||
		strings.Contains(out, "\x1b") || !strings.Contains(out, "Approve this call? [y/N]") {
		t.Fatalf("a yes in a terminal: %v\n%q", err, out)
	}
	if _, err := run("\n", true, toolgatev1alpha1.DecisionApprove); err == nil || !strings.Contains(err.Error(), "not approved") {
		t.Fatalf("no answer in a terminal approved: %v", err)
	}
	if _, err := run("y\n", false, toolgatev1alpha1.DecisionApprove); err == nil || !strings.Contains(err.Error(), "approving needs the question you read") {
		t.Fatalf("outside a terminal: %v", err)
	}
	if _, err := run("", false, toolgatev1alpha1.DecisionDeny); err != nil {
		t.Fatalf("a deny outside a terminal: %v", err)
	}
}
