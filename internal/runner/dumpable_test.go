package runner

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The test binary re-executes itself as a helper process when
// envHelper names a role (see TestNonDumpableHidesProcFromTheSameUser).
const (
	envHelper = "TOOLGATE_TEST_HELPER"
	envSecret = "TOOLGATE_TEST_SECRET"
	envTarget = "TOOLGATE_TEST_TARGET"
	helperUID = 65532 // the tool pod's user (pod.sandboxUID)
)

func TestMain(m *testing.M) {
	switch os.Getenv(envHelper) {
	case "":
		os.Exit(m.Run())
	case "runner", "plain":
		// A stand-in for the runner holding a secret in its environment:
		// the runner's own non-dumpable step, or none.
		if os.Getenv(envHelper) == "runner" {
			if err := makeNonDumpable(); err != nil {
				fmt.Println("step failed:", err)
				os.Exit(1)
			}
		}
		fmt.Println("ready")
		time.Sleep(time.Minute) // killed by the test
		os.Exit(0)
	case "tool":
		// A tool of the same user, reading the runner's environment.
		data, err := os.ReadFile(os.Getenv(envTarget))
		switch {
		case errors.Is(err, os.ErrPermission):
			fmt.Print("denied")
		case err != nil:
			fmt.Print("error: ", err)
		default:
			fmt.Print("read: ", string(bytes.ReplaceAll(data, []byte{0}, []byte{'\n'})))
		}
		os.Exit(0)
	}
	os.Exit(3)
}

// TestNonDumpableHidesProcFromTheSameUser proves the runner's protection
// where it matters: as the non-root tool user. A process of uid 65532 that
// took the runner's non-dumpable step keeps /proc/<pid>/environ (where the
// frame key was) from another process of uid 65532, a tool; without the
// step the tool reads it. Root bypasses these checks, so both processes run
// as 65532, which only root can arrange.
func TestNonDumpableHidesProcFromTheSameUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to start processes as uid 65532 (as root, /proc protections are bypassed, so the check must run as that user)")
	}
	// The test binary, where uid 65532 can execute it.
	dir, err := os.MkdirTemp("", "toolgate-dumpable-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "runner.test")
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	asTool := func(env ...string) *exec.Cmd {
		cmd := exec.Command(bin)
		cmd.Dir = dir
		cmd.Env = append([]string{"PATH=/usr/bin:/bin"}, env...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: helperUID, Gid: helperUID, Groups: []uint32{}}}
		return cmd
	}
	readBy := func(role string) string {
		t.Helper()
		secret := "key-" + hex.EncodeToString([]byte(role+time.Now().String()))
		holder := asTool(envHelper+"="+role, envSecret+"="+secret)
		out, err := holder.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := holder.Start(); err != nil {
			t.Fatalf("starting a process as uid %d: %v", helperUID, err)
		}
		defer func() { _ = holder.Process.Kill(); _ = holder.Wait() }()
		line, err := bufio.NewReader(out).ReadString('\n')
		if strings.TrimSpace(line) != "ready" {
			t.Fatalf("%s helper: %q %v", role, line, err)
		}
		got, err := asTool(envHelper+"=tool", fmt.Sprintf("%s=/proc/%d/environ", envTarget, holder.Process.Pid)).Output()
		if err != nil {
			t.Fatalf("tool helper: %v", err)
		}
		if strings.HasPrefix(string(got), "read: ") && !strings.Contains(string(got), secret) {
			t.Fatalf("read another environment: %q", got)
		}
		return strings.SplitN(string(got), "\n", 2)[0]
	}
	if got := readBy("plain"); !strings.HasPrefix(got, "read: ") {
		t.Fatalf("without the step, a process of the same user should read /proc/<pid>/environ (the control): %q", got)
	}
	if got := readBy("runner"); got != "denied" {
		t.Fatalf("after the non-dumpable step, the same user read /proc/<pid>/environ: %q", got)
	}
}

// TestRunnerFailsClosedWhenItCannotBeNonDumpable: if the non-dumpable step
// fails, the runner never listens for a call (so nothing can be handed over
// or run), writes no termination message and exits non-zero at once with a
// clear line on stderr.
func TestRunnerFailsClosedWhenItCannotBeNonDumpable(t *testing.T) {
	saved := makeNonDumpable
	t.Cleanup(func() { makeNonDumpable = saved })
	makeNonDumpable = func() error { return syscall.EPERM }

	manager, err := NewManagerKey()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvManagerKey, hex.EncodeToString(manager.PublicKey().Bytes()))
	termination := filepath.Join(t.TempDir(), "termination-log")

	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := os.Stderr
	os.Stderr = w
	// A runner that went on would serve until ctx ends and return 0.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	rc := Main(ctx, "127.0.0.1:0", termination)
	os.Stderr = stderr
	_ = w.Close()
	msg, _ := io.ReadAll(r)

	if rc == 0 || ctx.Err() != nil {
		t.Fatalf("Main returned %d (ctx %v); want non-zero at once", rc, ctx.Err())
	}
	if _, err := os.Stat(termination); err == nil {
		t.Fatal("a termination message was written")
	}
	if !strings.Contains(string(msg), "non-dumpable") || !strings.Contains(string(msg), syscall.EPERM.Error()) {
		t.Fatalf("stderr %q does not say why", msg)
	}
}
