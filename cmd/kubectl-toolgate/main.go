// Command kubectl-toolgate is the kubectl plugin: installed on PATH, it runs
// as `kubectl toolgate approve|deny|pending|trace|transcript|profile`.
//
// Installed (or linked) as kubectl_complete-toolgate too, it answers
// kubectl's shell completion for the plugin: kubectl runs that executable
// with the words to complete.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/toolgate/toolgate/internal/cli"
	"github.com/toolgate/toolgate/internal/textutil"
)

func main() {
	cmd := cli.NewCommand(genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr})
	if strings.HasPrefix(filepath.Base(os.Args[0]), "kubectl_complete-") {
		cmd.SetArgs(append([]string{cobra.ShellCompRequestCmd}, os.Args[1:]...))
	}
	if err := cmd.Execute(); err != nil {
		// The error may quote what an agent wrote (a name, a reason).
		fmt.Fprintln(textutil.NewTerminalWriter(os.Stderr), "error:", err)
		os.Exit(1)
	}
}
