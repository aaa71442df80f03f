package clusterscripts

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// bash runs script after sourcing the cluster scripts' functions, with
// STATE (a node's pids/ and logs/) in a temporary directory, and returns
// what it printed.
func bash(t *testing.T, state, script string) (string, error) {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	hack := filepath.Join(filepath.Dir(file), "..", "..", "hack")
	cmd := exec.Command("bash", "-c", `set -u
source "$HACK/cluster-env.sh"
source "$HACK/cluster-lib.sh"
log() { echo "$*"; }
STATE=$1
`+script, "bash", state)
	cmd.Env = append(os.Environ(), "HACK="+hack, "TOOLGATE_CLUSTER_DIR="+state)
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

func newState(t *testing.T) string {
	t.Helper()
	state := t.TempDir()
	for _, d := range []string{"pids", "logs"} {
		if err := os.Mkdir(filepath.Join(state, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return state
}

// A run stopped halfway leaves pid files behind; by the next run their
// pids may name other processes. A pid file whose pid another process
// reuses does not count as running, so start starts the process again
// (a CI run once found node 2's containerd "running" and its socket dead).
func TestAPidFileWhosePidIsReusedIsNotRunning(t *testing.T) {
	state := newState(t)
	other := exec.Command("sleep", "300")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Process.Kill(); _ = other.Wait() })
	pid := strconv.Itoa(other.Process.Pid)

	for name, content := range map[string]string{
		"a pid alone, as older runs wrote it": pid + "\n",
		"a pid with another start time":       pid + " 1\n",
	} {
		if err := os.WriteFile(filepath.Join(state, "pids", "containerd"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := bash(t, state, `if running containerd; then echo running; else echo stopped; fi`); err != nil || out != "stopped" {
			t.Errorf("%s: running says %q (%v), want stopped", name, out, err)
		}
		if out, err := bash(t, state, `pid_alive "$STATE/pids/containerd" || echo none`); err != nil || out != "none" {
			t.Errorf("%s: pid_alive says %q (%v), want none", name, out, err)
		}
	}
}

// start records the process it started so that running names it, and
// only while it runs; a second start of a running process starts nothing.
func TestStartRecordsTheProcessItStarted(t *testing.T) {
	state := newState(t)
	out, err := bash(t, state, `
start sleeper sleep 300
first=$(pid_alive "$STATE/pids/sleeper") || { echo "not running after start"; exit 1; }
start sleeper sleep 300
second=$(pid_alive "$STATE/pids/sleeper")
[ "$first" = "$second" ] || { echo "started twice: $first then $second"; exit 1; }
{ kill -KILL "$first"; wait "$first"; } 2>/dev/null
if running sleeper; then echo "running after its process died"; exit 1; fi
echo ok`)
	if err != nil || out != "ok" {
		t.Fatalf("%s (%v)", out, err)
	}
}

// A process that died but was not reaped yet (a zombie: the node's init
// reaps slowly) does not count as running: cluster-up took a guard killed
// a moment before for running, and started none.
func TestAZombieIsNotRunning(t *testing.T) {
	state := newState(t)
	dead := exec.Command("true")
	if err := dead.Start(); err != nil {
		t.Fatal(err)
	}
	pid := dead.Process.Pid
	fields := statFields(pid)
	if len(fields) < 20 {
		t.Fatalf("no /proc stat of pid %d", pid)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if f := statFields(pid); len(f) > 0 && f[0] == "Z" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the process never became a zombie")
		}
	}
	t.Cleanup(func() { _ = dead.Wait() })
	if err := os.WriteFile(filepath.Join(state, "pids", "guard"), []byte(fmt.Sprintf("%d %s\n", pid, fields[19])), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := bash(t, state, `if running guard; then echo running; else echo stopped; fi`); err != nil || out != "stopped" {
		t.Fatalf("running says %q (%v) of a zombie, want stopped", out, err)
	}
}

// statFields are the fields of /proc/PID/stat after the command's name:
// the state first, the start time 20th.
func statFields(pid int) []string {
	s, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	return strings.Fields(string(s[strings.LastIndexByte(string(s), ')')+1:]))
}
