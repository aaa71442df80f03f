package pod

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/providers/sandbox"
)

// ensureNetworkPolicies makes sure the namespace's policies isolating tool
// pods exist with the desired spec before a pod is created: the deny-all
// policy always, the egress policy when the pod is allowed egress, the
// proxy's when it reaches its hosts through the egress proxy. It answers
// sandbox_unavailable (nothing ran) when a policy cannot be made right,
// and ErrPending when it raced another writer (tried again).
func (p *Provider) ensureNetworkPolicies(ctx context.Context, namespace, egress string) error {
	if err := p.ensurePolicy(ctx, p.Config.DenyAll(namespace)); err != nil {
		return err
	}
	switch egress {
	case EgressNone:
		return nil
	case EgressProxy:
		target, err := p.proxyTarget(ctx)
		if err != nil {
			return err
		}
		return p.ensurePolicy(ctx, p.Config.ProxyPolicy(namespace, target))
	}
	addrs, err := p.apiServerAddresses(ctx)
	if err != nil {
		return pipeline.Fail(pipeline.CodeSandboxUnavailable, fmt.Sprintf(
			"no tool pod allowed egress is started: the API server's addresses, which NetworkPolicy %s/%s must exclude, cannot be read: %v",
			namespace, EgressPolicyName, err))
	}
	return p.ensurePolicy(ctx, p.Config.EgressPolicy(namespace, addrs))
}

// Audit lists the NetworkPolicies of namespace, other than toolgate's,
// that select the tool pods of policy and allow them traffic: policies add
// up, so each widens what the sandbox's own allow. A selector naming a
// call's own labels is not predicted; an empty one (every pod of the
// namespace) is the usual culprit.
func (p *Provider) Audit(ctx context.Context, namespace string, policy toolgatev1alpha1.SandboxPolicy) (string, error) {
	list := &networkingv1.NetworkPolicyList{}
	if err := p.Client.List(ctx, list, client.InNamespace(namespace)); err != nil {
		return "", err
	}
	tool := labels.Set{toolgatev1alpha1.LabelSandbox: "true", toolgatev1alpha1.LabelEgress: EgressKind(nil, policy), LabelManagedBy: managedBy}
	var found []string
	for _, np := range list.Items {
		if (np.Name == NetworkPolicyName || np.Name == EgressPolicyName || np.Name == ProxyPolicyName) && np.Labels[LabelManagedBy] == managedBy {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		if err != nil || !sel.Matches(tool) {
			continue
		}
		var allows []string
		if slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) || len(np.Spec.PolicyTypes) == 0 {
			if len(np.Spec.Ingress) > 0 {
				allows = append(allows, "ingress")
			}
		}
		if len(np.Spec.Egress) > 0 {
			allows = append(allows, "egress")
		}
		if len(allows) > 0 {
			found = append(found, fmt.Sprintf("NetworkPolicy %s selects tool pods and allows %s", np.Name, strings.Join(allows, " and ")))
		}
	}
	if len(found) == 0 {
		return "", nil
	}
	return strings.Join(found, "; ") + " (NetworkPolicies add up: tool pods may reach, or be reached by, more than the sandbox allows)", nil
}

// ensurePolicy creates want, or brings an existing policy of its name that
// toolgate manages back to want's spec. A policy of that name toolgate does
// not manage (no managed-by label) is never changed: unless its spec is
// already want's, no tool pod is started in the namespace.
func (p *Provider) ensurePolicy(ctx context.Context, want *networkingv1.NetworkPolicy) error {
	name := want.Namespace + "/" + want.Name
	unavailable := func(format string, args ...any) error {
		return pipeline.Fail(pipeline.CodeSandboxUnavailable, fmt.Sprintf("NetworkPolicy %s ", name)+fmt.Sprintf(format, args...))
	}
	// From the cache, which a change or a deletion reaches within
	// milliseconds (a read of the API server would be stale as soon, and
	// cost a round trip before every dispatch); one the cache has not
	// seen yet is confirmed by the API server before it is created.
	got := &networkingv1.NetworkPolicy{}
	err := p.Client.Get(ctx, client.ObjectKeyFromObject(want), got)
	if apierrors.IsNotFound(err) {
		err = p.Reader.Get(ctx, client.ObjectKeyFromObject(want), got)
	}
	switch {
	case apierrors.IsNotFound(err):
		err := p.Client.Create(ctx, want)
		switch {
		case apierrors.IsAlreadyExists(err):
			return sandbox.ErrPending // created meanwhile: checked on the next poll
		case err != nil:
			return unavailable("could not be created: %v", err)
		}
		return nil
	case err != nil:
		return unavailable("could not be read: %v", err)
	}
	if equality.Semantic.DeepEqual(got.Spec, want.Spec) {
		return nil
	}
	if got.Labels[LabelManagedBy] != managedBy {
		return unavailable("exists, is not managed by toolgate (no label %s=%s) and does not isolate tool pods as the sandbox needs; toolgate leaves it alone and starts no tool pod in this namespace until it is deleted",
			LabelManagedBy, managedBy)
	}
	got.Spec = want.Spec
	if err := p.Client.Update(ctx, got); err != nil {
		if apierrors.IsConflict(err) {
			return sandbox.ErrPending // changed meanwhile: checked on the next poll
		}
		return unavailable("differs from the sandbox's and could not be restored: %v", err)
	}
	log.FromContext(ctx).Info("sandbox NetworkPolicy restored to its desired spec", "networkPolicy", name)
	return nil
}

// apiServerAddresses are the addresses of the API server that tool pods
// must not reach: the kubernetes Service's cluster IPs and the addresses of
// its EndpointSlices (a CNI may apply policies after the Service address is
// translated). Read fresh each time (they can change); any failure, or no
// endpoint address at all, is an error: the caller fails closed.
func (p *Provider) apiServerAddresses(ctx context.Context) ([]netip.Addr, error) {
	hint := func(err error) error {
		if apierrors.IsForbidden(err) {
			return fmt.Errorf("%w (the manager needs get and list on services, and on endpointslices.discovery.k8s.io)", err)
		}
		return err
	}
	svc := &corev1.Service{}
	if err := p.Reader.Get(ctx, client.ObjectKey{Namespace: metav1.NamespaceDefault, Name: "kubernetes"}, svc); err != nil {
		return nil, fmt.Errorf("get Service default/kubernetes: %w", hint(err))
	}
	var out []netip.Addr
	ips := svc.Spec.ClusterIPs
	if len(ips) == 0 && svc.Spec.ClusterIP != "" {
		ips = []string{svc.Spec.ClusterIP}
	}
	for _, ip := range ips {
		if a, err := netip.ParseAddr(ip); err == nil {
			out = append(out, a)
		}
	}
	list := &discoveryv1.EndpointSliceList{}
	if err := p.Reader.List(ctx, list, client.InNamespace(metav1.NamespaceDefault), client.MatchingLabels{discoveryv1.LabelServiceName: "kubernetes"}); err != nil {
		return nil, fmt.Errorf("list the EndpointSlices of Service default/kubernetes: %w", hint(err))
	}
	endpoints := 0
	for _, s := range list.Items {
		if s.AddressType != discoveryv1.AddressTypeIPv4 && s.AddressType != discoveryv1.AddressTypeIPv6 {
			continue
		}
		for _, e := range s.Endpoints {
			for _, ip := range e.Addresses {
				if a, err := netip.ParseAddr(ip); err == nil {
					out = append(out, a)
					endpoints++
				}
			}
		}
	}
	if endpoints == 0 {
		return nil, errors.New("the EndpointSlices of Service default/kubernetes hold no address")
	}
	return out, nil
}
