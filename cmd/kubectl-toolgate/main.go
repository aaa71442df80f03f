// Command kubectl-toolgate is the kubectl plugin: installed on PATH, it runs
// as `kubectl toolgate approve|deny|trace|transcript`.
package main

import (
	"fmt"
	"os"

	"github.com/toolgate/toolgate/internal/cli"
)

func main() {
	if err := cli.NewCommand(os.Stdout, &cli.Options{}).Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}
