package pod

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/egress"
	"github.com/toolgate/toolgate/internal/keys"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/providers/sandbox"
)

// grantSlack is how long an egress grant outlives its body's timeout: the
// hand-over, and a request the body started just before its end.
const grantSlack = time.Minute

// proxyTarget is where the egress proxy runs: its pods' namespace and
// labels (the Service's selector, for the tool pods' NetworkPolicy), and
// the addresses of its ready pods (tool pods reach them directly: a
// cluster without a Service proxy, and the proxy sees each pod's own
// address).
type proxyTarget struct {
	namespace string
	selector  map[string]string
	addrs     []string
}

// proxyTTL is how long a proxy target read is reused: a call reads it
// twice (its pod's policy, its hand-over), a session's calls many times.
const proxyTTL = 5 * time.Second

// proxyCache keeps the last proxy target read.
type proxyCache struct {
	mu sync.Mutex
	at time.Time
	t  proxyTarget
}

// proxyTarget is the egress proxy's target, read at most every proxyTTL
// while it has ready pods.
func (p *Provider) proxyTarget(ctx context.Context) (proxyTarget, error) {
	c := &p.proxy
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.t.addrs) > 0 && p.now().Sub(c.at) < proxyTTL {
		return c.t, nil
	}
	t, err := p.readProxyTarget(ctx)
	if err == nil {
		c.at, c.t = p.now(), t
	}
	return t, err
}

func (p *Provider) readProxyTarget(ctx context.Context) (proxyTarget, error) {
	unavailable := func(why string) error {
		return pipeline.Fail(pipeline.CodeSandboxUnavailable, "the tool names the hosts it may reach, "+why+"; the body never started")
	}
	if p.Config.EgressService == "" || p.Config.ManagerNamespace == "" {
		return proxyTarget{}, unavailable("but this install runs no egress proxy (the manager's --egress-proxy-service)")
	}
	t := proxyTarget{namespace: p.Config.ManagerNamespace}
	svc := &corev1.Service{}
	if err := p.Reader.Get(ctx, client.ObjectKey{Namespace: t.namespace, Name: p.Config.EgressService}, svc); err != nil {
		return t, unavailable(fmt.Sprintf("but the egress proxy's Service %s/%s cannot be read: %v", t.namespace, p.Config.EgressService, err))
	}
	if len(svc.Spec.Selector) == 0 {
		return t, unavailable(fmt.Sprintf("but the egress proxy's Service %s/%s selects no pods", t.namespace, svc.Name))
	}
	t.selector = svc.Spec.Selector
	list := &discoveryv1.EndpointSliceList{}
	if err := p.Reader.List(ctx, list, client.InNamespace(t.namespace), client.MatchingLabels{discoveryv1.LabelServiceName: svc.Name}); err != nil {
		return t, unavailable(fmt.Sprintf("but the egress proxy's EndpointSlices cannot be read: %v", err))
	}
	for _, s := range list.Items {
		for _, e := range s.Endpoints {
			if e.Conditions.Ready == nil || *e.Conditions.Ready {
				t.addrs = append(t.addrs, e.Addresses...)
			}
		}
	}
	return t, nil
}

// ProxyPolicy is the namespace's NetworkPolicy for tool pods that reach
// their hosts through the egress proxy: no ingress but the manager's, and
// egress to the proxy's pods on its port only (no DNS: the proxy
// resolves).
func (c Config) ProxyPolicy(namespace string, t proxyTarget) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: ProxyPolicyName, Namespace: namespace, Labels: map[string]string{LabelManagedBy: managedBy}},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{toolgatev1alpha1.LabelSandbox: "true", toolgatev1alpha1.LabelEgress: EgressProxy}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Ingress:     c.managerIngress(),
			Egress: []networkingv1.NetworkPolicyEgressRule{{
				To: []networkingv1.NetworkPolicyPeer{{
					NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: t.namespace}},
					PodSelector:       &metav1.LabelSelector{MatchLabels: t.selector},
				}},
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromInt32(egress.Port))}},
			}},
		},
	}
}

// Grant is the egress grant of job's attempt in pod: the tool's hosts
// and where their credentials are, valid from the pod's address until the
// body's timeout (and grantSlack) has passed.
func Grant(job sandbox.Job, pod *corev1.Pod, now time.Time) egress.Grant {
	e := job.Tool.Egress
	creds := map[string]*egress.Credential{}
	for _, c := range e.Credentials {
		header := c.Header
		if header == "" {
			header = "Authorization"
		}
		creds[c.Host] = &egress.Credential{Header: header, Secret: c.SecretRef.Name, Key: c.SecretRef.Key, Format: c.Format}
	}
	g := egress.Grant{
		Namespace: job.Owner.Namespace, Call: job.Owner.Name, CallUID: string(job.OwnerUID), Tool: job.Tool.Name,
		PodUID: string(pod.UID), PodIP: pod.Status.PodIP,
		Expires: now.Add(bodyTimeout(job.Tool) + grantSlack).Unix(),
	}
	for _, h := range e.Hosts {
		g.Hosts = append(g.Hosts, egress.Host{Name: strings.ToLower(h.Host), Ports: slices.Clone(h.Ports), Credential: creds[h.Host], CABundle: h.CABundle})
	}
	return g
}

// egressEnv is the proxy environment of job's body in pod: HTTP_PROXY and
// HTTPS_PROXY (both spellings) naming one of the proxy's ready pods, with
// the attempt's signed grant as the proxy password; and that pod's
// address, which the runner reaches before it starts the body (a new
// pod's NetworkPolicy may not be applied yet: runner.Spec.Await). Handed
// over the channel only, never in the pod spec.
func (p *Provider) egressEnv(ctx context.Context, job sandbox.Job, pod *corev1.Pod) (map[string]string, string, error) {
	t, err := p.proxyTarget(ctx)
	if err != nil {
		return nil, "", err
	}
	if len(t.addrs) == 0 {
		return nil, "", pipeline.Fail(pipeline.CodeSandboxUnavailable, fmt.Sprintf(
			"the tool names the hosts it may reach, but the egress proxy (Service %s/%s) has no ready pod; the body never started", t.namespace, p.Config.EgressService))
	}
	token, err := egress.Mint(keys.GrantKey(p.Key.Bytes()), Grant(job, pod, p.now()))
	if err != nil {
		return nil, "", pipeline.Fail(pipeline.CodeSandboxUnavailable, "the egress grant cannot be made: "+err.Error())
	}
	addr := net.JoinHostPort(t.addrs[rand.IntN(len(t.addrs))], strconv.Itoa(egress.Port))
	url := fmt.Sprintf("http://toolgate:%s@%s", token, addr)
	return map[string]string{"HTTP_PROXY": url, "HTTPS_PROXY": url, "http_proxy": url, "https_proxy": url, "NO_PROXY": "", "no_proxy": ""}, addr, nil
}
