package compose

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/controller"
)

// Cache restricts what the manager's informers list and watch: among
// pods, only tool pods; and with WatchNamespaces, every kind only in those
// namespaces (Pods too: a ByObject without namespaces takes
// DefaultNamespaces). Nothing is then listed or watched cluster-wide, so
// Roles in those namespaces suffice, and no object elsewhere ever reaches a
// reconciler.
func Cache(o Options) cache.Options {
	opts := cache.Options{
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}: {Label: labels.SelectorFromSet(labels.Set{toolgatev1alpha1.LabelSandbox: "true"})},
			// Without what agents and tools put in calls: memory follows
			// the number of calls, not what they carry.
			&toolgatev1alpha1.ToolCall{}: {Transform: controller.StripCachedCall},
			// Without the metadata tenants add (approvers may edit a
			// request's, owners their session's).
			&toolgatev1alpha1.ApprovalRequest{}: {Transform: controller.StripCachedMetadata},
			&toolgatev1alpha1.AgentSession{}:    {Transform: controller.StripCachedMetadata},
		},
		// Managed fields are a large share of every cached call and session,
		// and toolgate never reads them: memory follows the objects.
		DefaultTransform: cache.TransformStripManagedFields(),
	}
	if len(o.WatchNamespaces) > 0 {
		opts.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range o.WatchNamespaces {
			opts.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	return opts
}
