// Command toolgate-runner is the entrypoint of every tool pod. An init
// container runs "toolgate-runner copy /toolgate/bin/toolgate-runner" to
// place it in a shared volume (so any tool image works); the tool container
// then runs "/toolgate/bin/toolgate-runner serve", which waits for the
// manager to hand it its call. See internal/runner.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/toolgate/toolgate/internal/runner"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: toolgate-runner copy DEST | serve | pause | call TOOL [ARGUMENTS]")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "copy":
		if len(os.Args) != 3 {
			fmt.Fprintln(os.Stderr, "usage: toolgate-runner copy DEST")
			os.Exit(2)
		}
		if err := copySelf(os.Args[2]); err != nil {
			fmt.Fprintln(os.Stderr, "toolgate-runner: copy failed:", err)
			os.Exit(1)
		}
	case "pause":
		// The pod sandbox ("pause") image of the local cluster: hold the
		// pod's namespaces until asked to stop.
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
		defer stop()
		<-ctx.Done()
	case "call":
		// A body's sub-call (Code Mode), through the runner serving it.
		os.Exit(runner.CallMain(os.Args[2:], os.Stdout, os.Stderr))
	case "serve":
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
		defer stop()
		os.Exit(runner.Main(ctx, fmt.Sprintf(":%d", runner.Port), "/dev/termination-log"))
	default:
		fmt.Fprintln(os.Stderr, "toolgate-runner: unknown command", os.Args[1])
		os.Exit(2)
	}
}

// copySelf copies this binary to dest, executable by everyone.
func copySelf(dest string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	in, err := os.Open(self)
	if err != nil {
		return err
	}
	defer func() { _ = in.Close() }()
	tmp := dest + ".tmp"
	out, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, dest)
}
