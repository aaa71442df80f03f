package process

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/lifecycle"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/providers/sandbox"
)

func job(key string, argv []string, args string) sandbox.Job {
	return sandbox.Job{
		Key: key, Owner: types.NamespacedName{Namespace: "ns", Name: "c"}, Arguments: args,
		Tool:    &toolgatev1alpha1.ToolDefinition{Name: "t", Container: &toolgatev1alpha1.ContainerRuntime{Command: argv, MaxOutputBytes: 1024}},
		Session: sandbox.Session{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "s"}},
	}
}

// wait polls the provider until the attempt ends.
func wait(t *testing.T, p *Provider, j sandbox.Job) (sandbox.Result, error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		res, err := p.Run(context.Background(), j)
		if !errors.Is(err, sandbox.ErrPending) {
			return res, err
		}
		j.Resumed = true
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("the attempt never ended")
	return sandbox.Result{}, nil
}

func TestArgvIsExactNeverAShell(t *testing.T) {
	p := New(t.TempDir(), nil)
	hostile := []string{"$(touch pwned)", "; rm -rf /", "`id`", "a b", "'\"", "*", ""}
	res, err := wait(t, p, job("k1", append([]string{"/usr/bin/printf", "%s|"}, hostile...), `{}`))
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.Join(hostile, "|") + "|"; res.Stdout != want {
		t.Fatalf("argv reached the tool as %q, want %q", res.Stdout, want)
	}
	if _, err := os.Stat(filepath.Join(p.WorkspaceDir(types.NamespacedName{Namespace: "ns", Name: "s"}), "pwned")); err == nil {
		t.Fatal("a shell interpreted the arguments")
	}
}

func TestArgumentsOnStdinAndInAFile(t *testing.T) {
	p := New(t.TempDir(), nil)
	args := `{"text":"héllo","n":123456789012345678901}`
	res, err := wait(t, p, job("k2", []string{"/bin/sh", "-c", `cat; cat "$TOOLGATE_ARGUMENTS_FILE"`}, args))
	if err != nil || res.Stdout != args+args {
		t.Fatalf("%q %v", res.Stdout, err)
	}
}

func TestOutputIsBoundedAndFlagged(t *testing.T) {
	p := New(t.TempDir(), nil)
	res, err := wait(t, p, job("k3", []string{"/bin/sh", "-c", "head -c 5000 /dev/zero | tr '\\0' x; echo oops >&2; exit 7"}, `{}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Stdout) != 1024 || !res.Truncated || res.ExitCode != 7 || !strings.Contains(res.Stderr, "oops") {
		t.Fatalf("len %d truncated %v exit %d stderr %q", len(res.Stdout), res.Truncated, res.ExitCode, res.Stderr)
	}
}

func TestCancelStopsTheWholeProcessGroupFirst(t *testing.T) {
	base := t.TempDir()
	p := New(base, nil)
	j := job("k4", []string{"/bin/sh", "-c", "(sleep 2; echo late > child-survived) & sleep 30"}, `{}`)
	if _, err := p.Run(context.Background(), j); !errors.Is(err, sandbox.ErrPending) {
		t.Fatalf("start: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	j.Resumed = true
	start := time.Now()
	if _, err := p.Run(ctx, j); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancel: %v", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatal("cancellation waited for the tool")
	}
	time.Sleep(2500 * time.Millisecond)
	if _, err := os.Stat(filepath.Join(p.WorkspaceDir(j.Session.NamespacedName), "child-survived")); err == nil {
		t.Fatal("a child of the tool outlived the cancellation")
	}
}

// TestCancelReachesProcessesThatLeftTheGroup: a body's descendant that
// left its process group and session (setsid, as a daemon does) is
// stopped with it too.
func TestCancelReachesProcessesThatLeftTheGroup(t *testing.T) {
	base := t.TempDir()
	p := New(base, nil)
	j := job("k4s", []string{"/bin/sh", "-c", "setsid /bin/sh -c 'sleep 2; echo late > grandchild-survived' & sleep 30"}, `{}`)
	if _, err := p.Run(context.Background(), j); !errors.Is(err, sandbox.ErrPending) {
		t.Fatalf("start: %v", err)
	}
	time.Sleep(300 * time.Millisecond) // the grandchild is on its own
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	j.Resumed = true
	if _, err := p.Run(ctx, j); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancel: %v", err)
	}
	time.Sleep(2500 * time.Millisecond)
	if _, err := os.Stat(filepath.Join(p.WorkspaceDir(j.Session.NamespacedName), "grandchild-survived")); err == nil {
		t.Fatal("a descendant that left the process group outlived the cancellation")
	}
}

func TestResumedAttemptUnknownToThisProcessIsLost(t *testing.T) {
	p := New(t.TempDir(), nil)
	j := job("k5", []string{"/bin/true"}, `{}`)
	j.Resumed = true
	if _, err := p.Run(context.Background(), j); !errors.Is(err, sandbox.ErrLost) {
		t.Fatalf("%v, want ErrLost", err)
	}
}

func TestReleaseStopsEveryAttemptOfTheCall(t *testing.T) {
	p := New(t.TempDir(), nil)
	j := job("uid-9/1", []string{"/bin/sleep", "30"}, `{}`)
	if _, err := p.Run(context.Background(), j); !errors.Is(err, sandbox.ErrPending) {
		t.Fatalf("start: %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		gone, err := p.Release(context.Background(), j.Owner, "uid-9")
		if err != nil {
			t.Fatal(err)
		}
		if gone {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the attempt was not stopped")
		}
		time.Sleep(20 * time.Millisecond)
	}
	j.Resumed = true
	if _, err := p.Run(context.Background(), j); !errors.Is(err, sandbox.ErrLost) {
		t.Fatalf("after release: %v, want the attempt forgotten", err)
	}
}

// TestStartFailureLeavesNoAttemptBehind: a failed start is reported, and the
// next try starts afresh instead of waiting on a run that never began.
func TestStartFailureLeavesNoAttemptBehind(t *testing.T) {
	base := filepath.Join(t.TempDir(), "not-a-dir")
	if err := os.WriteFile(base, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	p := New(base, nil) // workspaces cannot be created under a file
	j := job("k6", []string{"/bin/true"}, `{}`)
	for range 2 {
		if _, err := p.Run(context.Background(), j); err == nil || errors.Is(err, sandbox.ErrPending) {
			t.Fatalf("start under a file: %v, want an error", err)
		}
	}
}

// TestDisposingTheScopeStopsOwnedWork mounts the provider under a scope,
// starts a long-running tool through the mounted provider, disposes the
// scope and proves the tool's process is gone when Dispose returns, the
// registration is gone, and the provider starts no new work.
func TestDisposingTheScopeStopsOwnedWork(t *testing.T) {
	base := t.TempDir()
	scope := lifecycle.NewScope()
	mounts := &sandbox.Mounts{}
	if err := mounts.Mount(scope, "Process", New(base, nil)); err != nil {
		t.Fatal(err)
	}
	provider, _ := mounts.Get("Process")
	j := job("uid-7/1", []string{"/bin/sh", "-c", `echo $$ > tool.pid; exec sleep 30`}, `{}`)
	if _, err := provider.Run(context.Background(), j); !errors.Is(err, sandbox.ErrPending) {
		t.Fatalf("start: %v", err)
	}
	pidFile := filepath.Join(base, "ns", "s", "tool.pid")
	var pid int
	deadline := time.Now().Add(10 * time.Second)
	for pid == 0 || !alive(pid) {
		if data, err := os.ReadFile(pidFile); err == nil && strings.HasSuffix(string(data), "\n") {
			pid, _ = strconv.Atoi(strings.TrimSpace(string(data)))
		}
		if time.Now().After(deadline) {
			t.Fatal("the tool never started")
		}
		time.Sleep(10 * time.Millisecond)
	}

	scope.Dispose()

	if alive(pid) {
		t.Fatalf("the tool's process %d survived the disposal of the scope that mounted its provider", pid)
	}
	if _, ok := mounts.Get("Process"); ok {
		t.Fatal("the provider is still mounted")
	}
	var f *pipeline.Failure
	if _, err := provider.Run(context.Background(), job("uid-8/1", []string{"/bin/true"}, `{}`)); !errors.As(err, &f) || f.Code != pipeline.CodeSandboxUnavailable {
		t.Fatalf("a disposed provider started work: %v, want sandbox_unavailable", err)
	}
}

// alive reports whether pid names a process that has not exited (a zombie
// has).
func alive(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] != 'Z' && s[i+2] != 'X'
}

// TestCancelledAttemptAnswersTheSameWhenAskedAgain: a driver whose status
// write failed asks again, with the same cancelled signal, about the attempt
// it just stopped: the answer is the cancellation again, never the killed
// tool's exit status (which would settle the call as a tool error).
func TestCancelledAttemptAnswersTheSameWhenAskedAgain(t *testing.T) {
	p := New(t.TempDir(), nil)
	j := job("uid-3/1", []string{"/bin/sleep", "30"}, `{}`)
	if _, err := p.Run(context.Background(), j); !errors.Is(err, sandbox.ErrPending) {
		t.Fatalf("start: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	j.Resumed = true
	for i := range 2 {
		if res, err := p.Run(ctx, j); !errors.Is(err, context.Canceled) {
			t.Fatalf("asked %d times: %+v %v, want context.Canceled", i+1, res, err)
		}
	}
}

// TestDiscardStopsARunStillGoing: an attempt discarded while its process
// still runs is stopped, not dropped: it never runs on to its end.
func TestDiscardStopsARunStillGoing(t *testing.T) {
	p := New(t.TempDir(), nil)
	marker := filepath.Join(t.TempDir(), "finished")
	j := job("uid-7/1", []string{"/bin/sh", "-c", "sleep 1; touch " + marker}, `{}`)
	if _, err := p.Run(context.Background(), j); !errors.Is(err, sandbox.ErrPending) {
		t.Fatalf("start: %v", err)
	}
	p.Discard(context.Background(), j.Key)
	deadline := time.Now().Add(10 * time.Second)
	for {
		gone, err := p.Release(context.Background(), j.Owner, "uid-7")
		if err != nil {
			t.Fatal(err)
		}
		if gone {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the discarded attempt was never stopped")
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(1500 * time.Millisecond)
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the discarded attempt ran on to its end")
	}
}
