package cli

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
)

func profileCommand(o *Options) *cobra.Command {
	var out *output
	cmd := &cobra.Command{
		Use:   "profile NAME",
		Short: "print a ToolProfile as resolved: readiness, preset, sandbox, approval, tools and rules",
		Long: `Print what toolgate made of a ToolProfile (its status): whether it is Ready
and why not (and its warnings), the permission preset, the sandbox as
enforced (provider, Full or Partial enforcement and why), the approval
provider, who approves and how long a question waits, each compiled tool
with what its body may reach, and the rules a call meets, in order:
pre-execute rules, guards and post-execute rules.`,
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
		fmt.Fprintf(w, "approval:   %s, available %t, approvers %s, waits %ds\n", a.Provider, a.Available,
			approvers(p.Spec.Approval.Approvers), p.Spec.Approval.TimeoutSeconds)
	}
	fmt.Fprintf(w, "tools:      %d\n", st.ToolCount)
	if len(st.Tools) > 0 {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		head := "TOOL\tRUNTIME\tCLASSIFIED\tIDEMPOTENT\tREACHES"
		if wide {
			head += "\tDESCRIPTION"
		}
		fmt.Fprintln(tw, head)
		desc := map[string]string{}
		declared, _ := p.DeclaredTools()
		for _, t := range declared {
			desc[t.Name] = t.Description
		}
		for _, t := range st.Tools {
			reaches := t.Network
			if len(t.EgressHosts) > 0 {
				reaches += ": " + strings.Join(t.EgressHosts, ", ")
			}
			fmt.Fprintf(tw, "%s\t%s\t%t\t%t\t%s", t.Name, t.Runtime, t.ConcurrencyClassified, t.Idempotent, reaches)
			if wide {
				fmt.Fprintf(tw, "\t%s", preview(desc[t.Name]))
			}
			fmt.Fprintln(tw)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return writeRules(w, &p.Spec)
}

// writeRules prints the rules a call meets, in the order it meets them:
// the first deciding pre-execute rule wins, then every guard, then the
// post-execute rules on a success.
func writeRules(w io.Writer, spec *toolgatev1alpha1.ToolProfileSpec) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "pre-execute rules: %d (the first that matches decides; else the preset)\n", len(spec.PreExecute))
	for _, r := range spec.PreExecute {
		line := fmt.Sprintf("  %s\t%s\ttools %s\twhen %s", r.Name, r.Action, toolsOf(r.Tools), orAlways(r.When))
		if r.Action == toolgatev1alpha1.ActionAsk && r.Approvers != nil {
			line += "\tapprovers " + approvers(r.Approvers)
		}
		fmt.Fprintln(tw, line)
	}
	fmt.Fprintf(tw, "guards: %d (any that denies denies)\n", len(spec.Guards))
	for _, g := range spec.Guards {
		fmt.Fprintf(tw, "  %s\tdeny\ttools %s\twhen %s\n", g.Name, toolsOf(g.Tools), g.Deny)
	}
	fmt.Fprintf(tw, "post-execute rules: %d (on successes, in order)\n", len(spec.PostExecute))
	for _, r := range spec.PostExecute {
		what := string(r.Action)
		if len(r.Redact) > 0 {
			what += fmt.Sprintf(", redacts %d patterns", len(r.Redact))
		}
		if r.ReplaceValue != "" || r.ReplaceContent != "" {
			what += ", replaces"
		}
		fmt.Fprintf(tw, "  %s\t%s\ttools %s\twhen %s\n", r.Name, what, toolsOf(r.Tools), orAlways(r.When))
	}
	return tw.Flush()
}

// approvers says who may answer a question.
func approvers(a *toolgatev1alpha1.Approvers) string {
	if a == nil || (len(a.Users) == 0 && len(a.Groups) == 0) {
		n := int32(1)
		if a != nil && a.Required > 0 {
			n = a.Required
		}
		return fmt.Sprintf("%d of anyone allowed the verb approve", n)
	}
	var who []string
	for _, u := range a.Users {
		who = append(who, "user "+u)
	}
	for _, g := range a.Groups {
		who = append(who, "group "+g)
	}
	return fmt.Sprintf("%d of %s", max(a.Required, 1), strings.Join(who, ", "))
}

func toolsOf(tools []string) string {
	if len(tools) == 0 {
		return "all"
	}
	return strings.Join(tools, ",")
}

func orAlways(expr string) string {
	if expr == "" {
		return "always"
	}
	return expr
}
