package cli

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
passed, soonest deadline first: the tool, who asked, how long ago, how
long is left, and the question's ID, which an answer names (approve
--question) so that it decides this question and no other asked later
under the same name. With -A, an approver who may not list every namespace sees
the namespaces it may (or the current one), and is told so.`,
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
			list, err := listRequests(cmd.Context(), c, o.ErrOut, ns, all)
			if err != nil {
				return err
			}
			now := time.Now()
			// An empty list prints as [], never null.
			waiting := &toolgatev1alpha1.ApprovalRequestList{Items: []toolgatev1alpha1.ApprovalRequest{}}
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

// listRequests lists the ApprovalRequests of namespace ns, or of every
// namespace. An approver bound in some namespaces only may not list at the
// cluster scope: it then gets those of the namespaces it may list requests
// in (when it may list namespaces), else those of ns, and a line on errOut
// says what it is shown.
func listRequests(ctx context.Context, c client.Client, errOut io.Writer, ns string, all bool) (*toolgatev1alpha1.ApprovalRequestList, error) {
	list := &toolgatev1alpha1.ApprovalRequestList{}
	if !all {
		return list, c.List(ctx, list, client.InNamespace(ns))
	}
	err := c.List(ctx, list)
	if !apierrors.IsForbidden(err) {
		return list, err
	}
	namespaces := &corev1.NamespaceList{}
	if nerr := c.List(ctx, namespaces); nerr != nil {
		fmt.Fprintf(errOut, "You may not list approval requests in every namespace; showing namespace %s (-n selects another).\n", ns)
		return list, c.List(ctx, list, client.InNamespace(ns))
	}
	var shown []string
	for _, n := range namespaces.Items {
		one := &toolgatev1alpha1.ApprovalRequestList{}
		switch err := c.List(ctx, one, client.InNamespace(n.Name)); {
		case apierrors.IsForbidden(err):
			continue
		case err != nil:
			return nil, err
		}
		shown = append(shown, n.Name)
		list.Items = append(list.Items, one.Items...)
	}
	fmt.Fprintf(errOut, "You may not list approval requests in every namespace; showing the namespaces you may: %s.\n", strings.Join(shown, ", "))
	return list, nil
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
	head := []string{"NAME", "SESSION", "TOOL", "REQUESTER", "APPROVALS", "AGE", "DEADLINE", "QUESTION"}
	if wide {
		head = append(head, "APPROVERS", "CALL", "REASON", "ARGUMENTS")
	}
	row("NAMESPACE", head...)
	for _, ar := range items {
		session := sessionOf(&ar)
		n, required := ar.ApprovalCount()
		cells := []string{ar.Name, session, ar.Spec.Tool, ar.Spec.Requester, fmt.Sprintf("%d/%d", n, required),
			duration.HumanDuration(now.Sub(ar.CreationTimestamp.Time)),
			"in " + duration.HumanDuration(ar.Spec.Deadline.Sub(now)), toolgatev1alpha1.ShortQuestionID(ar.QuestionID())}
		if wide {
			cells = append(cells, approverList(&ar), ar.Spec.ToolCallRef.Name, preview(ar.Spec.Reason), preview(ar.Spec.ArgumentsPreview))
		}
		row(ar.Namespace, cells...)
	}
	return tw.Flush()
}

// approverList says who may still approve ar: the users and groups it
// names, less those who have ("anyone with approve" when it names none).
func approverList(ar *toolgatev1alpha1.ApprovalRequest) string {
	a := ar.Spec.Approvers
	if a == nil || len(a.Users)+len(a.Groups) == 0 {
		return "anyone with approve"
	}
	done := map[string]bool{}
	for _, x := range ar.Spec.Approvals {
		done[x.User] = true
	}
	var out []string
	for _, u := range a.Users {
		if !done[u] {
			out = append(out, "user "+u)
		}
	}
	for _, g := range a.Groups {
		out = append(out, "group "+g)
	}
	return strings.Join(out, ", ")
}

// preview makes text one table cell: one line, cut without splitting a
// character, marked when cut.
func preview(s string) string {
	return textutil.TruncateMarked(textutil.OneLine(s, len(s)), previewBytes, "…")
}

// sessionOf names the session ar's call would enter ("<unknown>" for a
// request asked before requests named it).
func sessionOf(ar *toolgatev1alpha1.ApprovalRequest) string {
	if ar.Spec.SessionRef != nil {
		return ar.Spec.SessionRef.Name
	}
	return "<unknown>"
}
