package pod

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/egress"
	"github.com/toolgate/toolgate/internal/keys"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/providers/sandbox"
	"github.com/toolgate/toolgate/internal/runner"
)

// namesHosts makes j's tool name api.example.com (with a credential)
// and *.cdn.example.com:8443.
func namesHosts(j *sandbox.Job) {
	tool := *j.Tool
	tool.Egress = &toolgatev1alpha1.ToolEgress{
		Hosts: []toolgatev1alpha1.EgressHost{{Host: "api.example.com"}, {Host: "*.cdn.example.com", Ports: []int32{8443}}},
		Credentials: []toolgatev1alpha1.EgressCredential{{Host: "api.example.com", Header: "Authorization",
			SecretRef: toolgatev1alpha1.SecretKeyRef{Name: "api", Key: "token"}, Format: "Bearer {{value}}"}},
	}
	j.Tool = &tool
}

// TestAToolNamingItsHostsReachesTheProxyOnly: its pod is labelled for
// the proxy whatever the profile allows, holds no grant, and its
// namespace's policy lets it reach the proxy's pods on its port alone.
func TestAToolNamingItsHostsReachesTheProxyOnly(t *testing.T) {
	j := testJob(toolgatev1alpha1.SandboxReadOnly, "")
	j.Policy.AllowEgress = true
	namesHosts(&j)
	pod, err := BuildPod(testConfig, j, "p")
	if err != nil {
		t.Fatal(err)
	}
	if got := pod.Labels[toolgatev1alpha1.LabelEgress]; got != EgressProxy {
		t.Fatalf("egress label %q, want %q (allowEgress does not widen a tool that names its hosts)", got, EgressProxy)
	}
	for _, e := range pod.Spec.Containers[0].Env {
		if strings.Contains(strings.ToLower(e.Name), "proxy") {
			t.Fatalf("the pod spec holds %s: a grant is handed over the channel only", e.Name)
		}
	}
	np := testConfig.ProxyPolicy("ns", proxyTarget{namespace: "toolgate-system", selector: map[string]string{"app.kubernetes.io/component": "egress"}})
	if got := np.Spec.PodSelector.MatchLabels[toolgatev1alpha1.LabelEgress]; got != EgressProxy {
		t.Fatalf("the proxy policy selects egress=%q", got)
	}
	if len(np.Spec.Egress) != 1 || len(np.Spec.Egress[0].To) != 1 || np.Spec.Egress[0].To[0].IPBlock != nil ||
		np.Spec.Egress[0].To[0].PodSelector.MatchLabels["app.kubernetes.io/component"] != "egress" ||
		len(np.Spec.Egress[0].Ports) != 1 || np.Spec.Egress[0].Ports[0].Port.IntVal != egress.Port {
		t.Fatalf("the proxy policy allows %+v, want the proxy's pods on %d only", np.Spec.Egress, egress.Port)
	}
}

// TestTheBodyIsHandedItsProxyAndAGrantForItsPod: on a real API server,
// the call handed over carries HTTP(S)_PROXY naming a ready proxy pod,
// with a grant signed with the key derived from the channel key, for
// the pod's own address and UID, naming the tool's hosts and where the
// credential is (never its value). Without a proxy the call fails
// sandbox_unavailable, the body never started.
func TestTheBodyIsHandedItsProxyAndAGrantForItsPod(t *testing.T) {
	c, newProvider := onAPIServer(t)
	ctx := context.Background()
	job, podOf := oneCall(t, c, "egress-")

	none := newProvider()
	t.Cleanup(func() { _ = none.Stop(context.Background()) })
	j := job(1)
	namesHosts(&j)
	_, err := settle(t, none, j)
	var f *pipeline.Failure
	if !errors.As(err, &f) || f.Code != pipeline.CodeSandboxUnavailable || !strings.Contains(f.Message, "--egress-proxy-service") {
		t.Fatalf("no proxy: %v, want sandbox_unavailable naming the flag", err)
	}

	proxyNS := namespace(t, c, "proxy-", nil)
	must(t, c.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: proxyNS, Name: "toolgate-egress"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app.kubernetes.io/component": "egress"}, Ports: []corev1.ServicePort{{Port: egress.Port}}}}))
	must(t, c.Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: proxyNS, Name: "toolgate-egress-1", Labels: map[string]string{discoveryv1.LabelServiceName: "toolgate-egress"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"10.9.0.1"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false)}},
			{Addresses: []string{"10.9.0.2"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}},
		},
	}))
	p := newProvider()
	p.Config.ManagerNamespace, p.Config.EgressService = proxyNS, "toolgate-egress"
	t.Cleanup(func() { _ = p.Stop(context.Background()) })
	j = job(2)
	namesHosts(&j)
	if _, err := p.Run(ctx, j); !errors.Is(err, sandbox.ErrPending) {
		t.Fatalf("start: %v", err)
	}
	pod := podOf(2)
	if pod.Labels[toolgatev1alpha1.LabelEgress] != EgressProxy {
		t.Fatalf("egress label %q", pod.Labels[toolgatev1alpha1.LabelEgress])
	}
	np := &networkingv1.NetworkPolicy{}
	must(t, c.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: ProxyPolicyName}, np))
	if to := np.Spec.Egress[0].To[0]; to.PodSelector.MatchLabels["app.kubernetes.io/component"] != "egress" ||
		to.NamespaceSelector.MatchLabels[corev1.LabelMetadataName] != proxyNS {
		t.Fatalf("the namespace's proxy policy lets tool pods reach %+v", to)
	}
	k := startKubeletAt(t, c, pod, "10.244.7.7")
	p.Dial = k.dial
	if _, err := settle(t, p, j); err != nil {
		t.Fatalf("run: %v", err)
	}
	spec, _ := k.handed.Load().(runner.Spec)
	url := spec.Env["HTTPS_PROXY"]
	if url == "" || spec.Env["http_proxy"] != url || spec.Env["LANG"] != "C" {
		t.Fatalf("handed env %v, want the proxy beside the tool's own", spec.Env)
	}
	rest, ok := strings.CutPrefix(url, "http://toolgate:")
	token, addr, ok2 := strings.Cut(rest, "@")
	if !ok || !ok2 || addr != "10.9.0.2:3128" {
		t.Fatalf("proxy %q, want the ready proxy pod 10.9.0.2:3128", url)
	}
	if spec.Await != addr {
		t.Fatalf("the runner awaits %q before the body, want the proxy it is handed, %s", spec.Await, addr)
	}
	g, err := egress.Verify([][]byte{keys.GrantKey(managerKey.Bytes())}, token, time.Now())
	if err != nil {
		t.Fatalf("the grant: %v", err)
	}
	if g.PodIP != "10.244.7.7" || g.PodUID != string(pod.UID) || g.Tool != j.Tool.Name || g.Namespace != j.Owner.Namespace {
		t.Fatalf("grant %+v, want the pod's address and UID, the tool and the call's namespace", g)
	}
	if h := g.Match("api.example.com", 443); h == nil || h.Credential == nil || h.Credential.Secret != "api" || h.Credential.Format != "Bearer {{value}}" {
		t.Fatalf("grant hosts %+v", g.Hosts)
	}
	if g.Match("x.cdn.example.com", 8443) == nil || g.Match("x.cdn.example.com", 443) != nil || g.Match("example.org", 443) != nil {
		t.Fatalf("grant hosts %+v", g.Hosts)
	}
	if _, err := netip.ParseAddr(g.PodIP); err != nil || time.Until(time.Unix(g.Expires, 0)) > time.Duration(j.Tool.TimeoutSeconds)*time.Second+grantSlack {
		t.Fatalf("grant expires %v", time.Unix(g.Expires, 0))
	}
}
