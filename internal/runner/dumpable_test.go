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
	if len(os.Args) > 1 && os.Args[1] == "call" {
		// The test binary stands in for toolgate-runner in a body's script.
		os.Exit(CallMain(os.Args[2:], os.Stdout, os.Stderr))
	}
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
	case "workspace":
		// The runner as the tool's user, handed a writable-mode call on the
		// workspace envTarget names.
		h, _, _ := Execute(context.Background(), Spec{Workspace: os.Getenv(envTarget), Writable: true, Argv: []string{"/bin/sh", "-c", "touch ran"}}, nil, time.Second)
		fmt.Printf("%s|%s", h.Code, h.Error)
		os.Exit(0)
	case "first":
		// The serving runner as the first process of a PID namespace,
		// handed a body that leaves a descendant outside its process
		// group; the descendant would write envTarget/escaped a second
		// later. What it wrote is checked after that second.
		dir := os.Getenv(envTarget)
		script := `setsid sh -c 'sleep 1; echo escaped > "$0/escaped"' "$TOOLGATE_WORKSPACE" </dev/null >/dev/null 2>&1 & sleep 0.3; echo started`
		h, out, _ := executeFirst(context.Background(), Spec{Workspace: dir, Argv: []string{"/bin/sh", "-c", script}}, nil, Calls{})
		time.Sleep(2 * time.Second)
		_, err := os.Stat(filepath.Join(dir, "escaped"))
		fmt.Printf("pid %d exit %d out %q escaped %v", os.Getpid(), h.ExitCode, out, err == nil)
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
	bin := helperBinary(t)
	dir := filepath.Dir(bin)
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

// helperBinary copies the test binary where uid 65532 can execute it.
func helperBinary(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "toolgate-helper-")
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
	return bin
}

// TestAnUnwritableWorkspaceIsNamed: a workspace mounted writable that the
// tool's user cannot write (a root-owned volume) fails the call with
// sandbox_unavailable naming the cause, and nothing runs; a writable one
// runs the tool. As root every directory is writable, so the check runs as
// uid 65532, which only root can arrange.
func TestAnUnwritableWorkspaceIsNamed(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to start a process as uid 65532")
	}
	bin := helperBinary(t)
	for _, tc := range []struct {
		mode     os.FileMode
		wantCode string
	}{{0o755, "sandbox_unavailable"}, {0o777, ""}} {
		ws, err := os.MkdirTemp("", "toolgate-ws-")
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = os.RemoveAll(ws) }()
		if err := os.Chmod(ws, tc.mode); err != nil { // owned by root
			t.Fatal(err)
		}
		cmd := exec.Command(bin)
		cmd.Dir = "/"
		cmd.Env = []string{"PATH=/usr/bin:/bin", envHelper + "=workspace", envTarget + "=" + ws}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: helperUID, Gid: helperUID, Groups: []uint32{}}}
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("helper: %v", err)
		}
		code, msg, _ := strings.Cut(string(out), "|")
		if code != tc.wantCode {
			t.Fatalf("mode %o: code %q (%s), want %q", tc.mode, code, msg, tc.wantCode)
		}
		_, statErr := os.Stat(filepath.Join(ws, "ran"))
		if ran := statErr == nil; ran != (tc.wantCode == "") {
			t.Fatalf("mode %o: the tool ran: %v", tc.mode, ran)
		}
		if tc.wantCode != "" && !strings.Contains(msg, "cannot write it") {
			t.Fatalf("the message does not name the cause: %s", msg)
		}
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

// TestRunnerStopsWhatLeftTheBodysGroup: in a pod, the serving runner is
// the first process of the tool container's PID namespace; a descendant
// the body detached with setsid (out of reach of the group kill) is
// stopped too before the frame is sent, so nothing of the body runs once
// its call settles. Only root can make a PID namespace.
func TestRunnerStopsWhatLeftTheBodysGroup(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to start the runner as the first process of a new PID namespace")
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envHelper+"=first", envTarget+"="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if got := string(out); !strings.HasPrefix(got, `pid 1 exit 0 out "started\n"`) || !strings.HasSuffix(got, "escaped false") {
		t.Fatalf("helper: %s", got)
	}
}
