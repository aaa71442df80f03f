package cli

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
)

func decideCommand(o *Options, action toolgatev1alpha1.DecisionAction) *cobra.Command {
	var message string
	verb := strings.ToLower(string(action))
	cmd := &cobra.Command{
		Use:   verb + " NAME",
		Short: verb + " a call's ApprovalRequest as the current user",
		Long: string(action) + ` the ApprovalRequest NAME (it has its call's name) as the current user,
once. The API server's admission policy decides who may: never the call's
requester, only a user allowed the verb approve on approvalrequests, and,
where the request names approvers, one of the users or a member of one of
the groups. A request that needs several approvals records this approval
among them (approve) or is decided (deny). A request already decided,
expired or cancelled is refused.`,
		Example: fmt.Sprintf(`  # %[1]s the call "write-notes" in namespace agents
  kubectl toolgate %[1]s write-notes -n agents -m "reviewed the diff"

  # %[1]s as another user (impersonation needs the verb impersonate)
  kubectl toolgate %[1]s write-notes -n agents --as alice`, verb),
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: o.completeNames(&toolgatev1alpha1.ApprovalRequestList{}),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := o.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			user, err := o.whoAmI(ctx)
			if err != nil {
				return err
			}
			ar, err := decide(ctx, c, ns, args[0], toolgatev1alpha1.ApprovalDecision{Action: action, DecidedBy: user, Message: message}, time.Now())
			if err != nil {
				return err
			}
			_, err = io.WriteString(o.Out, decidedLine(ar, user, action, message))
			return err
		},
	}
	cmd.Flags().StringVarP(&message, "message", "m", "", "a note for the record (shown to the model on deny, and on approve where the request relays approval messages)")
	return cmd
}

// decidedLine says what the command did, and where an approval's message
// goes to the model, that it does.
func decidedLine(ar *toolgatev1alpha1.ApprovalRequest, user string, action toolgatev1alpha1.DecisionAction, message string) string {
	line := fmt.Sprintf("approvalrequest/%s: %s by %s", ar.Name, action, user)
	if n, required := ar.ApprovalCount(); required > 1 && ar.Spec.Decision == nil {
		line = fmt.Sprintf("approvalrequest/%s: approved by %s, %d of %d approvals", ar.Name, user, n, required)
	}
	if message != "" && action == toolgatev1alpha1.DecisionApprove && ar.Spec.RelayApprovalMessages {
		line += " (the message reaches the model with the call's result)"
	}
	return line + "\n"
}

// decide sets the request's decision once, reading it again when someone
// else wrote it in between (a conflict), and refuses a request that can no
// longer be decided.
func decide(ctx context.Context, c client.Client, ns, name string, d toolgatev1alpha1.ApprovalDecision, now time.Time) (*toolgatev1alpha1.ApprovalRequest, error) {
	ar := &toolgatev1alpha1.ApprovalRequest{}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := get(ctx, c, ns, name, ar, "approvalrequest"); err != nil {
			return err
		}
		if err := decidable(ar, now); err != nil {
			return err
		}
		if _, required := ar.ApprovalCount(); d.Action == toolgatev1alpha1.DecisionApprove && required > 1 {
			// A request that needs several approvals takes this one as
			// one of them; only a denial is a decision.
			if slices.ContainsFunc(ar.Spec.Approvals, func(a toolgatev1alpha1.Approval) bool { return a.User == d.DecidedBy }) {
				return fmt.Errorf("approvalrequest %s already holds your approval; it needs %d from distinct approvers", ar.Name, required)
			}
			ar.Spec.Approvals = append(ar.Spec.Approvals, toolgatev1alpha1.Approval{User: d.DecidedBy, Message: d.Message})
			return c.Update(ctx, ar)
		}
		ar.Spec.Decision = &d
		return c.Update(ctx, ar)
	})
	return ar, err
}

// decidable says why a request cannot take a decision, or nil.
func decidable(ar *toolgatev1alpha1.ApprovalRequest, now time.Time) error {
	if d := ar.Spec.Decision; d != nil {
		return fmt.Errorf("approvalrequest %s was already decided: %s by %s", ar.Name, d.Action, d.DecidedBy)
	}
	deadline := ar.Spec.Deadline.UTC().Format(time.RFC3339)
	switch ar.Status.Phase {
	case toolgatev1alpha1.ApprovalExpired:
		return fmt.Errorf("approvalrequest %s expired undecided at %s; its call failed closed", ar.Name, deadline)
	case toolgatev1alpha1.ApprovalCancelled:
		return fmt.Errorf("approvalrequest %s was cancelled (its call settled without a decision)", ar.Name)
	case toolgatev1alpha1.ApprovalApproved, toolgatev1alpha1.ApprovalDenied:
		return fmt.Errorf("approvalrequest %s was already decided: %s", ar.Name, ar.Status.Phase)
	}
	if !now.Before(ar.Spec.Deadline.Time) {
		return fmt.Errorf("approvalrequest %s expired undecided at %s; its call fails closed", ar.Name, deadline)
	}
	return nil
}
