package cli

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/profile"
)

// errInvalid makes the command exit non-zero once every profile was told.
var errInvalid = errors.New("a profile is not valid")

func checkCommand(o *Options) *cobra.Command {
	var files []string
	cmd := &cobra.Command{
		Use:   "check -f FILE",
		Short: "check ToolProfiles before applying them: the API's validation, then toolgate's compiler",
		Long: `Check the ToolProfiles of a file the way applying them would, without
changing anything: the API server validates and defaults each one (a
server-side dry run, so it needs the permission to create ToolProfiles in
the namespace), then toolgate compiles it as the manager will: its schemas,
its CEL rules and guards (type-checked, and each field they read checked
against the schemas of the tools they apply to), its templates. Applying a
profile that does not compile succeeds, and the profile is then not Ready:
run this first, in CI or before kubectl apply. Exits 1 when a profile is not
valid; warnings (a field an open schema does not declare) do not fail it.`,
		Example: `  kubectl toolgate check -f profile.yaml -n agents && kubectl apply -f profile.yaml -n agents
  cat profiles/*.yaml | kubectl toolgate check -f - -n agents`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, ns, err := o.client()
			if err != nil {
				return err
			}
			profiles, err := readProfiles(files, o.In)
			if err != nil {
				return err
			}
			if len(profiles) == 0 {
				return fmt.Errorf("no ToolProfile in %v", files)
			}
			invalid := false
			for _, p := range profiles {
				if !checkProfile(cmd, c, ns, p, o.Out) {
					invalid = true
				}
			}
			if invalid {
				return errInvalid
			}
			return nil
		},
	}
	cmd.Flags().StringArrayVarP(&files, "filename", "f", nil, "a file of ToolProfiles (YAML or JSON, several documents allowed; - for stdin)")
	_ = cmd.MarkFlagRequired("filename")
	return cmd
}

// checkProfile dry-runs the creation of the profile as written (so that
// the API server defaults and validates it as applying it would, unknown
// fields refused) and compiles what comes back; it prints the verdict and
// reports whether the profile is valid.
func checkProfile(cmd *cobra.Command, c client.Client, ns string, u *unstructured.Unstructured, out io.Writer) bool {
	name := u.GetName()
	if u.GetNamespace() == "" {
		u.SetNamespace(ns)
	}
	// A dry run under a generated name: the profile may exist already.
	u.SetGenerateName(name + "-")
	u.SetName("")
	u.SetResourceVersion("")
	if err := c.Create(cmd.Context(), u, client.DryRunAll, client.FieldValidation("Strict")); err != nil {
		fmt.Fprintf(out, "toolprofile/%s: refused by the API server: %v\n", name, err)
		return false
	}
	p := &toolgatev1alpha1.ToolProfile{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, p); err != nil {
		fmt.Fprintf(out, "toolprofile/%s: %v\n", name, err)
		return false
	}
	compiled, err := profile.Compile(p)
	if err != nil {
		var cerr *profile.Error
		if errors.As(err, &cerr) {
			fmt.Fprintf(out, "toolprofile/%s: does not compile (%s): %s\n", name, cerr.Reason, cerr.Message)
		} else {
			fmt.Fprintf(out, "toolprofile/%s: does not compile: %v\n", name, err)
		}
		return false
	}
	defer compiled.Dispose()
	fmt.Fprintf(out, "toolprofile/%s: compiles (%d tools)\n", name, len(compiled.Tools))
	for _, w := range compiled.Warnings {
		fmt.Fprintf(out, "  warning: %s\n", w)
	}
	return true
}

// readProfiles reads the ToolProfiles of files ("-" is in), as written;
// documents of other kinds are skipped.
func readProfiles(files []string, in io.Reader) ([]*unstructured.Unstructured, error) {
	var profiles []*unstructured.Unstructured
	for _, f := range files {
		var data []byte
		var err error
		if f == "-" {
			data, err = io.ReadAll(in)
		} else {
			data, err = os.ReadFile(f)
		}
		if err != nil {
			return nil, err
		}
		docs := yaml.NewYAMLOrJSONDecoder(bufio.NewReader(bytes.NewReader(data)), 4096)
		for i := 1; ; i++ {
			raw := map[string]any{}
			if err := docs.Decode(&raw); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				return nil, fmt.Errorf("%s: document %d: %w", f, i, err)
			}
			if raw["kind"] != "ToolProfile" {
				continue
			}
			profiles = append(profiles, &unstructured.Unstructured{Object: raw})
		}
	}
	return profiles, nil
}
