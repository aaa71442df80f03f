package cli

import (
	"fmt"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolgate/toolgate/internal/keys"
)

func rotateCommand(o *Options) *cobra.Command {
	var secret string
	cmd := &cobra.Command{
		Use:   "rotate-channel-key",
		Short: "replace the manager's channel key, keeping the current one as the previous",
		Long: `Replace the key with which the manager hands calls to tool pods, seals
the pods it made and the approval questions it asked. The current key is
kept as the previous one: pods and questions made under it go on working,
so calls in flight survive. The key before it is dropped: pods and
questions of two rotations ago fail cleanly (sandbox_lost,
approval_unavailable), so rotate again only once the calls of the last
rotation have settled.

The managers read the key when they start: restart them afterwards, as the
command prints. Run it in the manager's namespace, as someone who may read,
delete and create its Secrets.`,
		Example: `  kubectl toolgate rotate-channel-key -n toolgate-system
  kubectl -n toolgate-system rollout restart deployment toolgate-controller-manager`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := o.Flags.ToRESTConfig()
			if err != nil {
				return err
			}
			ns, _, err := o.Flags.ToRawKubeConfigLoader().Namespace()
			if err != nil {
				return err
			}
			c, err := client.New(cfg, client.Options{Scheme: o.scheme}) // Secrets: corev1 is in it
			if err != nil {
				return err
			}
			if _, err := keys.Rotate(cmd.Context(), c, ns, secret); err != nil {
				return err
			}
			_, err = fmt.Fprintf(o.Out, "secret/%s rotated in namespace %s: restart the managers to use the new key\n"+
				"  kubectl -n %s rollout restart deployment toolgate-controller-manager\n", secret, ns, ns)
			return err
		},
	}
	cmd.Flags().StringVar(&secret, "secret", "toolgate-channel-key", "The manager's channel key Secret (its --channel-key-secret).")
	return cmd
}
