package cli

import (
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// completeNames completes a command's NAME argument with the names of the
// list's kind in the selected namespace. Errors complete nothing: a shell
// completion has nowhere to report them.
func (o *Options) completeNames(list client.ObjectList) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, prefix string) ([]string, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		c, ns, err := o.client()
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		l := list.DeepCopyObject().(client.ObjectList)
		if err := c.List(cmd.Context(), l, client.InNamespace(ns)); err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var names []string
		_ = meta.EachListItem(l, func(obj runtime.Object) error {
			if m, err := meta.Accessor(obj); err == nil && strings.HasPrefix(m.GetName(), prefix) {
				names = append(names, m.GetName())
			}
			return nil
		})
		return names, cobra.ShellCompDirectiveNoFileComp
	}
}

// completeNamespaces completes -n with the namespaces the user may list.
func (o *Options) completeNamespaces(cmd *cobra.Command, _ []string, prefix string) ([]string, cobra.ShellCompDirective) {
	cfg, err := o.Flags.ToRESTConfig()
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	list, err := cs.CoreV1().Namespaces().List(cmd.Context(), metav1.ListOptions{})
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var names []string
	for _, n := range list.Items {
		if strings.HasPrefix(n.Name, prefix) {
			names = append(names, n.Name)
		}
	}
	return names, cobra.ShellCompDirectiveNoFileComp
}
