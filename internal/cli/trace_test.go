package cli

import (
	"bytes"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
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
		if err := writeTrace(&out, c.tc, false); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.String(), c.want) {
			t.Errorf("%s: want %q in\n%s", name, c.want, out.String())
		}
	}
	var out bytes.Buffer
	if err := writeTrace(&out, diverged, false); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "result: Denied guard_denied ßß") || strings.Count(out.String(), "ß") > previewBytes/2 {
		t.Errorf("the result message is not cut to a preview:\n%s", out.String())
	}
}
