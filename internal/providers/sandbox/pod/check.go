package pod

import (
	"context"
	"fmt"
	"strings"

	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// CheckProfile says what of spec this install will not run as written:
// tools naming their hosts where no egress proxy is configured, and a
// RuntimeClass that does not exist. Calls of such tools fail
// (sandbox_unavailable) rather than run with less; the profile's status
// says so before the first call does. A RuntimeClass the manager may not
// read (a namespaced install) is not judged. Only a missing RuntimeClass
// asks to be checked again: the install's configuration does not change
// under a running manager.
func (p *Provider) CheckProfile(ctx context.Context, spec *toolgatev1alpha1.ToolProfileSpec) (reasons []string, recheck bool) {
	if p.Config.EgressService == "" || p.Config.ManagerNamespace == "" {
		var named []string
		for _, t := range spec.Tools {
			if t.Egress != nil {
				named = append(named, t.Name)
			}
		}
		if len(named) > 0 {
			reasons = append(reasons, fmt.Sprintf("tools %s name the hosts they may reach, but this install runs no egress proxy (the manager's --egress-proxy-service): their calls fail (sandbox_unavailable)",
				strings.Join(named, ", ")))
		}
	}
	if name := spec.Sandbox.RuntimeClassName; name != nil && p.Reader != nil {
		err := p.Reader.Get(ctx, client.ObjectKey{Name: *name}, &nodev1.RuntimeClass{})
		if apierrors.IsNotFound(err) {
			reasons = append(reasons, fmt.Sprintf("RuntimeClass %s does not exist: no tool pod is created and calls fail (sandbox_unavailable) until it does", *name))
			recheck = true
		}
	}
	return reasons, recheck
}
