package pod

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/providers/sandbox"
)

// forbiddenReader answers Forbidden to reads of Services and EndpointSlices,
// as the API server does for a manager without that RBAC.
type forbiddenReader struct{ client.Reader }

func (r forbiddenReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*corev1.Service); ok {
		return apierrors.NewForbidden(schema.GroupResource{Resource: "services"}, key.Name, errors.New("no RBAC"))
	}
	return r.Reader.Get(ctx, key, obj, opts...)
}

func (r forbiddenReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	switch list.(type) {
	case *discoveryv1.EndpointSliceList, *corev1.EndpointsList, *corev1.ServiceList:
		return apierrors.NewForbidden(schema.GroupResource{Group: "discovery.k8s.io", Resource: "endpointslices"}, "", errors.New("no RBAC"))
	}
	return r.Reader.List(ctx, list, opts...)
}

// TestNetworkIsolationOnAPIServer checks, on a real API server, the
// NetworkPolicies that select tool pods, whatever their names: policies are
// additive, so every policy selecting a pod counts.
func TestNetworkIsolationOnAPIServer(t *testing.T) {
	c, newProvider := onAPIServer(t)
	ctx := context.Background()
	// setup is a fresh namespace and a call owning the pods.
	setup := func(t *testing.T) (string, *toolgatev1alpha1.ToolCall) {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "net-"}}
		must(t, c.Create(ctx, ns))
		call := &toolgatev1alpha1.ToolCall{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "call-1"},
			Spec: toolgatev1alpha1.ToolCallSpec{SessionRef: toolgatev1alpha1.LocalObjectReference{Name: "s"}, CallID: "c1",
				Tool: "wc", Arguments: `{"text":"a b"}`, Requester: "agent"},
		}
		must(t, c.Create(ctx, call))
		return ns.Name, call
	}
	job := func(ns string, call *toolgatev1alpha1.ToolCall, attempt int, egress bool) sandbox.Job {
		j := testJob(toolgatev1alpha1.SandboxWorkspaceWrite, "ws")
		j.Owner.Namespace, j.OwnerUID, j.Attempt = ns, call.UID, attempt
		j.Key = string(call.UID) + "/" + string(rune('0'+attempt))
		j.Policy.AllowEgress = egress
		return j
	}
	podOf := func(t *testing.T, ns string, call *toolgatev1alpha1.ToolCall, attempt int) *corev1.Pod {
		t.Helper()
		pod := &corev1.Pod{}
		must(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: Name(call.Name, string(call.UID), attempt)}, pod))
		return pod
	}
	podCount := func(t *testing.T, ns string) int {
		list := &corev1.PodList{}
		must(t, c.List(ctx, list, client.InNamespace(ns)))
		return len(list.Items)
	}
	// selecting is every policy of the namespace selecting the pod.
	selecting := func(t *testing.T, pod *corev1.Pod) []networkingv1.NetworkPolicy {
		t.Helper()
		list := &networkingv1.NetworkPolicyList{}
		must(t, c.List(ctx, list, client.InNamespace(pod.Namespace)))
		var out []networkingv1.NetworkPolicy
		for _, np := range list.Items {
			sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
			must(t, err)
			if sel.Matches(labels.Set(pod.Labels)) {
				out = append(out, np)
			}
		}
		return out
	}
	has := func(np networkingv1.NetworkPolicy, pt networkingv1.PolicyType) bool {
		for _, x := range np.Spec.PolicyTypes {
			if x == pt {
				return true
			}
		}
		return false
	}
	// noIngress: some policy isolates the pod for ingress, and none allows any.
	noIngress := func(t *testing.T, pod *corev1.Pod) {
		t.Helper()
		isolated := false
		for _, np := range selecting(t, pod) {
			isolated = isolated || has(np, networkingv1.PolicyTypeIngress)
			if len(np.Spec.Ingress) > 0 {
				t.Errorf("policy %s allows ingress to the tool pod: %+v", np.Name, np.Spec.Ingress)
			}
		}
		if !isolated {
			t.Errorf("no NetworkPolicy denies ingress to tool pod %s (labels %v)", pod.Name, pod.Labels)
		}
	}
	// apiServer is what the test reads of the API server's addresses.
	apiServer := func(t *testing.T) []string {
		svc := &corev1.Service{}
		must(t, c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "kubernetes"}, svc))
		out := append([]string{}, svc.Spec.ClusterIPs...)
		slices := &discoveryv1.EndpointSliceList{}
		must(t, c.List(ctx, slices, client.InNamespace("default"), client.MatchingLabels{discoveryv1.LabelServiceName: "kubernetes"}))
		for _, s := range slices.Items {
			for _, e := range s.Endpoints {
				out = append(out, e.Addresses...)
			}
		}
		if len(out) < 2 {
			t.Fatalf("the test API server shows too few addresses: %v", out)
		}
		return out
	}

	t.Run("ingress is denied to tool pods without egress", func(t *testing.T) {
		ns, call := setup(t)
		if _, err := newProvider().Run(ctx, job(ns, call, 1, false)); !errors.Is(err, sandbox.ErrPending) {
			t.Fatalf("run: %v", err)
		}
		noIngress(t, podOf(t, ns, call, 1))
	})

	t.Run("a tool pod allowed egress: ingress denied, no egress to link-local, the cluster's private ranges or the API server", func(t *testing.T) {
		ns, call := setup(t)
		if _, err := newProvider().Run(ctx, job(ns, call, 1, true)); !errors.Is(err, sandbox.ErrPending) {
			t.Fatalf("run: %v", err)
		}
		pod := podOf(t, ns, call, 1)
		noIngress(t, pod)
		// Metadata, the API server, and where a cluster's nodes (kubelets),
		// pods (the manager's, other sessions') and Services usually are.
		blocked := append([]string{"169.254.169.254", "169.254.0.1", "10.0.0.5", "10.244.0.7", "10.96.0.10", "172.18.0.2", "192.168.1.20", "100.64.0.3"}, apiServer(t)...)
		egressIsolated, allowsSomething := false, false
		for _, np := range selecting(t, pod) {
			if !has(np, networkingv1.PolicyTypeEgress) {
				continue
			}
			egressIsolated = true
			for _, rule := range np.Spec.Egress {
				if len(rule.To) == 0 {
					t.Fatalf("policy %s allows egress to every address", np.Name)
				}
				for _, peer := range rule.To {
					if peer.IPBlock == nil {
						// Only the cluster's DNS pods, on port 53.
						dns := peer.NamespaceSelector != nil && peer.PodSelector != nil &&
							peer.NamespaceSelector.MatchLabels[corev1.LabelMetadataName] == "kube-system" && peer.PodSelector.MatchLabels["k8s-app"] == "kube-dns"
						for _, port := range rule.Ports {
							dns = dns && port.Port != nil && port.Port.IntVal == 53 && port.EndPort == nil
						}
						if !dns || len(rule.Ports) == 0 {
							t.Fatalf("policy %s allows egress to pods or namespaces: %+v %+v", np.Name, peer, rule.Ports)
						}
						continue
					}
					allowsSomething = true
					cidr := netip.MustParsePrefix(peer.IPBlock.CIDR)
					for _, addr := range blocked {
						a := netip.MustParseAddr(addr)
						if !cidr.Contains(a) {
							continue
						}
						excepted := false
						for _, e := range peer.IPBlock.Except {
							excepted = excepted || netip.MustParsePrefix(e).Contains(a)
						}
						if !excepted {
							t.Errorf("policy %s allows egress to %s (%s, except %v)", np.Name, addr, cidr, peer.IPBlock.Except)
						}
					}
				}
			}
		}
		if !egressIsolated || !allowsSomething {
			t.Fatalf("the egress pod is not isolated for egress (%v) or allowed none (%v)", egressIsolated, allowsSomething)
		}
	})

	t.Run("a drifted policy toolgate manages is brought back", func(t *testing.T) {
		ns, call := setup(t)
		p := newProvider()
		if _, err := p.Run(ctx, job(ns, call, 1, false)); !errors.Is(err, sandbox.ErrPending) {
			t.Fatalf("run: %v", err)
		}
		np := &networkingv1.NetworkPolicy{}
		must(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: NetworkPolicyName}, np))
		want := np.Spec.DeepCopy()
		np.Spec.PodSelector = metav1.LabelSelector{MatchLabels: map[string]string{"nothing": "selected"}}
		np.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{}}
		np.Spec.Egress = []networkingv1.NetworkPolicyEgressRule{{}}
		must(t, c.Update(ctx, np))
		if _, err := p.Run(ctx, job(ns, call, 2, false)); !errors.Is(err, sandbox.ErrPending) {
			t.Fatalf("run: %v", err)
		}
		must(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: NetworkPolicyName}, np))
		if !equality.Semantic.DeepEqual(np.Spec, *want) {
			t.Fatalf("the drifted policy was not restored: %+v, want %+v", np.Spec, *want)
		}
	})

	t.Run("someone else's policy of that name: left alone, and no tool pod starts", func(t *testing.T) {
		ns, call := setup(t)
		theirs := &networkingv1.NetworkPolicy{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: NetworkPolicyName},
			Spec: networkingv1.NetworkPolicySpec{
				PodSelector: metav1.LabelSelector{},
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
				Ingress:     []networkingv1.NetworkPolicyIngressRule{{}},
			},
		}
		must(t, c.Create(ctx, theirs))
		_, err := newProvider().Run(ctx, job(ns, call, 1, false))
		var f *pipeline.Failure
		if !errors.As(err, &f) || f.Code != pipeline.CodeSandboxUnavailable || !strings.Contains(f.Message, NetworkPolicyName) {
			t.Fatalf("%v, want sandbox_unavailable naming %s", err, NetworkPolicyName)
		}
		if n := podCount(t, ns); n != 0 {
			t.Fatalf("%d tool pods started beside someone else's policy", n)
		}
		after := &networkingv1.NetworkPolicy{}
		must(t, c.Get(ctx, client.ObjectKeyFromObject(theirs), after))
		if after.ResourceVersion != theirs.ResourceVersion {
			t.Fatal("someone else's policy was changed")
		}
	})

	t.Run("the API server's addresses cannot be read: egress pods fail closed", func(t *testing.T) {
		ns, call := setup(t)
		p := newProvider()
		p.Reader = forbiddenReader{c}
		_, err := p.Run(ctx, job(ns, call, 1, true))
		var f *pipeline.Failure
		if !errors.As(err, &f) || f.Code != pipeline.CodeSandboxUnavailable || !strings.Contains(f.Message, "kubernetes") {
			t.Fatalf("%v, want sandbox_unavailable naming the kubernetes Service", err)
		}
		if n := podCount(t, ns); n != 0 {
			t.Fatalf("%d tool pods started without an egress policy", n)
		}
		// A pod without egress needs no address: it still starts.
		if _, err := p.Run(ctx, job(ns, call, 2, false)); !errors.Is(err, sandbox.ErrPending) {
			t.Fatalf("run without egress: %v", err)
		}
	})
}

// TestAuditFindsPoliciesThatWidenIsolation: NetworkPolicies add up, so a
// policy of someone else's that selects tool pods and allows them traffic
// widens the sandbox; the audit names it (the session shows it as
// SandboxIsolated=False), and ignores toolgate's own and those that select
// other pods or allow nothing.
func TestAuditFindsPoliciesThatWidenIsolation(t *testing.T) {
	c, newProvider := onAPIServer(t)
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "audit-"}}
	must(t, c.Create(ctx, ns))
	p := newProvider()
	policy := testJob(toolgatev1alpha1.SandboxWorkspaceWrite, "ws").Policy
	audit := func() string {
		t.Helper()
		got, err := p.Audit(ctx, ns.Name, policy)
		must(t, err)
		return got
	}
	must(t, c.Create(ctx, p.Config.DenyAll(ns.Name)))
	for _, np := range []*networkingv1.NetworkPolicy{
		{ObjectMeta: metav1.ObjectMeta{Name: "web-only"}, Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Ingress:     []networkingv1.NetworkPolicyIngressRule{{}},
		}},
		{ObjectMeta: metav1.ObjectMeta{Name: "deny-more"}, Spec: networkingv1.NetworkPolicySpec{
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
		}},
	} {
		np.Namespace = ns.Name
		must(t, c.Create(ctx, np))
	}
	if got := audit(); got != "" {
		t.Fatalf("nothing widens the sandbox yet, audit says %q", got)
	}
	allow := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "allow-all-egress"}, Spec: networkingv1.NetworkPolicySpec{
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
		Egress:      []networkingv1.NetworkPolicyEgressRule{{}},
	}}
	must(t, c.Create(ctx, allow))
	if got := audit(); !strings.Contains(got, "NetworkPolicy allow-all-egress selects tool pods and allows egress") {
		t.Fatalf("audit says %q", got)
	}
}
