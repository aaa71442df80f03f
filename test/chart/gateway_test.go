package chart

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// gatewayValues install the gateway, impersonating in two namespaces.
var gatewayValues = []string{"--set", "gateway.enabled=true", "--set", "gateway.impersonateNamespaces={agents,team-b}"}

// impersonator is the gateway's ClusterRole that is bound per namespace.
const impersonator = "toolgate-gateway-impersonator"

// TestGatewayMatchesConfig: with gateway.enabled the chart installs what
// config/default and config/gateway install together, compared as
// TestChartMatchesConfig compares (the same names and namespaces: the
// chart's names are fixed and config/gateway's prefix and namespace are
// config/default's). Besides, it compares what the gateway's clients and
// probes reach: the container's ports (the Service's are compared with
// every Service's).
//
// What must differ is not compared: the labels the chart adds to every
// object (app.kubernetes.io/*, helm.sh/chart; its bookkeeping, which the
// kustomize install has none of), and the selectors, which the chart
// widens with app.kubernetes.io/name=toolgate as it does the manager's
// (they must include config/'s, checked here). The RoleBindings of the
// impersonator in gateway.impersonateNamespaces are the chart's alone:
// config/gateway leaves them to `kubectl create rolebinding`
// (docs/mcp.md); they are checked to bind that role, and only that role,
// to the gateway in each namespace listed, and nowhere else.
func TestGatewayMatchesConfig(t *testing.T) {
	config := append(kustomize(t, "default"), kustomize(t, "gateway")...)
	chart := helmTemplate(t, gatewayValues...)

	var bindings []*unstructured.Unstructured
	var rest []*unstructured.Unstructured
	for _, u := range chart {
		if u.GetKind() == "RoleBinding" && u.GetName() == impersonator {
			bindings = append(bindings, u)
			continue
		}
		rest = append(rest, u)
	}
	compare(t, config, rest)

	var namespaces []string
	for _, b := range bindings {
		namespaces = append(namespaces, b.GetNamespace())
		want := map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": impersonator}
		if d := cmp.Diff(want, path("roleRef")(b)); d != "" {
			t.Errorf("%s: roleRef (-want +got):\n%s", key(b), d)
		}
		subjects := []any{map[string]any{"kind": "ServiceAccount", "name": "toolgate-gateway", "namespace": releaseNamespace}}
		if d := cmp.Diff(subjects, path("subjects")(b)); d != "" {
			t.Errorf("%s: subjects (-want +got):\n%s", key(b), d)
		}
	}
	slices.Sort(namespaces)
	if d := cmp.Diff([]string{"agents", "team-b"}, namespaces); d != "" {
		t.Errorf("the impersonator's RoleBindings are in (-want +got):\n%s", d)
	}
	// Never cluster-wide: a ClusterRoleBinding of the impersonator would
	// let the gateway act as every ServiceAccount of the cluster.
	for _, u := range kinds(chart, "ClusterRoleBinding") {
		if name, _, _ := unstructured.NestedString(u.Object, "roleRef", "name"); name == impersonator {
			t.Errorf("%s binds %s cluster-wide", key(u), impersonator)
		}
	}

	want, got := gatewayObjects(config), gatewayObjects(chart)
	dep, svc := "Deployment "+releaseNamespace+"/toolgate-gateway", "Service "+releaseNamespace+"/toolgate-gateway"
	if want[dep] == nil || got[dep] == nil || want[svc] == nil || got[svc] == nil {
		t.Fatalf("the gateway's Deployment and Service: config/ has %v, the chart %v", mapKeys(want), mapKeys(got))
	}
	if d := cmp.Diff(container("ports")(want[dep]), container("ports")(got[dep])); d != "" {
		t.Errorf("%s: container ports differ (-config +chart):\n%s", dep, d)
	}
	for _, s := range []struct {
		key  string
		path []string
	}{
		{dep, []string{"spec", "selector", "matchLabels"}},
		{dep, []string{"spec", "template", "metadata", "labels"}},
		{svc, []string{"spec", "selector"}},
	} {
		w := labelsIncluded(s.path...)(want[s.key]).(map[string]string)
		g := labelsIncluded(s.path...)(got[s.key]).(map[string]string)
		if len(w) == 0 {
			t.Errorf("%s: config/ has no %s", s.key, strings.Join(s.path, "."))
		}
		for k, v := range w {
			if g[k] != v {
				t.Errorf("%s: %s: the chart lacks %s=%s (has %v)", s.key, strings.Join(s.path, "."), k, v, g)
			}
		}
	}
	// The manager's selector must not take in the gateway's pods: the
	// metrics Service, the PodDisruptionBudget and tool pods'
	// NetworkPolicies pick the manager's pods by it.
	pod := labelsIncluded("spec", "template", "metadata", "labels")(got[dep]).(map[string]string)
	for _, m := range kinds(rest, "Deployment") {
		if m.GetName() == "toolgate-gateway" {
			continue
		}
		sel := labelsIncluded("spec", "selector", "matchLabels")(m).(map[string]string)
		selected := true
		for k, v := range sel {
			selected = selected && pod[k] == v
		}
		if selected {
			t.Errorf("%s's selector %v selects the gateway's pods %v", key(m), sel, pod)
		}
	}
}

// TestGatewayDisabled: by default, and with gateway.enabled=false even
// when its other values are set, the chart renders nothing of the
// gateway's.
func TestGatewayDisabled(t *testing.T) {
	renders := map[string][]string{
		"the defaults":          nil,
		"gateway.enabled=false": {"--set", "gateway.enabled=false", "--set", "gateway.impersonateNamespaces={agents}", "--set", "gateway.replicas=3"},
	}
	for name, args := range renders {
		if objs := gatewayObjects(helmTemplate(t, args...)); len(objs) != 0 {
			t.Errorf("%s: the chart renders the gateway's %v", name, mapKeys(objs))
		}
	}
	if objs := gatewayObjects(helmTemplate(t, gatewayValues...)); len(objs) == 0 {
		t.Error("gateway.enabled=true renders nothing of the gateway's")
	}
}

// gatewayObjects are the objects named after the gateway (toolgate-gateway
// and toolgate-gateway-impersonator), by key.
func gatewayObjects(objs []*unstructured.Unstructured) map[string]*unstructured.Unstructured {
	out := map[string]*unstructured.Unstructured{}
	for _, u := range objs {
		if strings.HasPrefix(u.GetName(), "toolgate-gateway") {
			out[key(u)] = u
		}
	}
	return out
}

func mapKeys(m map[string]*unstructured.Unstructured) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestGatewayTLS: gateway.tls.secretName mounts that Secret and serves MCP
// over TLS with it; without it, nothing of TLS is rendered.
func TestGatewayTLS(t *testing.T) {
	dep := "Deployment " + releaseNamespace + "/toolgate-gateway"
	plain := gatewayObjects(helmTemplate(t, gatewayValues...))[dep]
	tls := gatewayObjects(helmTemplate(t, append(gatewayValues, "--set", "gateway.tls.secretName=gateway-tls")...))[dep]
	if plain == nil || tls == nil {
		t.Fatal("no gateway Deployment rendered")
	}
	args := func(u *unstructured.Unstructured) string { return fmt.Sprint(container("args")(u)) }
	if strings.Contains(args(plain), "tls") || path("spec", "template", "spec", "volumes")(plain) != nil {
		t.Errorf("TLS rendered without gateway.tls.secretName: %s", args(plain))
	}
	for _, want := range []string{"--tls-cert-file=/etc/toolgate/tls/tls.crt", "--tls-key-file=/etc/toolgate/tls/tls.key"} {
		if !strings.Contains(args(tls), want) {
			t.Errorf("args %s lack %s", args(tls), want)
		}
	}
	volumes := []any{map[string]any{"name": "tls", "secret": map[string]any{"secretName": "gateway-tls"}}}
	if d := cmp.Diff(volumes, path("spec", "template", "spec", "volumes")(tls)); d != "" {
		t.Errorf("volumes (-want +got):\n%s", d)
	}
	mounts := []any{map[string]any{"name": "tls", "mountPath": "/etc/toolgate/tls", "readOnly": true}}
	if d := cmp.Diff(mounts, container("volumeMounts")(tls)); d != "" {
		t.Errorf("volumeMounts (-want +got):\n%s", d)
	}
}

// TestTheProxyAndTheGatewayArePlaced: the egress proxy's and the gateway's
// pods take the nodeSelector and tolerations given for each (a system
// node pool), and nothing of the other's or the manager's.
func TestTheProxyAndTheGatewayArePlaced(t *testing.T) {
	objs := helmTemplate(t, append(slices.Clone(gatewayValues),
		"--set", "egress.nodeSelector.pool=egress", "--set", "gateway.nodeSelector.pool=gateway",
		"--set", "egress.tolerations[0].key=egress", "--set", "egress.tolerations[0].operator=Exists",
		"--set", "gateway.tolerations[0].key=gateway", "--set", "gateway.tolerations[0].operator=Exists")...)
	want := map[string]string{"toolgate-egress": "egress", "toolgate-gateway": "gateway", "toolgate-controller-manager": ""}
	for _, u := range objs {
		pool, ok := want[u.GetName()]
		if u.GetKind() != "Deployment" || !ok {
			continue
		}
		delete(want, u.GetName())
		selector, _, _ := unstructured.NestedStringMap(u.Object, "spec", "template", "spec", "nodeSelector")
		tolerations, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "tolerations")
		if pool == "" {
			if len(selector) != 0 || len(tolerations) != 0 {
				t.Errorf("%s: placed by another's values: %v %v", u.GetName(), selector, tolerations)
			}
			continue
		}
		if selector["pool"] != pool || len(tolerations) != 1 || tolerations[0].(map[string]any)["key"] != pool {
			t.Errorf("%s: nodeSelector %v, tolerations %v, want pool %s", u.GetName(), selector, tolerations, pool)
		}
	}
	if len(want) != 0 {
		t.Errorf("not rendered: %v", want)
	}
}
