package cli

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/textutil"
)

// Options hold the connection flags shared by every command.
type Options struct {
	Flags *genericclioptions.ConfigFlags
	genericiooptions.IOStreams
	// Interactive says whether a person reads Out and answers on In (nil:
	// whether both are a terminal).
	Interactive func() bool
	scheme      *runtime.Scheme
}

// newScheme holds every type the commands read.
func newScheme() *runtime.Scheme {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		toolgatev1alpha1.AddToScheme,
		corev1.AddToScheme,   // Namespaces, for pending -A as an approver of some namespaces only
		eventsv1.AddToScheme, // Events, for the egress proxy's record in trace
	} {
		if err := add(scheme); err != nil {
			panic(err) // a static registration; cannot fail at run time
		}
	}
	return scheme
}

// NewCommand returns `kubectl toolgate` with its subcommands, writing to
// streams.
func NewCommand(streams genericiooptions.IOStreams) *cobra.Command {
	scheme := newScheme()
	terminal := isTerminal(streams.In) && isTerminal(streams.Out)
	// Everything printed is made safe for a terminal: agents and tools
	// wrote much of it (arguments, results, reasons, messages).
	streams.Out, streams.ErrOut = textutil.NewTerminalWriter(streams.Out), textutil.NewTerminalWriter(streams.ErrOut)
	o := &Options{Flags: genericclioptions.NewConfigFlags(true), IOStreams: streams, scheme: scheme,
		Interactive: func() bool { return terminal }}
	root := &cobra.Command{
		Use:   "kubectl-toolgate",
		Short: "Approve, deny and inspect toolgate tool calls",
		Long: `kubectl toolgate approves or denies tool calls waiting for a person, lists
what is waiting, and explains calls, sessions and profiles.

Every command acts as the current kubeconfig user (or --as): the API server
decides what that user may read and decide.`,
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl toolgate"},
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	root.SetIn(streams.In)
	o.Flags.AddFlags(root.PersistentFlags())
	_ = root.RegisterFlagCompletionFunc("namespace", o.completeNamespaces)
	root.AddCommand(
		decideCommand(o, toolgatev1alpha1.DecisionApprove),
		decideCommand(o, toolgatev1alpha1.DecisionDeny),
		pendingCommand(o),
		traceCommand(o),
		transcriptCommand(o),
		profileCommand(o),
		checkCommand(o),
		rotateCommand(o),
	)
	return root
}

// isTerminal reports whether s is a terminal.
func isTerminal(s any) bool {
	f, ok := s.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// client returns a client for toolgate's kinds and the namespace the flags
// (or the kubeconfig) select.
func (o *Options) client() (client.Client, string, error) {
	cfg, err := o.Flags.ToRESTConfig()
	if err != nil {
		return nil, "", err
	}
	ns, _, err := o.Flags.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return nil, "", err
	}
	c, err := client.New(cfg, client.Options{Scheme: o.scheme})
	return c, ns, err
}

// whoAmI asks the API server who the current credentials (after --as) are.
func (o *Options) whoAmI(ctx context.Context) (string, error) {
	cfg, err := o.Flags.ToRESTConfig()
	if err != nil {
		return "", err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "", err
	}
	r, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("asking the API server who you are: %w", err)
	}
	return r.Status.UserInfo.Username, nil
}

// get reads one object, naming the kind and namespace when it is missing.
func get(ctx context.Context, c client.Client, ns, name string, obj client.Object, kind string) error {
	err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, obj)
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("%s %q not found in namespace %q", kind, name, ns)
	}
	return err
}

// output is a command's -o flag: a table (default or wide) the command
// writes itself, or any printer cli-runtime offers.
type output struct {
	flags  *genericclioptions.PrintFlags
	scheme *runtime.Scheme
}

func addOutput(cmd *cobra.Command, o *Options) *output {
	p := genericclioptions.NewPrintFlags("").WithTypeSetter(o.scheme)
	p.AddFlags(cmd)
	formats := append([]string{"wide"}, p.AllowedFormats()...)
	cmd.Flags().Lookup("output").Usage = "Output format. One of: (" + strings.Join(formats, ", ") + "). The default is a table."
	_ = cmd.RegisterFlagCompletionFunc("output", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return formats, cobra.ShellCompDirectiveNoFileComp
	})
	return &output{flags: p, scheme: o.scheme}
}

// table reports whether the command writes its own table, and whether wide.
func (p *output) table() (bool, bool) {
	f := *p.flags.OutputFormat
	return f == "" || f == "wide", f == "wide"
}

// print writes obj with the selected printer; kinds of the scheme get
// their apiVersion and kind set first.
func (p *output) print(obj runtime.Object, o *Options) error {
	pr, err := p.flags.ToPrinter()
	if err != nil {
		return err
	}
	if *p.flags.OutputFormat == "name" && meta.IsListType(obj) {
		// The name printer takes one object at a time: a name per item,
		// in the list's order.
		items, err := meta.ExtractList(obj)
		if err != nil {
			return err
		}
		for _, item := range items {
			if err := pr.PrintObj(item, o.Out); err != nil {
				return err
			}
		}
		return nil
	}
	return pr.PrintObj(obj, o.Out)
}
