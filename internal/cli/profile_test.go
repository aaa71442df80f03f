package cli

import (
	"strings"
	"testing"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	tu "github.com/toolgate/toolgate/internal/testutil"
)

// TestProfileShowsRulesAndReach checks `kubectl toolgate profile` prints
// what a call meets, in order, and what each tool may reach: not only the
// tools.
func TestProfileShowsRulesAndReach(t *testing.T) {
	p := tu.MakeToolProfile("ns", "p").
		PreRule("ask-writes", toolgatev1alpha1.ActionAsk, "call.args.path.startsWith('/etc')", "echo").
		Guard("no-dotfiles", "call.args.path.startsWith('.')", "no dotfiles").
		PostRule(toolgatev1alpha1.PostRule{Name: "keys", Action: toolgatev1alpha1.PostBlock, When: "result.content.contains('KEY')"}).Obj()
	p.Spec.PreExecute[0].Approvers = &toolgatev1alpha1.Approvers{Required: 2, Users: []string{"alice"}, Groups: []string{"sre"}}
	p.Spec.Approval.TimeoutSeconds = 900
	p.Status.Approval = &toolgatev1alpha1.ResolvedApproval{Provider: toolgatev1alpha1.ApprovalProviderAPIServer, Available: true}
	p.Status.Tools = []toolgatev1alpha1.ResolvedTool{{Name: "echo", Runtime: "container", Network: "hosts", EgressHosts: []string{"api.example:443 (credential)"}}}
	p.Status.ToolCount = 1
	var out strings.Builder
	if err := writeProfile(&out, p, false); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{
		"approvers 1 of anyone allowed the verb approve, waits 900s",
		"hosts: api.example:443 (credential)",
		"pre-execute rules: 1",
		"ask-writes  Ask",
		"when call.args.path.startsWith('/etc')",
		"approvers 2 of user alice, group sre",
		"guards: 1",
		"no-dotfiles  deny  tools all  when call.args.path.startsWith('.')",
		"post-execute rules: 1",
		"keys",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the output lacks %q:\n%s", want, got)
		}
	}
}
