package cli

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/pipeline"
)

// Options are the connection settings; Config, when set, replaces the
// kubeconfig (tests).
type Options struct {
	Kubeconfig string
	Context    string
	Namespace  string
	Config     *rest.Config
}

func (o *Options) clients() (client.Client, kubernetes.Interface, string, error) {
	cfg := o.Config
	ns := o.Namespace
	if cfg == nil {
		rules := clientcmd.NewDefaultClientConfigLoadingRules()
		rules.ExplicitPath = o.Kubeconfig
		loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: o.Context})
		var err error
		if cfg, err = loader.ClientConfig(); err != nil {
			return nil, nil, "", err
		}
		if ns == "" {
			if ns, _, err = loader.Namespace(); err != nil {
				return nil, nil, "", err
			}
		}
	}
	if ns == "" {
		ns = "default"
	}
	scheme := runtime.NewScheme()
	if err := toolgatev1alpha1.AddToScheme(scheme); err != nil {
		return nil, nil, "", err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, nil, "", err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	return c, cs, ns, err
}

// NewCommand returns `kubectl toolgate`, its flags bound to o.
func NewCommand(out io.Writer, o *Options) *cobra.Command {
	root := &cobra.Command{
		Use:           "kubectl-toolgate",
		Short:         "Approve, deny and trace toolgate tool calls",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(out)
	root.PersistentFlags().StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "path to the kubeconfig file")
	root.PersistentFlags().StringVar(&o.Context, "context", o.Context, "kubeconfig context to use")
	root.PersistentFlags().StringVarP(&o.Namespace, "namespace", "n", o.Namespace, "namespace of the call")
	root.AddCommand(decideCommand(o, toolgatev1alpha1.DecisionApprove), decideCommand(o, toolgatev1alpha1.DecisionDeny),
		traceCommand(o), transcriptCommand(o))
	return root
}

func decideCommand(o *Options, action toolgatev1alpha1.DecisionAction) *cobra.Command {
	var message string
	verb := strings.ToLower(string(action))
	cmd := &cobra.Command{
		Use:   verb + " CALL",
		Short: verb + " the call's ApprovalRequest, as the current user (once; admission checks who may)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, cs, ns, err := o.clients()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			user, err := whoAmI(ctx, cs)
			if err != nil {
				return err
			}
			ar := &toolgatev1alpha1.ApprovalRequest{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: args[0]}, ar); err != nil {
				return err
			}
			if d := ar.Spec.Decision; d != nil {
				return fmt.Errorf("approvalrequest %s was already decided: %s by %s", ar.Name, d.Action, d.DecidedBy)
			}
			base := ar.DeepCopy()
			ar.Spec.Decision = &toolgatev1alpha1.ApprovalDecision{Action: action, DecidedBy: user, Message: message}
			if err := c.Patch(ctx, ar, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "approvalrequest/%s: %s by %s\n", ar.Name, action, user)
			return err
		},
	}
	cmd.Flags().StringVarP(&message, "message", "m", "", "a note for the record (shown to the model on deny)")
	return cmd
}

// whoAmI asks the API server who the current credentials are.
func whoAmI(ctx context.Context, cs kubernetes.Interface) (string, error) {
	r, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("asking the API server who you are: %w", err)
	}
	return r.Status.UserInfo.Username, nil
}

// expected are the verdicts of a call that goes well; the first record with
// another verdict is where the call diverged.
var expected = map[string]bool{
	pipeline.VerdictAdmitted: true, pipeline.VerdictAllow: true, pipeline.VerdictAsk: true, pipeline.VerdictAllowedOnce: true,
	pipeline.VerdictAbstain: true, pipeline.VerdictDispatched: true, pipeline.VerdictOK: true, pipeline.VerdictAccept: true,
	string(pipeline.Succeeded): true,
}

func traceCommand(o *Options) *cobra.Command {
	return &cobra.Command{
		Use:   "trace CALL",
		Short: "print a call's stage boundaries and the first one that diverged",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, _, ns, err := o.clients()
			if err != nil {
				return err
			}
			tc := &toolgatev1alpha1.ToolCall{}
			if err := c.Get(cmd.Context(), client.ObjectKey{Namespace: ns, Name: args[0]}, tc); err != nil {
				return err
			}
			return writeTrace(cmd.OutOrStdout(), tc)
		},
	}
}

func writeTrace(out io.Writer, tc *toolgatev1alpha1.ToolCall) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "call %s (tool %s, turn %d, index %d, phase %s)\n", tc.Name, tc.Spec.Tool, tc.Spec.Turn, tc.Spec.Index, tc.Status.Phase)
	fmt.Fprintln(w, "TIME\tSTAGE\tVERDICT\tREASON")
	diverged := -1
	for i, s := range tc.Status.Stages {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", s.Time.UTC().Format("15:04:05"), s.Stage, s.Verdict, s.Reason)
		if diverged < 0 && !expected[s.Verdict] {
			diverged = i
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	switch {
	case diverged >= 0:
		s := tc.Status.Stages[diverged]
		fmt.Fprintf(out, "first divergence: %s (%s %s)\n", s.Stage, s.Verdict, s.Reason)
	case tc.Status.Result != nil:
		fmt.Fprintln(out, "no divergence: every boundary passed")
	default:
		fmt.Fprintln(out, "in progress: no divergence so far")
	}
	if r := tc.Status.Result; r != nil {
		fmt.Fprintf(out, "result: %s %s %s\n", r.Outcome, r.ErrorCode, r.Message)
	}
	return nil
}

func transcriptCommand(o *Options) *cobra.Command {
	return &cobra.Command{
		Use:   "transcript SESSION",
		Short: "print a session's committed results in model order",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, _, ns, err := o.clients()
			if err != nil {
				return err
			}
			list := &toolgatev1alpha1.ToolCallList{}
			if err := c.List(cmd.Context(), list, client.InNamespace(ns)); err != nil {
				return err
			}
			var calls []toolgatev1alpha1.ToolCall
			for _, tc := range list.Items {
				if tc.Spec.SessionRef.Name == args[0] && tc.Status.Schedule.CommitSequence != nil {
					calls = append(calls, tc)
				}
			}
			sort.Slice(calls, func(i, j int) bool {
				return *calls[i].Status.Schedule.CommitSequence < *calls[j].Status.Schedule.CommitSequence
			})
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "SEQ\tTURN\tINDEX\tTOOL\tOUTCOME\tCONTENT")
			for _, tc := range calls {
				r := tc.Status.Result
				content := strings.ReplaceAll(r.Content, "\n", "⏎")
				if len(content) > 60 {
					content = content[:60] + "…"
				}
				fmt.Fprintf(w, "%d\t%d\t%d\t%s\t%s\t%s\n", *tc.Status.Schedule.CommitSequence, tc.Spec.Turn, tc.Spec.Index, tc.Spec.Tool, r.Outcome, content)
			}
			return w.Flush()
		},
	}
}
