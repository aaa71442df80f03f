package chart

import (
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/providers/sandbox"
	"github.com/toolgate/toolgate/internal/providers/sandbox/pod"
)

// peer is a pod that may try to reach the manager or the gateway: its
// labels and its namespace's.
type peer struct {
	name      string
	pod       map[string]string
	namespace map[string]string
}

// TestNetworkPoliciesAdmitNoToolPod: in both installs (config/ and the
// chart) each of the manager's and the gateway's pods is selected by a
// NetworkPolicy that admits traffic to the ports it serves and nothing
// else, and a tool pod (its labels as the pod provider makes them) is
// admitted to no port, while a scraper or an agent in any namespace is.
// Whether the CNI enforces them is issue 25's: this checks what is
// rendered, evaluated by NetworkPolicy's rules.
func TestNetworkPoliciesAdmitNoToolPod(t *testing.T) {
	tool := toolPodLabels(t)
	agentNS := map[string]string{corev1.LabelMetadataName: "agents"}
	peers := []peer{
		{"tool pod", tool, agentNS},
		{"prometheus", map[string]string{"app": "prometheus"}, map[string]string{corev1.LabelMetadataName: "monitoring"}},
		{"agent", map[string]string{"app": "agent"}, agentNS},
	}
	// Which ports each peer reaches on each Deployment's pods.
	want := map[string]map[string][]int32{
		"toolgate-controller-manager": {"prometheus": {8080}, "agent": {8080}},
		"toolgate-gateway":            {"prometheus": {8080, 8443}, "agent": {8080, 8443}},
		// The proxy port admits only tool pods labelled for the proxy.
		"toolgate-egress": {"prometheus": {8080}, "agent": {8080}},
	}
	installs := map[string][]*unstructured.Unstructured{
		"config":     append(kustomize(t, "default"), kustomize(t, "gateway")...),
		"chart":      helmTemplate(t, gatewayValues...),
		"namespaced": helmTemplate(t, "--set", "rbac.scope=namespaced", "--set", "rbac.watchNamespaces={agents}", "--set", "gateway.enabled=true"),
	}
	for install, objs := range installs {
		policies := typedPolicies(t, kinds(objs, "NetworkPolicy"))
		for _, dep := range kinds(objs, "Deployment") {
			podLabels, _, _ := unstructured.NestedStringMap(dep.Object, "spec", "template", "metadata", "labels")
			for _, port := range declaredPorts(t, dep) {
				if !slices.Contains(probed, port) {
					t.Errorf("%s: %s serves port %d, which this test does not probe", install, dep.GetName(), port)
				}
			}
			for _, p := range peers {
				got := reachable(policies, dep.GetNamespace(), podLabels, probed, p)
				if !equalPorts(got, want[dep.GetName()][p.name]) {
					t.Errorf("%s: %s reaches %s on ports %v, want %v", install, p.name, dep.GetName(), got, want[dep.GetName()][p.name])
				}
			}
		}
	}

	// No metrics, no port.
	policies := typedPolicies(t, kinds(helmTemplate(t, "--set", "metrics.enabled=false"), "NetworkPolicy"))
	manager := map[string]string{"control-plane": "controller-manager", "app.kubernetes.io/name": "toolgate"}
	if got := reachable(policies, releaseNamespace, manager, probed, peers[1]); len(got) != 0 {
		t.Errorf("metrics off: prometheus reaches the manager on %v", got)
	}
	// Scrapers of one's own: only they reach the metrics port; MCP stays
	// open to any pod that is not a tool pod.
	objs := helmTemplate(t, "--set", "gateway.enabled=true",
		"--set", "networkPolicy.metricsFrom[0].namespaceSelector.matchLabels.kubernetes\\.io/metadata\\.name=monitoring")
	policies = typedPolicies(t, kinds(objs, "NetworkPolicy"))
	gateway := map[string]string{"app.kubernetes.io/component": "gateway", "app.kubernetes.io/name": "toolgate"}
	for _, c := range []struct {
		p    peer
		want []int32
	}{{peers[0], nil}, {peers[1], []int32{8080, 8443}}, {peers[2], []int32{8443}}} {
		if got := reachable(policies, releaseNamespace, gateway, probed, c.p); !equalPorts(got, c.want) {
			t.Errorf("metricsFrom monitoring: %s reaches the gateway on %v, want %v", c.p.name, got, c.want)
		}
	}
	// Switched off: none rendered.
	if n := len(kinds(helmTemplate(t, "--set", "gateway.enabled=true", "--set", "networkPolicy.enabled=false"), "NetworkPolicy")); n != 0 {
		t.Errorf("networkPolicy.enabled=false rendered %d NetworkPolicies", n)
	}
}

func toolPodLabels(t *testing.T) map[string]string {
	t.Helper()
	job := sandbox.Job{
		Key: "uid-1/1", Attempt: 1, Owner: types.NamespacedName{Namespace: "agents", Name: "call-1"}, OwnerUID: "uid-1",
		Tool:   &toolgatev1alpha1.ToolDefinition{Name: "read", TimeoutSeconds: 5},
		Policy: toolgatev1alpha1.SandboxPolicy{Mode: toolgatev1alpha1.SandboxFullAccess},
	}
	p, err := pod.BuildPod(pod.Config{RunnerImage: "runner:1", ChannelKey: "00"}, job, "call-1")
	if err != nil {
		t.Fatal(err)
	}
	return p.Labels
}

func typedPolicies(t *testing.T, objs []*unstructured.Unstructured) []networkingv1.NetworkPolicy {
	t.Helper()
	out := make([]networkingv1.NetworkPolicy, 0, len(objs))
	for _, u := range objs {
		var np networkingv1.NetworkPolicy
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &np); err != nil {
			t.Fatalf("%s: %v", key(u), err)
		}
		out = append(out, np)
	}
	return out
}

// probed are the ports toolgate's pods listen on (egress proxy 3128, metrics 8080, probes
// 8081, MCP 8443) and one they do not: what a peer may open among them.
var probed = []int32{3128, 8080, 8081, 8443, 9443}

// declaredPorts are a Deployment's container ports, which must be among
// probed (a new port needs a decision here).
func declaredPorts(t *testing.T, dep *unstructured.Unstructured) []int32 {
	t.Helper()
	var out []int32
	ports, _ := container("ports")(dep).([]any)
	for _, p := range ports {
		var n int32
		if _, err := fmt.Sscan(fmt.Sprint(p.(map[string]any)["containerPort"]), &n); err != nil {
			t.Fatalf("%s: a port %v: %v", key(dep), p, err)
		}
		out = append(out, n)
	}
	return out
}

// reachable is the ports of served that p may open on a pod of namespace
// ns with podLabels, by NetworkPolicy's rules: a pod no Ingress policy
// selects admits everything; one that some do admits what any of their
// rules admits.
func reachable(policies []networkingv1.NetworkPolicy, ns string, podLabels map[string]string, served []int32, p peer) []int32 {
	var selecting []networkingv1.NetworkPolicy
	for _, np := range policies {
		if np.Namespace == ns && matches(&np.Spec.PodSelector, podLabels) && isIngress(np) {
			selecting = append(selecting, np)
		}
	}
	if len(selecting) == 0 {
		return served
	}
	var out []int32
	for _, port := range served {
		if admits(selecting, ns, port, p) {
			out = append(out, port)
		}
	}
	return out
}

func isIngress(np networkingv1.NetworkPolicy) bool {
	if len(np.Spec.PolicyTypes) == 0 {
		return true
	}
	for _, pt := range np.Spec.PolicyTypes {
		if pt == networkingv1.PolicyTypeIngress {
			return true
		}
	}
	return false
}

func admits(policies []networkingv1.NetworkPolicy, ns string, port int32, p peer) bool {
	for _, np := range policies {
		for _, rule := range np.Spec.Ingress {
			if portIn(rule.Ports, port) && peerIn(rule.From, ns, p) {
				return true
			}
		}
	}
	return false
}

func portIn(ports []networkingv1.NetworkPolicyPort, port int32) bool {
	if len(ports) == 0 {
		return true
	}
	for _, pp := range ports {
		if pp.Port == nil || (pp.Port.IntValue() == int(port) && (pp.Protocol == nil || *pp.Protocol == corev1.ProtocolTCP)) {
			return true
		}
	}
	return false
}

func peerIn(from []networkingv1.NetworkPolicyPeer, ns string, p peer) bool {
	if len(from) == 0 {
		return true
	}
	for _, f := range from {
		if f.IPBlock != nil {
			continue // pods are not judged by address here
		}
		inNamespace := f.NamespaceSelector == nil && p.namespace[corev1.LabelMetadataName] == ns ||
			f.NamespaceSelector != nil && matches(f.NamespaceSelector, p.namespace)
		if inNamespace && (f.PodSelector == nil || matches(f.PodSelector, p.pod)) {
			return true
		}
	}
	return false
}

func matches(s *metav1.LabelSelector, set map[string]string) bool {
	sel, err := metav1.LabelSelectorAsSelector(s)
	return err == nil && sel.Matches(labels.Set(set))
}

func equalPorts(a, b []int32) bool { return slices.Equal(a, b) }
