package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/egress"
	tu "github.com/toolgate/toolgate/internal/testutil"
)

// TestTraceNamesWhereACallStands: the first divergence, a call that went
// well, and the two states a call has before any boundary (waiting for
// the session, refused by it).
func TestTraceNamesWhereACallStands(t *testing.T) {
	now := metav1.Now()
	diverged := tu.MakeToolCall("ns", "c", "s").Obj()
	diverged.Status.Schedule.ExecutionMode = toolgatev1alpha1.ModeExclusive
	diverged.Status.Stages = []toolgatev1alpha1.StageRecord{
		{Stage: "Call", Verdict: "Admitted", Time: now},
		{Stage: "PreExecute", Verdict: "Allow", Reason: "allow-reads", Time: now},
		{Stage: "Guard", Verdict: "Deny", Reason: "no-dotfiles", Time: now},
		{Stage: "Finalize", Verdict: "OK", Time: now},
	}
	diverged.Status.Result = &toolgatev1alpha1.ToolCallResult{Outcome: toolgatev1alpha1.OutcomeDenied, ErrorCode: "guard_denied", Message: strings.Repeat("ß", 100)}

	ok := tu.MakeToolCall("ns", "c", "s").Obj()
	ok.Status.Schedule.ExecutionMode = toolgatev1alpha1.ModeParallel
	ok.Status.Stages = []toolgatev1alpha1.StageRecord{{Stage: "Call", Verdict: "Admitted", Time: now}, {Stage: "Result", Verdict: "OK", Time: now}}
	ok.Status.Result = &toolgatev1alpha1.ToolCallResult{Outcome: toolgatev1alpha1.OutcomeSucceeded}

	refused := tu.MakeToolCall("ns", "c", "s").Refused("turn_closed").Obj()

	cases := map[string]struct {
		tc   *toolgatev1alpha1.ToolCall
		want string
	}{
		"diverged":  {diverged, "first divergence: Guard (Deny no-dotfiles)"},
		"went well": {ok, "no divergence: every boundary passed"},
		"waiting":   {tu.MakeToolCall("ns", "c", "s").Obj(), "waiting: session s has not started the call"},
		"refused":   {refused, "refused by session s: turn_closed"},
	}
	for name, c := range cases {
		var out bytes.Buffer
		if err := writeTrace(&out, c.tc, nil, false); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.String(), c.want) {
			t.Errorf("%s: want %q in\n%s", name, c.want, out.String())
		}
	}
	var out bytes.Buffer
	if err := writeTrace(&out, diverged, nil, false); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "result: Denied guard_denied ßß") || strings.Count(out.String(), "ß") > previewBytes/2 {
		t.Errorf("the result message is not cut to a preview:\n%s", out.String())
	}
}

// TestTraceSaysDurationsAndTheApprover: each boundary's time since the one
// before it (the first: since the call was created), and who answered the
// ApprovalRequest.
func TestTraceSaysDurationsAndTheApprover(t *testing.T) {
	created := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC))
	at := func(sec int) metav1.Time { return metav1.NewTime(created.Add(time.Duration(sec) * time.Second)) }
	tc := tu.MakeToolCall("ns", "c", "s").Obj()
	tc.CreationTimestamp = created
	tc.Status.Attempt, tc.Status.Sandbox = 1, "s-t0-i0-1a2b3c4d-a1"
	tc.Status.Stages = []toolgatev1alpha1.StageRecord{
		{Stage: "Call", Verdict: "Admitted", Time: at(1)},
		{Stage: "PreExecute", Verdict: "Ask", Reason: "ask-writes", Time: at(1)},
		{Stage: "Approval", Verdict: "AllowedOnce", Time: at(95)},
		{Stage: "Result", Verdict: "Succeeded", Time: at(97)},
	}
	tc.Status.Result = &toolgatev1alpha1.ToolCallResult{Outcome: toolgatev1alpha1.OutcomeSucceeded}
	ar := &toolgatev1alpha1.ApprovalRequest{ObjectMeta: metav1.ObjectMeta{Name: "c", UID: "uid-c",
		Annotations: map[string]string{toolgatev1alpha1.AnnotationQuestionSeal: "seal-c"}}}
	ar.Spec.Decision = ar.DecisionOf(toolgatev1alpha1.DecisionApprove, "alice", "looks fine")
	resolved := at(95)
	ar.Status.ResolvedAt = &resolved
	var out bytes.Buffer
	if err := writeTrace(&out, tc, ar, false); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"03:04:01  1s     Call",
		"03:04:01  0s     PreExecute",
		"03:05:35  1m34s  Approval",
		"approval: approvalrequest/c Approve by alice at 2026-01-02T03:05:35Z: looks fine",
		"attempt 1 ran in s-t0-i0-1a2b3c4d-a1",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("want %q in\n%s", want, out.String())
		}
	}
	ar.Spec.Decision, ar.Status.Phase = nil, toolgatev1alpha1.ApprovalPhase("Pending")
	out.Reset()
	if err := writeTrace(&out, tc, ar, false); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "approval: approvalrequest/c Pending, no decision") {
		t.Errorf("an unanswered request is said so:\n%s", out.String())
	}

	// A request that needs two: the count, and each approval with when
	// toolgate saw it and its note.
	ar.Spec.Approvers = &toolgatev1alpha1.Approvers{Required: 2, Groups: []string{"reviewers"}}
	ar.Spec.Approvals = []toolgatev1alpha1.Approval{ar.ApprovalOf("carol", "looks right")}
	ar.Status.Approvals = []toolgatev1alpha1.RecordedApproval{{User: "carol", RecordedAt: at(60)}}
	out.Reset()
	if err := writeTrace(&out, tc, ar, false); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"approval: approvalrequest/c Pending, 1 of 2 approvals", "  approved by carol at 2026-01-02T03:05:00Z: looks right"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("want %q in\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "no decision") {
		t.Errorf("a request with approvals is not one without an answer:\n%s", out.String())
	}
}

// The trace lists the egress proxy's record of the body's requests, with
// their counts, and only the proxy's: another reporter's Event with the
// same label is not the proxy's word.
func TestTraceListsTheProxysRecord(t *testing.T) {
	at := metav1.NewMicroTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	evs := []eventsv1.Event{
		{ReportingController: egress.ReportingController, EventTime: at, Reason: egress.EventRefused, Note: "host_refused: elsewhere.test port 443 (tool fetch)",
			Series: &eventsv1.EventSeries{Count: 3}},
		{ReportingController: "someone.else", EventTime: at, Reason: egress.EventCredentialInjected, Note: "forged"},
		{ReportingController: egress.ReportingController, EventTime: at, Reason: egress.EventCredentialInjected, Note: "injected: api.test port 443"},
	}
	var out bytes.Buffer
	if err := writeEgress(&out, evs); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	for _, want := range []string{"egress (the proxy's record", "03:04:05  3      EgressRefused       host_refused: elsewhere.test port 443 (tool fetch)", "1      CredentialInjected  injected: api.test port 443"} {
		if !strings.Contains(text, want) {
			t.Errorf("trace lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "forged") {
		t.Errorf("trace shows another reporter's Event:\n%s", text)
	}
	out.Reset()
	if err := writeEgress(&out, nil); err != nil || out.Len() != 0 {
		t.Errorf("no Events wrote %q", out.String())
	}
}

// The commands' client knows every type they list: trace lists Events,
// and a type the scheme lacks fails the list, not the API server.
func TestTheSchemeKnowsEveryTypeTheCommandsRead(t *testing.T) {
	s := newScheme()
	for _, o := range []runtime.Object{&eventsv1.EventList{}, &corev1.NamespaceList{}, &toolgatev1alpha1.ToolCallList{}, &toolgatev1alpha1.ApprovalRequestList{}} {
		if _, _, err := s.ObjectKinds(o); err != nil {
			t.Errorf("%T: %v", o, err)
		}
	}
}
