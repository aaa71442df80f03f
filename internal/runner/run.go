package runner

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/toolgate/toolgate/internal/builtin"
	"github.com/toolgate/toolgate/internal/codes"
	"github.com/toolgate/toolgate/internal/textutil"
)

// MaxStderrBytes bounds the captured stderr.
const MaxStderrBytes = 16 << 10

// Bounds of the contexts a tool defers: how many, and how long each.
const (
	MaxContexts     = 16
	MaxContextBytes = 4096
)

// Spec is what to run.
type Spec struct {
	// Argv is the exact argv of a container tool.
	Argv []string `json:"argv,omitempty"`
	// Env are the tool's literal environment variables.
	Env map[string]string `json:"env,omitempty"`
	// MCPTool names a tool of the MCP server Argv starts (its stdio
	// transport): the body is that server, asked that tool once with the
	// arguments (mcp.go).
	MCPTool string `json:"mcpTool,omitempty"`
	// MCPSchemaDigest, with MCPTool, is the digest the profile pinned of
	// that tool (MCPSchemaDigest): the server is asked the tool only if it
	// lists it with these schemas, else the call fails
	// codes.SchemaChanged and the tool is not called.
	MCPSchemaDigest string `json:"mcpSchemaDigest,omitempty"`
	// MCPText makes the value of an MCP tool its text content even when
	// the server sends structured content too: the tool's declared value
	// is a string.
	MCPText bool `json:"mcpText,omitempty"`
	// MCPList makes the body a listing of the MCP server Argv starts
	// (discovery): its value is the server's tools, as JSON.
	MCPList bool `json:"mcpList,omitempty"`
	// Builtin names a built-in workspace tool instead of Argv.
	Builtin string `json:"builtin,omitempty"`
	// Workspace is the workspace root ("" without a workspace); the tool's
	// working directory.
	Workspace string `json:"workspace,omitempty"`
	// Writable allows built-in writes.
	Writable bool `json:"writable,omitempty"`
	// MaxOutputBytes bounds the captured stdout.
	MaxOutputBytes int `json:"maxOutputBytes"`
	// ArgumentsFile is where the arguments are (and the tool is told so).
	// The pod runner writes them there itself when it is handed the call.
	ArgumentsFile string `json:"argumentsFile,omitempty"`
	// TimeoutMillis is the body's budget, counted from the moment the body
	// starts (0: none). A body still running then is stopped and the frame
	// says codes.Timeout.
	TimeoutMillis int64 `json:"timeoutMillis,omitempty"`
	// Await is an address (host:port) the body's network must reach
	// before the body starts: the egress proxy of a tool that names its
	// hosts. A CNI applies a new pod's NetworkPolicy some time after the
	// pod has its address; a body started within that time has its first
	// connection refused or dropped, and then waits out the kernel's SYN
	// retry (a second or more) or fails. Waiting is bounded by AwaitBound;
	// the body then starts all the same and finds out for itself.
	Await string `json:"await,omitempty"`
}

// AwaitBound is the longest a body waits for its Await address, and
// awaitTry the longest one connection attempt takes: a dropped SYN is
// tried again soon, not after the kernel's retry.
var (
	AwaitBound = 5 * time.Second
	awaitTry   = 250 * time.Millisecond
)

// await returns once a TCP connection to addr opens, ctx ends, or
// AwaitBound passes, whichever comes first.
func await(ctx context.Context, addr string) {
	ctx, cancel := context.WithTimeout(ctx, AwaitBound)
	defer cancel()
	d := net.Dialer{Timeout: awaitTry}
	for {
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			_ = conn.Close()
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Execute runs the tool once and returns the frame header (without digest
// and MAC) and the captured output. Cancelling ctx stops the tool's whole
// process group (SIGTERM, then SIGKILL after grace) and waits for it.
func Execute(ctx context.Context, spec Spec, arguments []byte, grace time.Duration) (Header, []byte, []byte) {
	return ExecuteWith(ctx, spec, arguments, grace, Calls{})
}

// Calls lets a body make sub-calls: Caller runs them, Runner is the path
// of this runner binary ($TOOLGATE_RUNNER, for "toolgate-runner call").
// Without a Caller the body gets no endpoint.
type Calls struct {
	Caller SubCaller
	Runner string
}

// ExecuteWith is Execute with sub-calls served to the body while it runs.
func ExecuteWith(ctx context.Context, spec Spec, arguments []byte, grace time.Duration, calls Calls) (Header, []byte, []byte) {
	if err := writableWorkspace(spec); err != nil {
		return Header{Error: err.Error(), Code: codes.SandboxUnavailable}, nil, nil
	}
	if spec.Builtin != "" {
		root := spec.Workspace
		if root == "" {
			return Header{Error: "a built-in tool needs a workspace", Code: codes.ToolError}, nil, nil
		}
		out, err := builtin.Run(spec.Builtin, root, spec.Writable, string(arguments))
		if err != nil {
			var f *builtin.Error
			if errors.As(err, &f) {
				return Header{Error: f.Message, Code: f.Code, ExitCode: 1}, nil, nil
			}
			return Header{Error: err.Error(), Code: codes.ToolError, ExitCode: 1}, nil, nil
		}
		return Header{}, []byte(out), nil
	}
	if len(spec.Argv) == 0 {
		return Header{Error: "no argv", Code: codes.ToolError, ExitCode: 127}, nil, nil
	}
	if spec.MCPList {
		return executeMCPList(ctx, spec, grace)
	}
	if spec.MCPTool != "" {
		return executeMCP(ctx, spec, arguments, grace, calls)
	}
	limit := spec.MaxOutputBytes
	if limit <= 0 {
		limit = 1 << 20
	}
	stdout := &Bounded{Limit: limit}
	stderr := &Bounded{Limit: MaxStderrBytes}
	b := newBody(ctx, spec, grace, calls)
	defer b.cleanup()
	b.cmd.Stdin = bytes.NewReader(arguments)
	b.cmd.Stdout, b.cmd.Stderr = stdout, stderr
	if spec.Await != "" {
		await(ctx, spec.Await)
	}
	if err := b.cmd.Start(); err != nil {
		return Header{Error: "the tool could not start: " + err.Error(), Code: codes.ToolError, ExitCode: 127}, nil, nil
	}
	h := b.wait(ctx, spec, grace, nil)
	h.Truncated = stdout.Truncated
	return h, stdout.Bytes(), stderr.Bytes()
}

// body is a started (or about to be started) body process: its command,
// the mark its processes carry, and what it was given.
type body struct {
	cmd      *exec.Cmd
	mark     string
	contexts string // the file the tool defers contexts to ("": none)
	started  time.Time
	done     chan error
	stops    []func()
	// onStop runs before a budget or a cancellation stops the body (an
	// MCP server is told first).
	onStop func()
}

// newBody prepares the body's process for spec's exact argv: its
// directory, environment and process group.
func newBody(ctx context.Context, spec Spec, grace time.Duration, calls Calls) *body {
	b := &body{}
	cmd := exec.Command(spec.Argv[0], spec.Argv[1:]...) // exact argv, never a shell
	cmd.Dir = spec.Workspace
	if cmd.Dir == "" {
		cmd.Dir = os.TempDir()
	}
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + os.TempDir(), "TOOLGATE_ARGUMENTS_FILE=" + spec.ArgumentsFile}
	// Where the tool may defer context messages for the model, one per
	// line (without a writable temporary directory it simply cannot).
	if f, err := os.CreateTemp("", "toolgate-contexts-*"); err == nil {
		b.contexts = f.Name()
		_ = f.Close()
		b.stops = append(b.stops, func() { _ = os.Remove(b.contexts) })
		cmd.Env = append(cmd.Env, "TOOLGATE_CONTEXTS_FILE="+b.contexts)
	}
	if spec.Workspace != "" {
		cmd.Env = append(cmd.Env, "TOOLGATE_WORKSPACE="+spec.Workspace)
	}
	if calls.Caller != nil {
		if socket, stop := serveSubCalls(ctx, calls.Caller); socket != "" {
			b.stops = append(b.stops, stop)
			cmd.Env = append(cmd.Env, EnvCallSocket+"="+socket, EnvRunner+"="+calls.Runner)
		}
	}
	for k, v := range spec.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	// Every process the body starts carries this mark in its environment,
	// so that one which leaves the process group (setsid) is found too.
	b.mark = bodyMark()
	cmd.Env = append(cmd.Env, b.mark)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// A descendant that keeps the body's output open (a daemon it
	// started) does not hold the body's end past the grace.
	cmd.WaitDelay = max(grace, time.Second)
	b.cmd = cmd
	return b
}

// stopping runs onStop, if any.
func (b *body) stopping() {
	if b.onStop != nil {
		b.onStop()
	}
}

// cleanup removes what the body was given (its contexts file, its
// sub-call endpoint).
func (b *body) cleanup() {
	for i := len(b.stops) - 1; i >= 0; i-- {
		b.stops[i]()
	}
}

// wait waits for the started body to end, for its budget (spec's
// timeout, counted from now), for ctx to end, or for early (nil: never)
// to close; the last three stop its process group (SIGTERM, then SIGKILL
// after grace). No process the body started outlives it. The header says
// how long it ran, its exit, and the stop's code when one stopped it
// (early: none; the caller says why).
func (b *body) wait(ctx context.Context, spec Spec, grace time.Duration, early <-chan struct{}) Header {
	b.started = time.Now()
	var budget <-chan time.Time
	if spec.TimeoutMillis > 0 {
		t := time.NewTimer(time.Duration(spec.TimeoutMillis) * time.Millisecond)
		defer t.Stop()
		budget = t.C
	}
	if b.done == nil {
		b.done = make(chan error, 1)
		go func() { b.done <- b.cmd.Wait() }()
	}
	var werr error
	timedOut, stopped := false, false
	select {
	case werr = <-b.done:
	case <-budget:
		timedOut = true
		b.stopping()
		werr = stopGroup(b.cmd.Process.Pid, b.mark, b.done, grace)
	case <-ctx.Done():
		stopped = true
		b.stopping()
		werr = stopGroup(b.cmd.Process.Pid, b.mark, b.done, grace)
	case <-early:
		werr = stopGroup(b.cmd.Process.Pid, b.mark, b.done, grace)
	}
	// No process the tool started outlives it: its group, and any that
	// left the group but kept its environment.
	_ = syscall.Kill(-b.cmd.Process.Pid, syscall.SIGKILL)
	killMarked(b.mark)
	ran := time.Since(b.started)
	h := Header{Contexts: readContexts(b.contexts), BodyMillis: ran.Milliseconds(),
		BodyStartedUnixMicros: b.started.UnixMicro(), BodyMicros: ran.Microseconds()}
	switch {
	case timedOut:
		h.Code = codes.Timeout
		h.Error = fmt.Sprintf("the body exceeded its %s timeout", time.Duration(spec.TimeoutMillis)*time.Millisecond)
	case stopped:
		// The runner is being stopped (its pod deleted or evicted, the
		// call cancelled): whatever the body exits with is the stop's,
		// not the tool's.
		h.Code = codes.SandboxLost
		h.Error = "the tool's pod was stopped while the body ran, and the body with it"
	}
	if werr != nil {
		h.ExitCode = b.cmd.ProcessState.ExitCode()
		if ws, ok := b.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			h.Signal = ws.Signal().String()
			h.ExitCode = 128 + int(ws.Signal())
		}
	}
	return h
}

// writableWorkspace checks, as the tool's own user, that a workspace the
// mode lets the tool write is writable: a volume owned by root (fsGroup does
// not apply to hostPath and some other volume types) would otherwise fail
// the tool's first write with a bare "permission denied". Nothing runs.
func writableWorkspace(spec Spec) error {
	if spec.Workspace == "" {
		return nil
	}
	// Said here, not as the start's error: a missing working directory
	// makes exec report the program as missing ("fork/exec /bin/sh: no
	// such file or directory").
	if fi, err := os.Stat(spec.Workspace); err != nil || !fi.IsDir() {
		return fmt.Errorf("the workspace %s is not a directory here (%v): nothing ran", spec.Workspace, err)
	}
	if !spec.Writable {
		return nil
	}
	if err := unix.Access(spec.Workspace, unix.W_OK|unix.X_OK); err != nil {
		return fmt.Errorf("the workspace %s is mounted writable but the tool's user (uid %d, gid %d) cannot write it (%v): "+
			"the volume must be writable by that user or group (fsGroup does not apply to hostPath and some other volume types); nothing ran",
			spec.Workspace, os.Getuid(), os.Getgid(), err)
	}
	return nil
}

// stopGroup stops the tool's process group: SIGTERM, then SIGKILL after
// grace; it returns the tool's wait error.
// envBody names a body's mark in its processes' environment.
const envBody = "TOOLGATE_BODY"

// bodyMark is a new body's mark, as an environment entry.
func bodyMark() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return envBody + "=" + hex.EncodeToString(b[:])
}

// killMarked kills every process whose environment holds mark: the body's
// descendants that left its process group and session (setsid). Only
// processes this user may read are seen; one that replaced its whole
// environment escapes (the pod provider's boundary is the pod).
func killMarked(mark string) { signalMarked(mark, syscall.SIGKILL) }

// signalMarked sends sig to every process whose environment holds mark.
func signalMarked(mark string, sig syscall.Signal) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	want := []byte(mark + "\x00")
	self := os.Getpid()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil || !bytes.Contains(append(env, 0), want) {
			continue
		}
		_ = syscall.Kill(pid, sig)
	}
}

func stopGroup(pgid int, mark string, done <-chan error, grace time.Duration) error {
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	signalMarked(mark, syscall.SIGTERM)
	select {
	case err := <-done:
		return err
	case <-time.After(grace):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		killMarked(mark)
		return <-done
	}
}

// makeNonDumpable is the runner's first step: non-dumpable, its
// /proc/<pid>/{fd,environ,mem} become root-owned and ptrace is refused, so a
// tool running as the same user can reach neither the log nor the frame
// key. The flag is read back, since a kernel or sandbox (gVisor) that
// accepts the call without honouring it protects nothing. A variable, so
// that a test can make it fail.
var makeNonDumpable = func() error {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_DUMPABLE, 0): %w", err)
	}
	v, err := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0)
	if err != nil {
		return fmt.Errorf("prctl(PR_GET_DUMPABLE): %w", err)
	}
	if v != 0 {
		return fmt.Errorf("prctl(PR_GET_DUMPABLE) = %d after setting 0", v)
	}
	return nil
}

// Main is the runner's "serve" command: it makes itself non-dumpable,
// listens on addr for the manager (see Server), runs the one call it is
// handed, serves its frame until the pod is stopped, and writes a summary to
// the termination log. It listens for nothing, and runs nothing, unless it
// could first make itself non-dumpable.
func Main(ctx context.Context, addr, terminationLog string) int {
	// Fail closed: a runner the tool's user can inspect through /proc could
	// have its channel keys read and its frame forged, so it runs nothing.
	if err := makeNonDumpable(); err != nil {
		fmt.Fprintln(os.Stderr, "toolgate-runner: cannot make the runner non-dumpable, so the tool could read its keys; refusing to run the tool:", err)
		return 2
	}
	manager, err := ParseManagerKey(os.Getenv(EnvManagerKey))
	_ = os.Unsetenv(EnvManagerKey)
	if err != nil {
		fmt.Fprintln(os.Stderr, "toolgate-runner: no manager key")
		return 2
	}
	s, err := NewServer(manager)
	if err != nil {
		fmt.Fprintln(os.Stderr, "toolgate-runner: no channel key")
		return 2
	}
	self, _ := os.Executable()
	s.Execute = func(ctx context.Context, spec Spec, arguments []byte, sub SubCaller) (Header, []byte, []byte) {
		return executeFirst(ctx, spec, arguments, Calls{Caller: sub, Runner: self})
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "toolgate-runner: cannot listen:", err)
		return 2
	}
	go func() {
		<-s.Done()
		if terminationLog != "" {
			// A summary for people (kubectl describe pod): sizes and the exit
			// only, never output, contexts or messages.
			s.mu.Lock()
			summary := s.summary
			s.mu.Unlock()
			_ = os.WriteFile(terminationLog, summary, 0o644)
		}
	}()
	if err := s.Serve(ctx, ln); err != nil {
		fmt.Fprintln(os.Stderr, "toolgate-runner: serve:", err)
		return 1
	}
	return 0
}

// executeFirst runs the call as the serving runner does: ExecuteWith, then
// sweep, so that the frame, sent after it, is sent once nothing the body
// started runs.
func executeFirst(ctx context.Context, spec Spec, arguments []byte, calls Calls) (Header, []byte, []byte) {
	h, stdout, stderr := ExecuteWith(ctx, spec, arguments, 2*time.Second, calls)
	sweep()
	return h, stdout, stderr
}

// sweep stops what the body left running outside its process group (a
// descendant that called setsid, say). The serving runner is the first
// process of the tool container's PID namespace: every orphan is
// reparented to it, and kill(-1) reaches every process of the namespace
// but itself. Anywhere else (a runner started by hand, the process
// sandbox's manager) it does nothing: kill(-1) would reach processes that
// are not the body's.
func sweep() {
	if os.Getpid() != 1 {
		return
	}
	_ = syscall.Kill(-1, syscall.SIGKILL)
	for {
		// Reap them: as the first process, the runner is their parent.
		if _, err := syscall.Wait4(-1, nil, 0, nil); err != nil && !errors.Is(err, syscall.EINTR) {
			return // ECHILD: none left
		}
	}
}

// readContexts reads the messages a tool deferred (from its first MiB): one
// per non-empty line, at most MaxContexts of at most MaxContextBytes each
// (cut, never inside a character).
func readContexts(name string) []string {
	if name == "" {
		return nil
	}
	f, err := os.Open(name)
	if err != nil {
		return nil
	}
	defer func() { _ = f.Close() }()
	r := bufio.NewReader(io.LimitReader(f, 1<<20))
	var out []string
	for len(out) < MaxContexts {
		line, err := r.ReadString('\n')
		if line = strings.TrimSpace(line); line != "" {
			out = append(out, textutil.Truncate(line, MaxContextBytes))
		}
		if err != nil {
			break
		}
	}
	return out
}

// Bounded keeps the first Limit bytes written and notes the rest was cut.
type Bounded struct {
	buf       bytes.Buffer
	Limit     int
	Truncated bool
}

func (b *Bounded) Write(p []byte) (int, error) {
	room := b.Limit - b.buf.Len()
	if room < len(p) {
		b.Truncated = true
		if room > 0 {
			b.buf.Write(p[:room])
		}
		return len(p), nil
	}
	return b.buf.Write(p)
}

// Bytes returns what was kept.
func (b *Bounded) Bytes() []byte { return b.buf.Bytes() }
