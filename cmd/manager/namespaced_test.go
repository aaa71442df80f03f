package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/compose"
	"github.com/toolgate/toolgate/internal/lifecycle"
	"github.com/toolgate/toolgate/internal/testenv"
	tu "github.com/toolgate/toolgate/internal/testutil"
)

// TestNamespacedInstall: a manager holding only the RBAC of
// config/namespaced (Roles, no ClusterRole) and started with its
// --watch-namespaces runs a call in a watched namespace to Committed, and
// never touches the same objects in a namespace it does not watch. It then
// does the same as cluster-admin: the list alone keeps the manager out of
// other namespaces, whatever it is granted.
func TestNamespacedInstall(t *testing.T) {
	g := NewWithT(t)
	logs := filepath.Join(t.TempDir(), "manager.log")
	logFile, err := os.Create(logs)
	g.Expect(err).NotTo(HaveOccurred())
	ctrl.SetLogger(zap.New(zap.WriteTo(logFile), zap.UseDevMode(true), zap.StacktraceLevel(zapcore.PanicLevel)))
	// Cleanups run last first: the managers stop, then the API server,
	// then the log is shown if the test failed.
	t.Cleanup(func() {
		_ = logFile.Close()
		if t.Failed() {
			data, _ := os.ReadFile(logs)
			t.Logf("manager log (last 8 KiB):\n%s", data[max(0, len(data)-8192):])
		}
	})
	env, err := testenv.Start()
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = env.Stop() })
	ctx := context.Background()
	inst := renderNamespaced(t)
	g.Expect(inst.watch).NotTo(BeEmpty(), "config/namespaced starts the manager without --watch-namespaces")
	const unwatched = "elsewhere"
	g.Expect(inst.watch).NotTo(ContainElement(unwatched))
	watched := inst.watch[0]

	// The watched namespaces exist before the install (docs/install.md).
	for _, ns := range append(slices.Clone(inst.watch), unwatched) {
		g.Expect(env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	}
	var managerBindings []string
	for _, u := range inst.objects {
		switch u.GetKind() {
		case "Namespace", "ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding":
			g.Expect(env.Client.Create(ctx, u)).To(Succeed(), "%s %s/%s", u.GetKind(), u.GetNamespace(), u.GetName())
		}
		if binds(u, inst.managerNamespace, inst.serviceAccount) {
			ref, _, _ := unstructured.NestedString(u.Object, "roleRef", "name")
			if u.GetKind() == "ClusterRoleBinding" && ref == "toolgate-metrics-auth-role" {
				// The one cluster-wide grant: asking the API server who a
				// metrics scraper is and what it may do (TokenReview,
				// SubjectAccessReview, cluster-wide kinds), nothing read.
				continue
			}
			g.Expect(u.GetKind()).To(Equal("RoleBinding"), "config/namespaced grants the manager %s %s", u.GetKind(), u.GetName())
			if ref, _, _ := unstructured.NestedString(u.Object, "roleRef", "name"); ref == "toolgate-manager-role" {
				managerBindings = append(managerBindings, u.GetNamespace())
			}
		}
	}
	for _, u := range inst.objects {
		if u.GetKind() == "ClusterRole" && u.GetName() == "toolgate-metrics-auth-role" {
			rules, _, _ := unstructured.NestedSlice(u.Object, "rules")
			g.Expect(rules).To(ConsistOf(
				map[string]any{"apiGroups": []any{"authentication.k8s.io"}, "resources": []any{"tokenreviews"}, "verbs": []any{"create"}},
				map[string]any{"apiGroups": []any{"authorization.k8s.io"}, "resources": []any{"subjectaccessreviews"}, "verbs": []any{"create"}},
			), "the metrics ClusterRole grants nothing but the two reviews")
		}
	}
	// Every watched namespace, and no other, has the manager's Role.
	g.Expect(managerBindings).To(ConsistOf(inst.watch))

	o := compose.Options{Approvals: approvals, ProcessSandbox: true, ProcessWorkspaceDir: t.TempDir(), ProcessSubCalls: true, WatchNamespaces: inst.watch}
	sa := rest.CopyConfig(env.Config)
	sa.Impersonate = rest.ImpersonationConfig{UserName: fmt.Sprintf("system:serviceaccount:%s:%s", inst.managerNamespace, inst.serviceAccount)}
	for i, run := range []struct {
		name string
		cfg  *rest.Config
	}{
		{"only the Roles of config/namespaced", sa},
		{"cluster-admin", env.Config},
	} {
		t.Logf("manager as %s, watching %v", run.name, inst.watch)
		name := fmt.Sprintf("r%d", i)
		// The unwatched objects first: by the time the watched call has
		// committed, the manager has had every chance to see them.
		for _, ns := range []string{unwatched, watched} {
			createCall(t, env.Client, ns, name)
		}
		done, stop := startManager(t, run.cfg, env, o, inst.managerNamespace)
		g.Eventually(func(g Gomega) {
			select {
			case <-done:
				StopTrying("the manager stopped").Now()
			default:
			}
			c := &toolgatev1alpha1.ToolCall{}
			g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: watched, Name: name}, c)).To(Succeed())
			g.Expect(c.Status.Phase).To(Equal(toolgatev1alpha1.PhaseCommitted))
			g.Expect(c.Status.Result.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded))
		}, 30*time.Second, 100*time.Millisecond).Should(Succeed(), "as %s: the call in watched namespace %s", run.name, watched)
		g.Consistently(func(g Gomega) {
			g.Expect(untouched(ctx, env.Client, unwatched, name)).To(Succeed())
		}, 3*time.Second, 100*time.Millisecond).Should(Succeed(), "as %s: the objects in unwatched namespace %s", run.name, unwatched)
		stop()
	}
}

// namespacedInstall is what the test takes from config/namespaced.
type namespacedInstall struct {
	objects          []*unstructured.Unstructured
	watch            []string // the manager's --watch-namespaces
	managerNamespace string
	serviceAccount   string
}

// renderNamespaced renders config/namespaced with the source-built kubectl.
func renderNamespaced(t *testing.T) namespacedInstall {
	t.Helper()
	kubectl, err := testenv.Kubectl()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(kubectl, "kustomize", filepath.Join(testenv.RepoRoot(), "config", "namespaced")).Output()
	if err != nil {
		t.Fatalf("kubectl kustomize config/namespaced: %v", err)
	}
	file := filepath.Join(t.TempDir(), "namespaced.yaml")
	if err := os.WriteFile(file, out, 0o600); err != nil {
		t.Fatal(err)
	}
	objs, err := testenv.ReadObjects(file)
	if err != nil {
		t.Fatal(err)
	}
	inst := namespacedInstall{objects: objs}
	for _, u := range objs {
		if u.GetKind() != "Deployment" {
			continue
		}
		inst.managerNamespace = u.GetNamespace()
		inst.serviceAccount, _, _ = unstructured.NestedString(u.Object, "spec", "template", "spec", "serviceAccountName")
		containers, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
		args, _, _ := unstructured.NestedStringSlice(containers[0].(map[string]any), "args")
		for _, a := range args {
			if v, ok := strings.CutPrefix(a, "--watch-namespaces="); ok {
				if inst.watch, err = parseNamespaces(v); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if inst.serviceAccount == "" {
		t.Fatal("config/namespaced has no manager Deployment with a service account")
	}
	return inst
}

// binds reports whether u is a binding with the service account ns/name as
// a subject.
func binds(u *unstructured.Unstructured, ns, name string) bool {
	subjects, _, _ := unstructured.NestedSlice(u.Object, "subjects")
	for _, s := range subjects {
		m, _ := s.(map[string]any)
		if m["kind"] == "ServiceAccount" && m["namespace"] == ns && m["name"] == name {
			return true
		}
	}
	return false
}

// createCall creates, in ns, a profile on the process sandbox allowing every
// call, a session on it and a call of "echo", all named name.
func createCall(t *testing.T, c client.Client, ns, name string) {
	t.Helper()
	p := tu.MakeToolProfile(ns, name).PreRule("allow-all", toolgatev1alpha1.ActionAllow, "").Sandbox(func(s *toolgatev1alpha1.SandboxPolicy) {
		s.Provider = toolgatev1alpha1.SandboxProviderProcess
		s.Mode = toolgatev1alpha1.SandboxWorkspaceWrite
	})
	for _, obj := range []client.Object{p.Obj(), tu.MakeAgentSession(ns, name, name).Obj(), tu.MakeToolCall(ns, name, name).Obj()} {
		if err := c.Create(context.Background(), obj); err != nil {
			t.Fatalf("creating %T %s/%s: %v", obj, ns, name, err)
		}
	}
}

// untouched fails when the manager wrote anything to the profile, session
// or call named name in ns: a status, a finalizer or an owner.
func untouched(ctx context.Context, c client.Client, ns, name string) error {
	key := client.ObjectKey{Namespace: ns, Name: name}
	p, s, tc := &toolgatev1alpha1.ToolProfile{}, &toolgatev1alpha1.AgentSession{}, &toolgatev1alpha1.ToolCall{}
	for _, obj := range []client.Object{p, s, tc} {
		if err := c.Get(ctx, key, obj); err != nil {
			return err
		}
		if len(obj.GetFinalizers()) > 0 || len(obj.GetOwnerReferences()) > 0 {
			return fmt.Errorf("%T %s: finalizers %v, owners %v", obj, key, obj.GetFinalizers(), obj.GetOwnerReferences())
		}
	}
	for kind, status := range map[string]bool{
		"profile": equality.Semantic.DeepEqual(p.Status, toolgatev1alpha1.ToolProfileStatus{}),
		"session": equality.Semantic.DeepEqual(s.Status, toolgatev1alpha1.AgentSessionStatus{}),
		"call":    equality.Semantic.DeepEqual(tc.Status, toolgatev1alpha1.ToolCallStatus{}),
	} {
		if !status {
			return fmt.Errorf("the %s %s has a status", kind, key)
		}
	}
	return nil
}

// startManager starts the controllers as cmd/manager does (compose.Cache,
// compose.Setup, leader election in the manager's namespace),
// acting as cfg's identity. done closes when the manager stops; stop stops
// it and waits (also at the test's cleanup).
func startManager(t *testing.T, cfg *rest.Config, env *testenv.Env, o compose.Options, namespace string) (done <-chan struct{}, stop func()) {
	t.Helper()
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        env.Scheme,
		Metrics:                       metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress:        "0",
		LeaderElection:                true,
		LeaderElectionNamespace:       namespace,
		LeaderElectionID:              leaderElectionID,
		LeaderElectionReleaseOnCancel: true,
		Cache:                         compose.Cache(o),
		// The test starts two managers in one process.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	scope := lifecycle.NewScope()
	if err := compose.Setup(mgr, scope, o); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	var startErr error
	go func() {
		defer close(stopped)
		startErr = mgr.Start(ctx)
	}()
	stop = sync.OnceFunc(func() {
		cancel()
		// A manager whose informers cannot list stays in its cache's start,
		// which a cancel does not end (controller-runtime v0.25).
		select {
		case <-stopped:
			if startErr != nil {
				t.Errorf("manager: %v", startErr)
			}
		case <-time.After(30 * time.Second):
			t.Error("the manager did not stop")
		}
		scope.Dispose()
	})
	t.Cleanup(stop)
	return stopped, stop
}

// TestParseNamespaces: empty is every namespace; names are trimmed and
// deduplicated; a name the API server would refuse is an error at start.
func TestParseNamespaces(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want []string
		err  bool
	}{
		{in: "", want: nil},
		{in: " , ", want: nil},
		{in: "agents", want: []string{"agents"}},
		{in: " agents, team-b ,agents,", want: []string{"agents", "team-b"}},
		{in: "agents,Team_B", err: true},
	} {
		got, err := parseNamespaces(tt.in)
		if (err != nil) != tt.err || !slices.Equal(got, tt.want) {
			t.Errorf("parseNamespaces(%q) = %q, %v; want %q, error %v", tt.in, got, err, tt.want, tt.err)
		}
	}
}
