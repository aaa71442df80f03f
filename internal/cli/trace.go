package cli

import (
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/egress"
	"github.com/toolgate/toolgate/internal/pipeline"
)

// expected are the verdicts of a call that goes well; the first record with
// another verdict is where the call diverged.
var expected = map[string]bool{
	pipeline.VerdictAdmitted: true, pipeline.VerdictAllow: true, pipeline.VerdictAsk: true, pipeline.VerdictAllowedOnce: true,
	pipeline.VerdictAbstain: true, pipeline.VerdictDispatched: true, pipeline.VerdictOK: true, pipeline.VerdictAccept: true,
	string(pipeline.Succeeded): true,
}

func traceCommand(o *Options) *cobra.Command {
	var out *output
	cmd := &cobra.Command{
		Use:   "trace CALL",
		Short: "print a call's stage boundaries and the first one that diverged",
		Long: `Print the stage boundaries a ToolCall crossed, in order, with each verdict
and reason and the time since the boundary before it (the first: since the
call was created), name the first boundary whose verdict is not the one a
call that goes well has (that is where to look, docs/operations.md), and
say which pod ran the latest attempt and who answered the call's
ApprovalRequest, and list the egress proxy's record of the body's
requests (hosts reached, credentials added, refusals) for a tool that
names its hosts.`,
		Example: `  # why did the call "read-secret" end as it did?
  kubectl toolgate trace read-secret -n agents

  # with full timestamps and the result's message
  kubectl toolgate trace read-secret -n agents -o wide`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: o.completeNames(&toolgatev1alpha1.ToolCallList{}),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := o.client()
			if err != nil {
				return err
			}
			tc := &toolgatev1alpha1.ToolCall{}
			if err := get(cmd.Context(), c, ns, args[0], tc, "toolcall"); err != nil {
				return err
			}
			if isTable, wide := out.table(); isTable {
				// The ApprovalRequest is named after its call; a caller who
				// may not read it still gets the trace.
				ar := &toolgatev1alpha1.ApprovalRequest{}
				if err := c.Get(cmd.Context(), client.ObjectKey{Namespace: ns, Name: tc.Name}, ar); err != nil {
					ar = nil
				}
				if err := writeTrace(o.Out, tc, ar, wide); err != nil {
					return err
				}
				// The egress proxy's record of the call's requests; a
				// caller who may not list Events gets the rest.
				evs := &eventsv1.EventList{}
				err := c.List(cmd.Context(), evs, client.InNamespace(ns), client.MatchingLabels{egress.LabelCallUID: string(tc.UID)})
				switch {
				case apierrors.IsForbidden(err):
					return nil
				case err != nil:
					_, err = fmt.Fprintf(o.Out, "egress: the proxy's record was not read: %v\n", err)
					return err
				}
				return writeEgress(o.Out, evs.Items)
			}
			return out.print(tc, o)
		},
	}
	out = addOutput(cmd, o)
	return cmd
}

// writeTrace writes the trace of tc; ar is its ApprovalRequest, if any.
func writeTrace(out io.Writer, tc *toolgatev1alpha1.ToolCall, ar *toolgatev1alpha1.ApprovalRequest, wide bool) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "call %s (tool %s, turn %d, index %d, phase %s)\n", tc.Name, tc.Spec.Tool, tc.Spec.Turn, tc.Spec.Index, tc.Status.Phase)
	if tc.Status.Sandbox != "" {
		fmt.Fprintf(w, "attempt %d ran in %s\n", tc.Status.Attempt, tc.Status.Sandbox)
	}
	fmt.Fprintln(w, "TIME\tTOOK\tSTAGE\tVERDICT\tREASON")
	layout := "15:04:05"
	if wide {
		layout = time.RFC3339Nano
	}
	diverged := -1
	since := tc.CreationTimestamp.Time
	for i, s := range tc.Status.Stages {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", s.Time.UTC().Format(layout), took(since, s.Time.Time), s.Stage, s.Verdict, s.Reason)
		since = s.Time.Time
		if diverged < 0 && !expected[s.Verdict] {
			diverged = i
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	sched := tc.Status.Schedule
	switch {
	case sched.Refusal != "" && tc.Status.Result == nil:
		fmt.Fprintf(out, "refused by session %s: %s (the call settles with that code)\n", tc.Spec.SessionRef.Name, sched.Refusal)
	case len(tc.Status.Stages) == 0 && sched.ExecutionMode == "" && tc.Status.Result == nil:
		// The session starts a call only in model order: the call waits
		// for earlier ones, or for the session itself.
		fmt.Fprintf(out, "waiting: session %s has not started the call (earlier calls first; check the session is Ready)\n", tc.Spec.SessionRef.Name)
	case diverged >= 0:
		s := tc.Status.Stages[diverged]
		fmt.Fprintf(out, "first divergence: %s (%s %s)\n", s.Stage, s.Verdict, s.Reason)
	case tc.Status.Result != nil:
		fmt.Fprintln(out, "no divergence: every boundary passed")
	default:
		fmt.Fprintln(out, "in progress: no divergence so far")
	}
	if ar != nil {
		writeApproval(out, ar)
	}
	if r := tc.Status.Result; r != nil {
		msg := r.Message
		if !wide {
			msg = preview(msg)
		}
		fmt.Fprintf(out, "result: %s %s %s\n", r.Outcome, r.ErrorCode, msg)
	}
	return nil
}

// writeEgress writes the egress proxy's Events on a call: what its body
// reached, where a credential was added, and what was refused, each with
// how many requests it stands for. Only the proxy's own are written.
func writeEgress(out io.Writer, evs []eventsv1.Event) error {
	evs = slices.DeleteFunc(evs, func(e eventsv1.Event) bool { return e.ReportingController != egress.ReportingController })
	if len(evs) == 0 {
		return nil
	}
	slices.SortFunc(evs, func(a, b eventsv1.Event) int { return a.EventTime.Compare(b.EventTime.Time) })
	fmt.Fprintln(out, "egress (the proxy's record of the body's requests):")
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "  FIRST\tCOUNT\tREASON\tNOTE")
	for _, e := range evs {
		count := int32(1)
		if e.Series != nil {
			count = e.Series.Count
		}
		fmt.Fprintf(w, "  %s\t%d\t%s\t%s\n", e.EventTime.UTC().Format("15:04:05"), count, e.Reason, e.Note)
	}
	return w.Flush()
}

// took is the time from since to t, at the records' resolution (seconds);
// "-" when since is unknown or later.
func took(since, t time.Time) string {
	if since.IsZero() || t.Before(since) {
		return "-"
	}
	return t.Sub(since).Round(time.Second).String()
}

// writeApproval says who answered the call's ApprovalRequest, or that
// nobody has.
func writeApproval(out io.Writer, ar *toolgatev1alpha1.ApprovalRequest) {
	d := ar.Spec.Decision
	n, required := ar.ApprovalCount()
	if d == nil && (required > 1 || n > 0) {
		fmt.Fprintf(out, "approval: approvalrequest/%s %s, %d of %d approvals\n", ar.Name, ar.Status.Phase, n, required)
	}
	for _, a := range ar.Spec.Approvals {
		at := ""
		for _, r := range ar.Status.Approvals {
			if r.User == a.User {
				at = " at " + r.RecordedAt.UTC().Format(time.RFC3339)
			}
		}
		note := ""
		if a.Message != "" {
			note = ": " + preview(a.Message)
		}
		fmt.Fprintf(out, "  approved by %s%s%s\n", a.User, at, note)
	}
	if d == nil {
		if required <= 1 && n == 0 {
			fmt.Fprintf(out, "approval: approvalrequest/%s %s, no decision\n", ar.Name, ar.Status.Phase)
		}
		return
	}
	at := ""
	if ar.Status.ResolvedAt != nil {
		at = " at " + ar.Status.ResolvedAt.UTC().Format(time.RFC3339)
	}
	note := ""
	if d.Message != "" {
		note = ": " + preview(d.Message)
	}
	fmt.Fprintf(out, "approval: approvalrequest/%s %s by %s%s%s\n", ar.Name, d.Action, d.DecidedBy, at, note)
}
