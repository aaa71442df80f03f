package cli

import (
	"fmt"
	"io"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/textutil"
)

// previewBytes bounds a preview in a table cell.
const previewBytes = 60

func pendingCommand(o *Options) *cobra.Command {
	var all bool
	var out *output
	cmd := &cobra.Command{
		Use:   "pending",
		Short: "list the ApprovalRequests waiting for a decision",
		Long: `List the ApprovalRequests nobody has decided yet whose deadline has not
passed, soonest deadline first: the tool, who asked, how long ago, and how
long is left.`,
		Example: `  # requests waiting in the current namespace
  kubectl toolgate pending

  # in every namespace, with the call, the reason and the arguments preview
  kubectl toolgate pending -A -o wide

  # as JSON, for a script
  kubectl toolgate pending -A -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, ns, err := o.client()
			if err != nil {
				return err
			}
			var opts []client.ListOption
			if !all {
				opts = append(opts, client.InNamespace(ns))
			}
			list := &toolgatev1alpha1.ApprovalRequestList{}
			if err := c.List(cmd.Context(), list, opts...); err != nil {
				return err
			}
			now := time.Now()
			waiting := &toolgatev1alpha1.ApprovalRequestList{}
			for _, ar := range list.Items {
				if decidable(&ar, now) == nil {
					ar.SetGroupVersionKind(toolgatev1alpha1.GroupVersion.WithKind("ApprovalRequest"))
					waiting.Items = append(waiting.Items, ar)
				}
			}
			sort.SliceStable(waiting.Items, func(i, j int) bool {
				return waiting.Items[i].Spec.Deadline.Before(&waiting.Items[j].Spec.Deadline)
			})
			if isTable, wide := out.table(); isTable {
				return writePending(o.Out, waiting.Items, all, wide, now)
			}
			return out.print(waiting, o)
		},
	}
	cmd.Flags().BoolVarP(&all, "all-namespaces", "A", false, "list the requests of every namespace")
	out = addOutput(cmd, o)
	return cmd
}

func writePending(w io.Writer, items []toolgatev1alpha1.ApprovalRequest, all, wide bool, now time.Time) error {
	if len(items) == 0 {
		_, err := fmt.Fprintln(w, "No approval requests are waiting.")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(ns string, cells ...string) {
		if all {
			fmt.Fprintf(tw, "%s\t", ns)
		}
		for i, s := range cells {
			if i > 0 {
				fmt.Fprint(tw, "\t")
			}
			fmt.Fprint(tw, s)
		}
		fmt.Fprintln(tw)
	}
	head := []string{"NAME", "SESSION", "TOOL", "REQUESTER", "AGE", "DEADLINE"}
	if wide {
		head = append(head, "CALL", "REASON", "ARGUMENTS")
	}
	row("NAMESPACE", head...)
	for _, ar := range items {
		session := "<unknown>"
		if ar.Spec.SessionRef != nil {
			session = ar.Spec.SessionRef.Name
		}
		cells := []string{ar.Name, session, ar.Spec.Tool, ar.Spec.Requester,
			duration.HumanDuration(now.Sub(ar.CreationTimestamp.Time)),
			"in " + duration.HumanDuration(ar.Spec.Deadline.Sub(now))}
		if wide {
			cells = append(cells, ar.Spec.ToolCallRef.Name, preview(ar.Spec.Reason), preview(ar.Spec.ArgumentsPreview))
		}
		row(ar.Namespace, cells...)
	}
	return tw.Flush()
}

// preview makes text one table cell: one line, cut without splitting a
// character, marked when cut.
func preview(s string) string {
	return textutil.TruncateMarked(textutil.OneLine(s, len(s)), previewBytes, "…")
}
