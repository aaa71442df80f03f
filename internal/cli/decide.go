package cli

import (
	"bufio"
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
	var message, question string
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
expired or cancelled is refused.

The decision names the question it answers (the request's UID and question
seal): a call deleted and submitted again under the same name is a new
question, and no answer to its predecessor decides it. --question names the
question you read (kubectl toolgate pending shows its ID, a notification's
command carries it). Without it, approve shows the question in a terminal
and asks before it approves what it showed; outside a terminal it refuses.
A deny without --question denies the question it reads (a denial fails
closed).`,
		Example: fmt.Sprintf(`  # %[1]s the call "write-notes" in namespace agents, the question you read
  kubectl toolgate %[1]s write-notes -n agents --question 3f9a1c2b7d4e -m "reviewed the diff"

  # read the question in a terminal, then answer it
  kubectl toolgate %[1]s write-notes -n agents

  # %[1]s as another user (impersonation needs the verb impersonate)
  kubectl toolgate %[1]s write-notes -n agents --as alice --question 3f9a1c2b7d4e`, verb),
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
			read, err := o.questionRead(ctx, c, ns, args[0], question, action)
			if err != nil {
				return err
			}
			ar, err := decide(ctx, c, read, toolgatev1alpha1.ApprovalDecision{Action: action, DecidedBy: user, Message: message}, time.Now())
			if err != nil {
				return err
			}
			_, err = io.WriteString(o.Out, decidedLine(ar, user, action, message))
			return err
		},
	}
	cmd.Flags().StringVarP(&message, "message", "m", "", "a note for the record (shown to the model on deny, and on approve where the request relays approval messages)")
	cmd.Flags().StringVar(&question, "question", "", fmt.Sprintf("the ID of the question you read (at least its first %d characters, as kubectl toolgate pending shows it): the request must still ask it", toolgatev1alpha1.QuestionIDShort))
	return cmd
}

// questionRead is the request NAME as the person answering read it: the
// one whose question ID begins with question, or, without one, the one
// shown in the terminal and confirmed (approve) or read now (deny).
func (o *Options) questionRead(ctx context.Context, c client.Client, ns, name, question string, action toolgatev1alpha1.DecisionAction) (*toolgatev1alpha1.ApprovalRequest, error) {
	ar := &toolgatev1alpha1.ApprovalRequest{}
	if err := get(ctx, c, ns, name, ar, "approvalrequest"); err != nil {
		return nil, err
	}
	if err := decidable(ar, time.Now()); err != nil {
		return nil, err
	}
	id := ar.QuestionID()
	switch {
	case question != "":
		if len(question) < toolgatev1alpha1.QuestionIDShort {
			return nil, fmt.Errorf("--question %q is too short: give at least the %d characters kubectl toolgate pending shows", question, toolgatev1alpha1.QuestionIDShort)
		}
		if id == "" || !strings.HasPrefix(id, question) {
			return nil, fmt.Errorf("approvalrequest %s asks question %s, not %s, the one you named: its call was submitted again under the same name (perhaps with other arguments); read it again (kubectl toolgate pending -o wide) before you answer",
				ar.Name, toolgatev1alpha1.ShortQuestionID(id), question)
		}
		return ar, nil
	case action == toolgatev1alpha1.DecisionDeny:
		return ar, nil
	case !o.interactive():
		return nil, fmt.Errorf("approving needs the question you read: add --question %s after reading it (kubectl toolgate pending -o wide shows each question and its ID), or run this in a terminal to see the question and confirm",
			toolgatev1alpha1.ShortQuestionID(id))
	}
	writeQuestion(o.Out, ar)
	fmt.Fprintf(o.Out, "Approve this call? [y/N] ")
	answer, _ := bufio.NewReader(o.In).ReadString('\n')
	if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
		return nil, fmt.Errorf("not approved: approvalrequest %s is unchanged", ar.Name)
	}
	return ar, nil
}

// interactive reports whether a person reads Out and answers on In.
func (o *Options) interactive() bool { return o.Interactive != nil && o.Interactive() }

// writeQuestion shows what an approver decides: everything the request
// froze (Out makes the agent's text safe for a terminal).
func writeQuestion(w io.Writer, ar *toolgatev1alpha1.ApprovalRequest) {
	n, required := ar.ApprovalCount()
	fmt.Fprintf(w, "approvalrequest/%s (question %s)\n", ar.Name, toolgatev1alpha1.ShortQuestionID(ar.QuestionID()))
	fmt.Fprintf(w, "  tool:       %s\n", ar.Spec.Tool)
	fmt.Fprintf(w, "  requester:  %s (session %s)\n", ar.Spec.Requester, sessionOf(ar))
	fmt.Fprintf(w, "  reason:     %s\n", ar.Spec.Reason)
	fmt.Fprintf(w, "  deadline:   %s\n", ar.Spec.Deadline.UTC().Format(time.RFC3339))
	fmt.Fprintf(w, "  approvals:  %d of %d\n", n, required)
	fmt.Fprintf(w, "  arguments:  %s\n", ar.Spec.ArgumentsPreview)
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

// decide sets the decision once on the request read, reading it again
// when someone else wrote it in between (a conflict): the answer binds to
// that request (its UID and question), so one asked again meanwhile under
// the same name is refused here, and by admission if it is replaced after
// this read.
func decide(ctx context.Context, c client.Client, read *toolgatev1alpha1.ApprovalRequest, d toolgatev1alpha1.ApprovalDecision, now time.Time) (*toolgatev1alpha1.ApprovalRequest, error) {
	ar := &toolgatev1alpha1.ApprovalRequest{}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := get(ctx, c, read.Namespace, read.Name, ar, "approvalrequest"); err != nil {
			return err
		}
		if ar.UID != read.UID || ar.QuestionID() != read.QuestionID() {
			return fmt.Errorf("approvalrequest %s was asked again since you read it (question %s, you read %s): read it again before you answer",
				ar.Name, toolgatev1alpha1.ShortQuestionID(ar.QuestionID()), toolgatev1alpha1.ShortQuestionID(read.QuestionID()))
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
			ar.Spec.Approvals = append(ar.Spec.Approvals, ar.ApprovalOf(d.DecidedBy, d.Message))
			return c.Update(ctx, ar)
		}
		ar.Spec.Decision = ar.DecisionOf(d.Action, d.DecidedBy, d.Message)
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
