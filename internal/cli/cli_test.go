package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/testenv"
	tu "github.com/toolgate/toolgate/internal/testutil"
)

// TestPlugin runs the plugin's commands against a real API server, as
// distinct users.
func TestPlugin(t *testing.T) {
	env, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.Stop() }()
	ctx := context.Background()
	c := env.Client
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "cli-"}}
	must(t, c.Create(ctx, ns))
	must(t, c.Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "cli-approver"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"toolgate.dev"}, Resources: []string{"approvalrequests", "toolcalls"}, Verbs: []string{"get", "list", "patch", "update"}}},
	}))
	must(t, c.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "alice"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cli-approver"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "alice"}},
	}))
	run := func(user string, args ...string) (string, error) {
		cfg := rest.CopyConfig(env.Config)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
		var out bytes.Buffer
		cmd := NewCommand(&out, &Options{Config: cfg, Namespace: ns.Name})
		cmd.SetArgs(args)
		err := cmd.ExecuteContext(ctx)
		return out.String(), err
	}

	must(t, c.Create(ctx, tu.MakeApprovalRequest(ns.Name, "call-1", "call-1", metav1.NewTime(time.Now().Add(time.Hour))).Obj()))
	out, err := run("alice", "approve", "call-1", "-m", "looks fine")
	if err != nil || !strings.Contains(out, "Approve by alice") {
		t.Fatalf("approve: %q %v", out, err)
	}
	ar := &toolgatev1alpha1.ApprovalRequest{}
	must(t, c.Get(ctx, clientKey(ns.Name, "call-1"), ar))
	if d := ar.Spec.Decision; d == nil || d.DecidedBy != "alice" || d.Message != "looks fine" {
		t.Fatalf("decision %+v", d)
	}
	if _, err := run("alice", "deny", "call-1"); err == nil || !strings.Contains(err.Error(), "already decided") {
		t.Fatalf("second decision: %v", err)
	}

	tc := tu.MakeToolCall(ns.Name, "call-1", "s").Obj()
	must(t, c.Create(ctx, tc))
	tc.Status = toolgatev1alpha1.ToolCallStatus{
		Phase: toolgatev1alpha1.PhaseCommitted, Schedule: toolgatev1alpha1.CallSchedule{CommitSequence: ptrTo(int64(0))},
		Stages: []toolgatev1alpha1.StageRecord{
			{Stage: "Call", Verdict: "Admitted", Time: metav1.Now()},
			{Stage: "PreExecute", Verdict: "Allow", Reason: "allow-all", Time: metav1.Now()},
			{Stage: "Guard", Verdict: "Deny", Reason: "no-secrets", Time: metav1.Now()},
			{Stage: "Finalize", Verdict: "OK", Time: metav1.Now()},
		},
		Result: &toolgatev1alpha1.ToolCallResult{Outcome: toolgatev1alpha1.OutcomeDenied, ErrorCode: "guard_denied", Content: "error: guard_denied", SettledAt: metav1.Now()},
	}
	must(t, c.Status().Update(ctx, tc))
	out, err = run("alice", "trace", "call-1")
	if err != nil || !strings.Contains(out, "first divergence: Guard (Deny no-secrets)") {
		t.Fatalf("trace: %q %v", out, err)
	}
	out, err = run("alice", "transcript", "s")
	if err != nil || !strings.Contains(out, "echo") || !strings.Contains(out, "Denied") {
		t.Fatalf("transcript: %q %v", out, err)
	}
}

func ptrTo[T any](v T) *T { return &v }

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func clientKey(ns, name string) client.ObjectKey { return client.ObjectKey{Namespace: ns, Name: name} }
