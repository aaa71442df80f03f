package chart

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/toolgate/toolgate/internal/testenv"
)

const release, releaseNamespace = "toolgate", "toolgate-system"

// mutatingAdmissionPolicy is the API the chart's mutating policies need:
// helm template (no cluster) is told the cluster serves it.
const mutatingAdmissionPolicy = "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"

var chartDir = filepath.Join(testenv.RepoRoot(), "charts", "toolgate")

// TestChartMatchesConfig: the chart installs what config/ installs, in
// both scopes, and with hack/local-values.yaml what config/local does.
func TestChartMatchesConfig(t *testing.T) {
	cluster := kustomize(t, "default")
	compare(t, cluster, helmTemplate(t))

	namespaced := kustomize(t, "namespaced")
	watch := watchNamespaces(t, namespaced)
	compare(t, namespaced, helmTemplate(t, "--set", "rbac.scope=namespaced", "--set", "rbac.watchNamespaces={"+strings.Join(watch, ",")+"}"))

	// The local cluster's values (docs/quickstart.md on the local cluster)
	// and config/local.
	compare(t, kustomize(t, "local"), helmTemplate(t, "-f", filepath.Join(testenv.RepoRoot(), "hack", "local-values.yaml")))
}

// TestChartDryRun: a real API server accepts every object the chart
// renders (server-side apply, dry run), in both scopes and with the
// gateway.
func TestChartDryRun(t *testing.T) {
	env, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	ctx := context.Background()
	for _, ns := range []string{releaseNamespace, "agents"} {
		if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	renders := [][]*unstructured.Unstructured{
		helmTemplate(t, "--set", "replicas=2", "--set", "runnerImage=example.com/runner:1", "--set", "networkPolicyEnforced=true",
			"--set", "podDisruptionBudget.enabled=true", "--set", "audit.volume.claimName=audit-trail"),
		helmTemplate(t, "--set", "rbac.scope=namespaced", "--set", "rbac.watchNamespaces={agents}", "--set", "crds.keep=true"),
		// The gateway, impersonating in a namespace that exists.
		helmTemplate(t, "--set", "gateway.enabled=true", "--set", "gateway.impersonateNamespaces={agents}", "--set", "gateway.replicas=3",
			"--set", "gateway.audience=mcp.example.com"),
		// Agent namespaces, one created (agent-a), one that exists
		// (agents), in both scopes.
		helmTemplate(t, "-f", valuesFile(t, agentNamespacesValues)),
		helmTemplate(t, "--set", "rbac.scope=namespaced", "--set", "rbac.watchNamespaces={agents}", "-f", valuesFile(t, agentNamespacesValues)),
	}
	for _, objs := range renders {
		if len(objs) == 0 {
			t.Fatal("the chart rendered nothing")
		}
		// Helm creates Namespaces before the rest: they are created here
		// (not dry-run), so what goes in them can be checked.
		for _, u := range kinds(objs, "Namespace") {
			if err := env.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner("helm"), client.ForceOwnership); err != nil {
				t.Errorf("%s: %v", key(u), err)
			}
		}
		for _, u := range objs {
			if u.GetKind() == "Namespace" {
				continue
			}
			err := env.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.DryRunAll, client.FieldOwner("helm"), client.ForceOwnership)
			if err != nil {
				t.Errorf("%s: %v", key(u), err)
			}
		}
	}
}

// TestServiceMonitor: the optional ServiceMonitor selects the metrics
// Service. (Its kind is the Prometheus Operator's, unknown to envtest.)
func TestServiceMonitor(t *testing.T) {
	objs := helmTemplate(t, "--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.serviceMonitor.labels.release=prom")
	var svc, sm *unstructured.Unstructured
	for _, u := range objs {
		switch u.GetKind() {
		case "Service":
			svc = u
		case "ServiceMonitor":
			sm = u
		}
	}
	if svc == nil || sm == nil {
		t.Fatalf("want a Service and a ServiceMonitor, got %v", keys(objs))
	}
	selector, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
	for k, v := range selector {
		if svc.GetLabels()[k] != v {
			t.Errorf("the ServiceMonitor selects %s=%s; the Service's labels are %v", k, v, svc.GetLabels())
		}
	}
	if sm.GetLabels()["release"] != "prom" {
		t.Errorf("ServiceMonitor labels %v lack release=prom", sm.GetLabels())
	}
	if none := helmTemplate(t); len(kinds(none, "ServiceMonitor")) != 0 {
		t.Error("a ServiceMonitor is rendered by default")
	}
}

// chartOnly are the chart's objects config/ has no counterpart of.
var chartOnly = map[string]bool{
	"PodDisruptionBudget toolgate-system/toolgate-controller-manager": true,
	"ServiceMonitor toolgate-system/toolgate-controller-manager":      true,
	"PrometheusRule toolgate-system/toolgate":                         true,
	"ConfigMap toolgate-system/toolgate-dashboard":                    true,
}

func compare(t *testing.T, config, chart []*unstructured.Unstructured) {
	t.Helper()
	want := map[string]*unstructured.Unstructured{}
	for _, u := range config {
		if u.GetKind() != "Namespace" {
			want[key(u)] = u
		}
	}
	got := map[string]*unstructured.Unstructured{}
	for _, u := range chart {
		if chartOnly[key(u)] {
			continue
		}
		got[key(u)] = u
	}
	for k := range want {
		if got[k] == nil {
			t.Errorf("config/ installs %s; the chart does not", k)
		}
	}
	for k, g := range got {
		w := want[k]
		if w == nil {
			t.Errorf("the chart installs %s; config/ does not", k)
			continue
		}
		for _, field := range fields(g.GetKind()) {
			if d := cmp.Diff(field(w), field(g)); d != "" {
				t.Errorf("%s differs (-config +chart):\n%s", k, d)
			}
		}
	}
}

type field func(*unstructured.Unstructured) any

func path(p ...string) field {
	return func(u *unstructured.Unstructured) any {
		v, _, _ := unstructured.NestedFieldNoCopy(u.Object, p...)
		return v
	}
}

// ownLabels are the labels that mean something to the cluster (not the
// chart's bookkeeping).
func ownLabels(u *unstructured.Unstructured) any {
	out := map[string]string{}
	for k, v := range u.GetLabels() {
		if !strings.HasPrefix(k, "app.kubernetes.io/") && !strings.HasPrefix(k, "helm.sh/") {
			out[k] = v
		}
	}
	return out
}

func container(p ...string) field {
	return func(u *unstructured.Unstructured) any {
		cs, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
		if len(cs) != 1 {
			return fmt.Sprintf("%d containers", len(cs))
		}
		v, _, _ := unstructured.NestedFieldNoCopy(cs[0].(map[string]any), p...)
		return v
	}
}

// argSet is the manager's arguments in order of their text: their order
// means nothing to its flag parser.
func argSet(u *unstructured.Unstructured) any {
	args, _ := container("args")(u).([]any)
	out := make([]string, 0, len(args))
	for _, a := range args {
		out = append(out, fmt.Sprint(a))
	}
	sort.Strings(out)
	return out
}

// envByName is the manager's environment keyed by name: its order
// means nothing unless one variable refers to another, which none does.
func envByName(u *unstructured.Unstructured) any {
	env, _ := container("env")(u).([]any)
	out := map[string]any{}
	for _, e := range env {
		m, _ := e.(map[string]any)
		out[fmt.Sprint(m["name"])] = m
	}
	return out
}

// labelsIncluded is config/'s labels of the path that the chart's lack.
func labelsIncluded(p ...string) field {
	return func(u *unstructured.Unstructured) any {
		m, _, _ := unstructured.NestedStringMap(u.Object, p...)
		return m
	}
}

func fields(kind string) []field {
	switch kind {
	case "CustomResourceDefinition", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
		"MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding":
		return []field{path("spec")}
	case "ClusterRole", "Role":
		return []field{path("rules"), path("aggregationRule"), ownLabels}
	case "ClusterRoleBinding", "RoleBinding":
		return []field{path("roleRef"), path("subjects")}
	case "ServiceAccount":
		return []field{path("automountServiceAccountToken")}
	case "Service":
		return []field{path("spec", "ports")}
	case "NetworkPolicy":
		return []field{path("spec", "policyTypes"), path("spec", "ingress")}
	case "Deployment":
		pod := []string{"spec", "template", "spec"}
		return []field{
			path("spec", "replicas"),
			path(append(pod, "serviceAccountName")...), path(append(pod, "securityContext")...),
			path(append(pod, "hostNetwork")...), path(append(pod, "terminationGracePeriodSeconds")...),
			container("image"), container("imagePullPolicy"), container("command"), argSet, envByName,
			container("securityContext"), container("livenessProbe"), container("readinessProbe"), container("resources"),
		}
	}
	return nil
}

// TestDeploymentLabelsIncludeConfig: the chart's selector and pod labels
// include config/'s, so tool pods' NetworkPolicies (which admit the
// manager's pods by label) and an install moved from config/ keep working.
func TestDeploymentLabelsIncludeConfig(t *testing.T) {
	manager := func(objs []*unstructured.Unstructured) []*unstructured.Unstructured {
		return slices.DeleteFunc(kinds(objs, "Deployment"), func(u *unstructured.Unstructured) bool { return u.GetName() != "toolgate-controller-manager" })
	}
	w, g := manager(kustomize(t, "default")), manager(helmTemplate(t))
	if len(w) != 1 || len(g) != 1 {
		t.Fatalf("deployments: config %d, chart %d", len(w), len(g))
	}
	for _, p := range [][]string{{"spec", "selector", "matchLabels"}, {"spec", "template", "metadata", "labels"}} {
		want, got := labelsIncluded(p...)(w[0]).(map[string]string), labelsIncluded(p...)(g[0]).(map[string]string)
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s: the chart lacks %s=%s (has %v)", strings.Join(p, "."), k, v, got)
			}
		}
	}
}

func kustomize(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	kubectl, err := testenv.Kubectl()
	if err != nil {
		t.Fatal(err)
	}
	return render(t, kubectl, "kustomize", filepath.Join(testenv.RepoRoot(), "config", dir))
}

func helmTemplate(t *testing.T, args ...string) []*unstructured.Unstructured {
	t.Helper()
	return render(t, helm(t), append([]string{"template", release, chartDir, "--namespace", releaseNamespace,
		"--api-versions", mutatingAdmissionPolicy}, args...)...)
}

func render(t *testing.T, bin string, args ...string) []*unstructured.Unstructured {
	t.Helper()
	var out, errb bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v: %s", filepath.Base(bin), strings.Join(args, " "), err, errb.String())
	}
	file := filepath.Join(t.TempDir(), "rendered.yaml")
	if err := os.WriteFile(file, out.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	objs, err := testenv.ReadObjects(file)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// helm is the binary hack/build-helm.sh builds into the cache (make helm),
// at the version hack/versions.sh pins.
func helm(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "hack", "versions.sh"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`HELM_VERSION=\$\{HELM_VERSION:-(v[0-9.]+)\}`).FindSubmatch(data)
	if m == nil {
		t.Fatal("hack/versions.sh pins no HELM_VERSION")
	}
	k8s, err := testenv.BinaryAssetsDir() // <cache>/k8s/<version>
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(filepath.Dir(filepath.Dir(k8s)), "helm-"+string(m[1]))
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("helm not found at %s: run `make helm` (hack/build-helm.sh) first", bin)
	}
	return bin
}

func watchNamespaces(t *testing.T, objs []*unstructured.Unstructured) []string {
	t.Helper()
	for _, u := range kinds(objs, "Deployment") {
		for _, a := range argSet(u).([]string) {
			if v, ok := strings.CutPrefix(a, "--watch-namespaces="); ok {
				return strings.Split(v, ",")
			}
		}
	}
	t.Fatal("config/namespaced starts the manager without --watch-namespaces")
	return nil
}

func kinds(objs []*unstructured.Unstructured, kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, u := range objs {
		if u.GetKind() == kind {
			out = append(out, u)
		}
	}
	return out
}

// clusterScoped kinds have no namespace; kustomize sets one on the
// admission policies anyway (it does not know their scope), which the API
// server ignores.
var clusterScoped = map[string]bool{
	"CustomResourceDefinition": true, "ClusterRole": true, "ClusterRoleBinding": true,
	"ValidatingAdmissionPolicy": true, "ValidatingAdmissionPolicyBinding": true,
	"MutatingAdmissionPolicy": true, "MutatingAdmissionPolicyBinding": true,
}

func key(u *unstructured.Unstructured) string {
	if clusterScoped[u.GetKind()] {
		return u.GetKind() + " " + u.GetName()
	}
	return u.GetKind() + " " + u.GetNamespace() + "/" + u.GetName()
}

func keys(objs []*unstructured.Unstructured) []string {
	out := make([]string, 0, len(objs))
	for _, u := range objs {
		out = append(out, key(u))
	}
	return out
}

// TestMutatingPoliciesNeedTheirAPI: on a cluster that does not serve
// MutatingAdmissionPolicy the chart installs without the mutating policies
// (the manager does their work itself) but with every validating one.
func TestMutatingPoliciesNeedTheirAPI(t *testing.T) {
	without := render(t, helm(t), "template", release, chartDir, "--namespace", releaseNamespace)
	with := helmTemplate(t)
	for _, kind := range []string{"MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"} {
		if n := len(kinds(without, kind)); n != 0 {
			t.Errorf("%d %s rendered for a cluster without the API", n, kind)
		}
	}
	for _, kind := range []string{"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} {
		if a, b := len(kinds(without, kind)), len(kinds(with, kind)); a != b || a == 0 {
			t.Errorf("%s: %d without the mutating API, %d with it", kind, a, b)
		}
	}
}

// TestBadValuesAreRefused: a mistyped key, an unknown scope, a
// namespaced install watching nothing or a bad agent namespace entry
// (its name, a subject's kind, a ServiceAccount without namespace, a name
// listed twice) fails the render with a message naming the value, instead
// of installing something else.
func TestBadValuesAreRefused(t *testing.T) {
	cases := map[string]struct {
		args []string
		want string
	}{
		"a mistyped key":         {[]string{"--set", "replica=2"}, "additional properties 'replica' not allowed"},
		"an unknown scope":       {[]string{"--set", "rbac.scope=everywhere"}, "/rbac/scope"},
		"a namespaced, no list":  {[]string{"--set", "rbac.scope=namespaced"}, "rbac.scope=namespaced needs rbac.watchNamespaces"},
		"a bad namespace name":   {[]string{"--set", "rbac.scope=namespaced", "--set", "rbac.watchNamespaces={Agents}"}, "/rbac/watchNamespaces/0"},
		"a bad image pull value": {[]string{"--set", "image.pullPolicy=Sometimes"}, "/image/pullPolicy"},
		"a mistyped gateway key": {[]string{"--set", "gateway.replica=2"}, "additional properties 'replica' not allowed"},
		"a bad gateway namespace": {[]string{"--set", "gateway.enabled=true", "--set", "gateway.impersonateNamespaces={Team_A}"},
			"/gateway/impersonateNamespaces/0"},
		"an empty gateway audience": {[]string{"--set", "gateway.enabled=true", "--set", "gateway.audience="}, "/gateway/audience"},
		"a mistyped agent namespace key": {[]string{"--set", "agentNamespaces[0].name=agent-a,agentNamespaces[0].agent[0].kind=User"},
			"at '/agentNamespaces/0': additional properties 'agent' not allowed"},
		"a bad agent namespace name": {[]string{"--set", "agentNamespaces[0].name=Agent_A"}, "/agentNamespaces/0/name"},
		"an agent namespace without a name": {[]string{"--set", "agentNamespaces[0].create=false"},
			"at '/agentNamespaces/0': missing property 'name'"},
		"a create that is no boolean": {[]string{"--set", "agentNamespaces[0].name=agent-a", "--set-string", "agentNamespaces[0].create=no"},
			"/agentNamespaces/0/create"},
		"an unknown subject kind": {[]string{"--set", "agentNamespaces[0].name=agent-a,agentNamespaces[0].agents[0].kind=Robot,agentNamespaces[0].agents[0].name=r2"},
			"/agentNamespaces/0/agents/0/kind"},
		"a mistyped subject key": {[]string{"--set", "agentNamespaces[0].name=agent-a,agentNamespaces[0].approvers[0].kind=User,agentNamespaces[0].approvers[0].nam=x"},
			"at '/agentNamespaces/0/approvers/0': additional properties 'nam' not allowed"},
		"a ServiceAccount without namespace": {[]string{"--set", "agentNamespaces[0].name=agent-a,agentNamespaces[0].agents[0].kind=ServiceAccount,agentNamespaces[0].agents[0].name=bot"},
			"at '/agentNamespaces/0/agents/0': missing property 'namespace'"},
		"a User with a namespace": {[]string{"--set", "agentNamespaces[0].name=agent-a,agentNamespaces[0].approvers[0].kind=User,agentNamespaces[0].approvers[0].name=ann,agentNamespaces[0].approvers[0].namespace=agent-a"},
			"at '/agentNamespaces/0/approvers/0/namespace'"},
		"an agent namespace listed twice": {[]string{"--set", "agentNamespaces[0].name=agent-a,agentNamespaces[1].name=agent-a"},
			"agentNamespaces lists agent-a twice"},
		"the release namespace as an agent namespace": {[]string{"--set", "agentNamespaces[0].name=" + releaseNamespace},
			"agentNamespaces: " + releaseNamespace + " is the release namespace"},
	}
	for name, c := range cases {
		var errb bytes.Buffer
		cmd := exec.Command(helm(t), append([]string{"template", release, chartDir, "--namespace", releaseNamespace}, c.args...)...)
		cmd.Stderr = &errb
		if err := cmd.Run(); err == nil || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%s: err %v, stderr %q; want it to name %q", name, err, errb.String(), c.want)
		}
	}
}

// TestInstallUpgradeUninstall: helm installs the chart on a real API
// server (with an agent namespace), upgrades it with a changed value, and
// uninstalls it leaving no object of toolgate's but the agent namespace,
// which is kept (its RoleBindings are not). (No pods run here: the
// lifecycle of the objects is what is checked; test/quickstart runs the
// manager on the local cluster.)
func TestInstallUpgradeUninstall(t *testing.T) {
	dir, err := testenv.BinaryAssetsDir()
	if err != nil {
		t.Fatal(err)
	}
	// No CRDs installed beforehand: the chart installs its own.
	env := &envtest.Environment{BinaryAssetsDirectory: dir}
	cfg, err := env.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: releaseNamespace}}); err != nil {
		t.Fatal(err)
	}
	kubeconfig := writeKubeconfig(t, cfg)
	h := func(args ...string) {
		t.Helper()
		cmd := exec.Command(helm(t), append(args, "--kubeconfig", kubeconfig, "--namespace", releaseNamespace)...)
		cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}

	// An agent namespace the chart creates: uninstall keeps it (and what
	// is in it) and removes its bindings.
	h("install", release, chartDir, "-f", valuesFile(t, `
agentNamespaces:
  - name: agent-a
    agents: [{kind: User, name: alice}]
    approvers: [{kind: Group, name: approvers}]
`))
	installed := leftovers(t, c)
	if len(installed) == 0 {
		t.Fatal("helm install created nothing of toolgate's")
	}
	for _, k := range []string{"RoleBinding agent-a/toolgate-agents", "RoleBinding agent-a/toolgate-approvers"} {
		if !slices.Contains(installed, k) {
			t.Errorf("helm install did not create %s (created %v)", k, installed)
		}
	}
	dep := &unstructured.Unstructured{}
	dep.SetAPIVersion("apps/v1")
	dep.SetKind("Deployment")
	get := func(name string) int64 {
		t.Helper()
		if err := c.Get(ctx, client.ObjectKey{Namespace: releaseNamespace, Name: name}, dep); err != nil {
			t.Fatal(err)
		}
		n, _, _ := unstructured.NestedInt64(dep.Object, "spec", "replicas")
		return n
	}
	if n := get("toolgate-controller-manager"); n != 2 {
		t.Fatalf("replicas after install: %d, want the default 2", n)
	}
	// The upgrade also turns the gateway on, so the uninstall must remove
	// its objects too (its impersonator's RoleBinding among them).
	h("upgrade", release, chartDir, "--reuse-values", "--set", "replicas=3",
		"--set", "gateway.enabled=true", "--set", "gateway.impersonateNamespaces={"+releaseNamespace+"}")
	if n := get("toolgate-controller-manager"); n != 3 {
		t.Fatalf("replicas after the upgrade: %d", n)
	}
	if n := get("toolgate-gateway"); n != 2 {
		t.Fatalf("the gateway's replicas after the upgrade: %d", n)
	}
	// The API server serves each CRD's objects once its storage is ready.
	// A CRD deleted before then (seconds after helm created or updated it)
	// can stay Terminating for minutes: its finalizer cannot list the
	// objects ("storage is (re)initializing") and retries with a backoff.
	// Users do not uninstall seconds after installing; wait as they would.
	for _, kind := range []string{"ToolProfileList", "AgentSessionList", "ToolCallList", "ApprovalRequestList"} {
		list := &unstructured.UnstructuredList{}
		list.SetAPIVersion("toolgate.dev/v1alpha1")
		list.SetKind(kind)
		for start := time.Now(); ; time.Sleep(200 * time.Millisecond) {
			err := c.List(ctx, list)
			if err == nil {
				break
			}
			if time.Since(start) > time.Minute {
				t.Fatalf("%s not served a minute after the upgrade: %v", kind, err)
			}
		}
	}
	h("uninstall", release)
	// The agent namespace is kept (helm.sh/resource-policy: keep), not
	// deleted: an agent's sessions, calls and workspaces stay.
	agentNS := &corev1.Namespace{}
	if err := c.Get(ctx, client.ObjectKey{Name: "agent-a"}, agentNS); err != nil {
		t.Errorf("the agent namespace after helm uninstall: %v", err)
	} else if agentNS.DeletionTimestamp != nil {
		t.Errorf("helm uninstall deletes the agent namespace agent-a")
	}
	// What helm deletes goes at once, except the CRDs: the API server
	// removes their objects first (a finalizer of its own, which backs off
	// when it cannot list them: up to minutes).
	var left []string
	for start := time.Now(); time.Since(start) < 5*time.Minute; time.Sleep(200 * time.Millisecond) {
		if left = leftovers(t, c); len(left) == 0 {
			return
		}
	}
	crds := &unstructured.UnstructuredList{}
	crds.SetAPIVersion("apiextensions.k8s.io/v1")
	crds.SetKind("CustomResourceDefinitionList")
	if err := c.List(ctx, crds); err == nil {
		for _, crd := range crds.Items {
			conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
			t.Logf("%s: finalizers %v, conditions %v", crd.GetName(), crd.GetFinalizers(), conds)
		}
	}
	t.Fatalf("left behind after helm uninstall: %v", left)
}

// leftovers lists the objects of toolgate's kinds and names that exist.
func leftovers(t *testing.T, c client.Client) []string {
	t.Helper()
	kinds := []struct {
		gv, kind, ns string
	}{
		{"apiextensions.k8s.io/v1", "CustomResourceDefinition", ""},
		{"rbac.authorization.k8s.io/v1", "ClusterRole", ""},
		{"rbac.authorization.k8s.io/v1", "ClusterRoleBinding", ""},
		{"admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy", ""},
		{"admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding", ""},
		{"rbac.authorization.k8s.io/v1", "Role", releaseNamespace},
		{"rbac.authorization.k8s.io/v1", "RoleBinding", releaseNamespace},
		{"rbac.authorization.k8s.io/v1", "Role", "default"},
		{"rbac.authorization.k8s.io/v1", "RoleBinding", "default"},
		{"rbac.authorization.k8s.io/v1", "RoleBinding", "agent-a"},
		{"apps/v1", "Deployment", releaseNamespace},
		{"v1", "ServiceAccount", releaseNamespace},
		{"v1", "Service", releaseNamespace},
	}
	var out []string
	for _, k := range kinds {
		list := &unstructured.UnstructuredList{}
		list.SetAPIVersion(k.gv)
		list.SetKind(k.kind + "List")
		if err := c.List(context.Background(), list, client.InNamespace(k.ns)); err != nil {
			t.Fatalf("listing %s: %v", k.kind, err)
		}
		for _, u := range list.Items {
			if strings.HasPrefix(u.GetName(), "toolgate") || strings.HasSuffix(u.GetName(), ".toolgate.dev") {
				out = append(out, key(&u))
			}
		}
	}
	return out
}

func writeKubeconfig(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin"}
	kc.CurrentContext = "envtest"
	file := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, file); err != nil {
		t.Fatal(err)
	}
	return file
}

// TestNoRoleAggregatesIntoTheBuiltInRoles: a call's arguments and results
// may hold what only its agent and approvers should read, so no role
// toolgate ships aggregates into view, edit or admin (whoever may view a
// namespace would read every call of it); the shipped roles grant their
// access only where they are bound (docs/security.md).
func TestNoRoleAggregatesIntoTheBuiltInRoles(t *testing.T) {
	for name, objs := range map[string][]*unstructured.Unstructured{
		"config/default": kustomize(t, "default"), "config/namespaced": kustomize(t, "namespaced"), "the chart": helmTemplate(t),
	} {
		for _, o := range objs {
			if o.GetKind() != "ClusterRole" && o.GetKind() != "Role" {
				continue
			}
			for label := range o.GetLabels() {
				if strings.HasPrefix(label, "rbac.authorization.k8s.io/aggregate-to-") {
					t.Errorf("%s: %s %s carries %s", name, o.GetKind(), o.GetName(), label)
				}
			}
		}
	}
}

// TestAuditVolume: audit.volume.claimName writes the trail to a file per
// manager on that claim, so that it outlives the pod.
func TestAuditVolume(t *testing.T) {
	var manager *unstructured.Unstructured
	for _, d := range kinds(helmTemplate(t, "--set", "audit.volume.claimName=audit-trail"), "Deployment") {
		if d.GetName() == "toolgate-controller-manager" {
			manager = d
		}
	}
	if manager == nil {
		t.Fatal("no manager Deployment")
	}
	pod := &corev1.PodTemplateSpec{}
	spec, _, _ := unstructured.NestedMap(manager.Object, "spec", "template")
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(spec, pod); err != nil {
		t.Fatal(err)
	}
	c := pod.Spec.Containers[0]
	if !slices.Contains(c.Args, "--audit-log=/var/log/toolgate/audit-$(POD_NAME).jsonl") {
		t.Errorf("args %v", c.Args)
	}
	if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "POD_NAME" && e.ValueFrom != nil }) {
		t.Errorf("env %v: no POD_NAME for the file's name", c.Env)
	}
	if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
		return m.Name == "audit" && m.MountPath == "/var/log/toolgate" && !m.ReadOnly
	}) {
		t.Errorf("mounts %v", c.VolumeMounts)
	}
	if !slices.ContainsFunc(pod.Spec.Volumes, func(v corev1.Volume) bool {
		return v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == "audit-trail"
	}) {
		t.Errorf("volumes %v", pod.Spec.Volumes)
	}
}
