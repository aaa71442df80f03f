package cli

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
)

func profileCommand(o *Options) *cobra.Command {
	var out *output
	cmd := &cobra.Command{
		Use:   "profile NAME",
		Short: "print a ToolProfile as resolved: readiness, preset, sandbox, approval, tools",
		Long: `Print what toolgate made of a ToolProfile (its status): whether it is Ready
and why not, the permission preset, the sandbox as enforced (provider, Full
or Partial enforcement and why), the approval provider, and each compiled
tool.`,
		Example: `  # the resolved profile "coding"
  kubectl toolgate profile coding -n agents

  # the whole object, spec and status
  kubectl toolgate profile coding -n agents -o yaml`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: o.completeNames(&toolgatev1alpha1.ToolProfileList{}),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := o.client()
			if err != nil {
				return err
			}
			p := &toolgatev1alpha1.ToolProfile{}
			if err := get(cmd.Context(), c, ns, args[0], p, "toolprofile"); err != nil {
				return err
			}
			if isTable, wide := out.table(); isTable {
				return writeProfile(o.Out, p, wide)
			}
			return out.print(p, o)
		},
	}
	out = addOutput(cmd, o)
	return cmd
}

func writeProfile(w io.Writer, p *toolgatev1alpha1.ToolProfile, wide bool) error {
	st := p.Status
	fmt.Fprintf(w, "profile %s/%s (generation %d, observed %d)\n", p.Namespace, p.Name, p.Generation, st.ObservedGeneration)
	if c := meta.FindStatusCondition(st.Conditions, "Ready"); c != nil {
		fmt.Fprintf(w, "ready:      %s %s %s\n", c.Status, c.Reason, c.Message)
	} else {
		fmt.Fprintln(w, "ready:      unknown (not reconciled yet)")
	}
	fmt.Fprintf(w, "preset:     %s\n", st.PermissionPreset)
	if s := st.Sandbox; s != nil {
		fmt.Fprintf(w, "sandbox:    %s, provider %s, enforcement %s", s.Mode, s.Provider, s.Enforcement)
		if s.EnforcementReason != "" {
			fmt.Fprintf(w, " (%s)", s.EnforcementReason)
		}
		fmt.Fprintf(w, ", workspace %s\n", s.WorkspaceRoot)
	}
	if a := st.Approval; a != nil {
		fmt.Fprintf(w, "approval:   %s, available %t\n", a.Provider, a.Available)
	}
	fmt.Fprintf(w, "tools:      %d\n", st.ToolCount)
	if len(st.Tools) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if wide {
		fmt.Fprintln(tw, "TOOL\tRUNTIME\tCLASSIFIED\tIDEMPOTENT\tDESCRIPTION")
	} else {
		fmt.Fprintln(tw, "TOOL\tRUNTIME\tCLASSIFIED\tIDEMPOTENT")
	}
	desc := map[string]string{}
	for _, t := range p.Spec.Tools {
		desc[t.Name] = t.Description
	}
	for _, t := range st.Tools {
		if wide {
			fmt.Fprintf(tw, "%s\t%s\t%t\t%t\t%s\n", t.Name, t.Runtime, t.ConcurrencyClassified, t.Idempotent, preview(desc[t.Name]))
		} else {
			fmt.Fprintf(tw, "%s\t%s\t%t\t%t\n", t.Name, t.Runtime, t.ConcurrencyClassified, t.Idempotent)
		}
	}
	return tw.Flush()
}
