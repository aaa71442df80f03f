package chart

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// agentNamespacesValues lists two agent namespaces: agent-a, which the
// chart creates, with an agent, a ServiceAccount and approvers; and
// agents, which exists already (create false), with an agent and no
// approvers.
const agentNamespacesValues = `
agentNamespaces:
  - name: agent-a
    labels:
      team: a
    agents:
      - {kind: User, name: alice}
      - {kind: ServiceAccount, name: bot, namespace: agent-a}
    approvers:
      - {kind: Group, name: approvers}
  - name: agents
    create: false
    agents:
      - {kind: User, name: bob}
    approvers: []
`

// valuesFile writes values to a file for helm's -f.
func valuesFile(t *testing.T, values string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(file, []byte(values), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

func byKey(objs []*unstructured.Unstructured) map[string]*unstructured.Unstructured {
	out := map[string]*unstructured.Unstructured{}
	for _, u := range objs {
		out[key(u)] = u
	}
	return out
}

func roleRef(role string) map[string]any {
	return map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role}
}

func user(kind, name string) map[string]any {
	return map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name}
}

// TestAgentNamespaces: each agentNamespaces entry renders its Namespace
// (unless create is false; Pod Security restricted, the entry's labels,
// kept on uninstall) and a RoleBinding of toolgate-agent to its agents and
// of toolgate-approver to its approvers, subjects exactly as listed, and no
// binding for an empty list. With the cluster scope the manager's watch is
// unchanged (it watches every namespace).
func TestAgentNamespaces(t *testing.T) {
	objs := helmTemplate(t, "-f", valuesFile(t, agentNamespacesValues))
	got := byKey(objs)

	var namespaces []string
	for _, u := range kinds(objs, "Namespace") {
		namespaces = append(namespaces, u.GetName())
	}
	if d := cmp.Diff([]string{"agent-a"}, namespaces); d != "" {
		t.Fatalf("Namespaces rendered (-want +got):\n%s", d)
	}
	ns := got["Namespace /agent-a"]
	wantLabels := map[string]string{"pod-security.kubernetes.io/enforce": "restricted", "team": "a",
		"app.kubernetes.io/name": "toolgate", "app.kubernetes.io/instance": release, "app.kubernetes.io/managed-by": "Helm"}
	for k, v := range wantLabels {
		if ns.GetLabels()[k] != v {
			t.Errorf("Namespace agent-a: label %s=%q, want %q (labels %v)", k, ns.GetLabels()[k], v, ns.GetLabels())
		}
	}
	if p := ns.GetAnnotations()["helm.sh/resource-policy"]; p != "keep" {
		t.Errorf("Namespace agent-a: helm.sh/resource-policy %q, want keep (uninstall must not delete an agent's data)", p)
	}

	bindings := map[string]struct {
		role     string
		subjects []any
	}{
		"RoleBinding agent-a/toolgate-agents": {"toolgate-agent", []any{
			user("User", "alice"),
			map[string]any{"kind": "ServiceAccount", "name": "bot", "namespace": "agent-a"},
		}},
		"RoleBinding agent-a/toolgate-approvers": {"toolgate-approver", []any{user("Group", "approvers")}},
		"RoleBinding agents/toolgate-agents":     {"toolgate-agent", []any{user("User", "bob")}},
	}
	for k, want := range bindings {
		b := got[k]
		if b == nil {
			t.Errorf("no %s; rendered %v", k, keys(objs))
			continue
		}
		if d := cmp.Diff(roleRef(want.role), path("roleRef")(b)); d != "" {
			t.Errorf("%s: roleRef (-want +got):\n%s", k, d)
		}
		if d := cmp.Diff(want.subjects, path("subjects")(b)); d != "" {
			t.Errorf("%s: subjects (-want +got):\n%s", k, d)
		}
		if b.GetLabels()["app.kubernetes.io/managed-by"] != "Helm" {
			t.Errorf("%s: labels %v lack the chart's", k, b.GetLabels())
		}
	}
	// No other binding in the agent namespaces: none for agents' empty
	// approvers.
	for _, u := range objs {
		if (u.GetNamespace() == "agent-a" || u.GetNamespace() == "agents") && bindings[key(u)].role == "" && u.GetKind() != "ResourceQuota" {
			t.Errorf("unexpected %s", key(u))
		}
	}

	// The cluster scope watches every namespace: no --watch-namespaces,
	// no Roles.
	for _, a := range argSet(kinds(objs, "Deployment")[0]).([]string) {
		if strings.HasPrefix(a, "--watch-namespaces") {
			t.Errorf("cluster scope: the manager is started with %s", a)
		}
	}
	if roles := kinds(objs, "Role"); slices.ContainsFunc(roles, func(u *unstructured.Unstructured) bool { return u.GetName() == "toolgate-manager-role" }) {
		t.Errorf("cluster scope: a Role toolgate-manager-role rendered")
	}

	// By default: no agent namespace, no binding.
	for _, u := range helmTemplate(t) {
		if u.GetKind() == "Namespace" || u.GetName() == "toolgate-agents" || u.GetName() == "toolgate-approvers" {
			t.Errorf("rendered by default: %s", key(u))
		}
	}
}

// TestAgentNamespaceLabels: an entry's labels override the Pod Security
// default, and cannot override the chart's own labels (Helm adopts a kept
// Namespace on a reinstall by them).
func TestAgentNamespaceLabels(t *testing.T) {
	objs := helmTemplate(t, "-f", valuesFile(t, `
agentNamespaces:
  - name: agent-b
    labels:
      pod-security.kubernetes.io/enforce: baseline
      app.kubernetes.io/managed-by: someone
    agents: [{kind: User, name: carol}]
`))
	ns := kinds(objs, "Namespace")
	if len(ns) != 1 {
		t.Fatalf("want one Namespace, got %v", keys(objs))
	}
	if l := ns[0].GetLabels(); l["pod-security.kubernetes.io/enforce"] != "baseline" || l["app.kubernetes.io/managed-by"] != "Helm" {
		t.Errorf("Namespace agent-b labels %v: want enforce=baseline, managed-by=Helm", l)
	}
	if b := byKey(objs)["RoleBinding agent-b/toolgate-approvers"]; b != nil {
		t.Errorf("a binding of approvers rendered for an entry without approvers")
	}
}

// TestAgentNamespacesWatched: in the namespaced scope every agent
// namespace is watched as well as rbac.watchNamespaces (merged, each
// once): the manager's --watch-namespaces and its Roles and RoleBindings
// are the one list. Agent namespaces alone are enough to install the
// namespaced scope.
func TestAgentNamespacesWatched(t *testing.T) {
	cases := map[string]struct {
		watch []string
		want  []string
	}{
		"merged":                {[]string{"agents", "team-b"}, []string{"agents", "team-b", "agent-a"}},
		"agent namespaces only": {nil, []string{"agent-a", "agents"}},
	}
	for name, c := range cases {
		args := []string{"--set", "rbac.scope=namespaced", "-f", valuesFile(t, agentNamespacesValues)}
		if c.watch != nil {
			args = append(args, "--set", "rbac.watchNamespaces={"+strings.Join(c.watch, ",")+"}")
		}
		objs := helmTemplate(t, args...)
		if d := cmp.Diff(c.want, watchNamespaces(t, objs)); d != "" {
			t.Errorf("%s: --watch-namespaces (-want +got):\n%s", name, d)
		}
		want := slices.Sorted(slices.Values(c.want))
		for _, kind := range []string{"Role", "RoleBinding"} {
			var in []string
			for _, u := range kinds(objs, kind) {
				if u.GetName() == "toolgate-manager-role" || u.GetName() == "toolgate-manager-rolebinding" {
					in = append(in, u.GetNamespace())
				}
			}
			slices.Sort(in)
			if d := cmp.Diff(want, in); d != "" {
				t.Errorf("%s: the manager's %ss are in (-want +got):\n%s", name, kind, d)
			}
		}
	}
}

// TestAgentNamespaceQuota: each agent namespace gets a ResourceQuota of
// toolgate's objects, agentNamespaceQuota's unless its entry has its own;
// agentNamespaceQuota null installs none, and so does an entry's quota
// null or {}.
func TestAgentNamespaceQuota(t *testing.T) {
	hard := func(objs []*unstructured.Unstructured) map[string]any {
		out := map[string]any{}
		for _, u := range kinds(objs, "ResourceQuota") {
			if u.GetName() != "toolgate-objects" {
				t.Errorf("unexpected %s", key(u))
			}
			out[u.GetNamespace()] = path("spec", "hard")(u)
		}
		return out
	}
	values := agentNamespacesValues + "    quota: {toolcalls: 50}\n"
	want := map[string]any{
		"agent-a": map[string]any{"count/toolcalls.toolgate.dev": "2000", "count/agentsessions.toolgate.dev": "100"},
		"agents":  map[string]any{"count/toolcalls.toolgate.dev": "50"},
	}
	if d := cmp.Diff(want, hard(helmTemplate(t, "-f", valuesFile(t, values)))); d != "" {
		t.Errorf("quotas (-want +got):\n%s", d)
	}
	if got := hard(helmTemplate(t, "-f", valuesFile(t, agentNamespacesValues), "--set", "agentNamespaceQuota=null")); len(got) != 0 {
		t.Errorf("agentNamespaceQuota null installs %v", got)
	}
	// One entry opts out (null or {}), the other keeps the default.
	for _, none := range []string{"null", "{}"} {
		values := agentNamespacesValues + "    quota: " + none + "\n"
		want := map[string]any{"agent-a": map[string]any{"count/toolcalls.toolgate.dev": "2000", "count/agentsessions.toolgate.dev": "100"}}
		if d := cmp.Diff(want, hard(helmTemplate(t, "-f", valuesFile(t, values)))); d != "" {
			t.Errorf("an entry's quota %s: quotas (-want +got):\n%s", none, d)
		}
	}
}
