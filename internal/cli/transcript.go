package cli

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// sessionField is ToolCall's selectable field naming its session: the API
// server filters, so only the session's calls are sent.
const sessionField = "spec.sessionRef.name"

func transcriptCommand(o *Options) *cobra.Command {
	var out *output
	cmd := &cobra.Command{
		Use:   "transcript SESSION",
		Short: "print a session's committed results in model order",
		Long: `Print the results an AgentSession has committed, in commit order (model
order: turn, then index), with a preview of each result's content.`,
		Example: `  # the transcript of session "demo"
  kubectl toolgate transcript demo -n agents

  # with the call names, error codes and execution modes
  kubectl toolgate transcript demo -n agents -o wide

  # the committed calls as YAML
  kubectl toolgate transcript demo -n agents -o yaml`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: o.completeNames(&toolgatev1alpha1.AgentSessionList{}),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := o.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			list := &toolgatev1alpha1.ToolCallList{}
			if err := c.List(ctx, list, client.InNamespace(ns), client.MatchingFields{sessionField: args[0]}); err != nil {
				return err
			}
			if len(list.Items) == 0 {
				// No calls: tell a session that has none yet from no session.
				if err := get(ctx, c, ns, args[0], &toolgatev1alpha1.AgentSession{}, "agentsession"); err != nil {
					return err
				}
			}
			committed := &toolgatev1alpha1.ToolCallList{}
			for _, tc := range list.Items {
				if tc.Status.Schedule.CommitSequence != nil && tc.Status.Result != nil {
					tc.SetGroupVersionKind(toolgatev1alpha1.GroupVersion.WithKind("ToolCall"))
					committed.Items = append(committed.Items, tc)
				}
			}
			sort.Slice(committed.Items, func(i, j int) bool {
				return *committed.Items[i].Status.Schedule.CommitSequence < *committed.Items[j].Status.Schedule.CommitSequence
			})
			if isTable, wide := out.table(); isTable {
				return writeTranscript(o.Out, args[0], committed.Items, wide)
			}
			return out.print(committed, o)
		},
	}
	out = addOutput(cmd, o)
	return cmd
}

func writeTranscript(w io.Writer, session string, calls []toolgatev1alpha1.ToolCall, wide bool) error {
	if len(calls) == 0 {
		_, err := fmt.Fprintf(w, "Session %s has committed no calls yet.\n", session)
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if wide {
		fmt.Fprintln(tw, "SEQ\tTURN\tINDEX\tCALL\tTOOL\tMODE\tOUTCOME\tCODE\tCONTENT")
	} else {
		fmt.Fprintln(tw, "SEQ\tTURN\tINDEX\tTOOL\tOUTCOME\tCONTENT")
	}
	for _, tc := range calls {
		r := tc.Status.Result
		seq := strconv.FormatInt(*tc.Status.Schedule.CommitSequence, 10)
		if wide {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", seq, tc.Spec.Turn, tc.Spec.Index, tc.Name, tc.Spec.Tool,
				tc.Status.Schedule.ExecutionMode, r.Outcome, r.ErrorCode, preview(r.Content))
		} else {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\n", seq, tc.Spec.Turn, tc.Spec.Index, tc.Spec.Tool, r.Outcome, preview(r.Content))
		}
	}
	return tw.Flush()
}
