// Package process is the sandbox provider that runs a tool as a local
// subprocess of the manager. It exists for development and tests: it runs
// the exact argv (never through a shell) with the arguments on stdin and in a
// file, bounds its output, and kills its whole process group on cancellation
// or timeout — but it does not isolate anything. Its enforcement is always
// reported as partial.
package process

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"

	"k8s.io/apimachinery/pkg/types"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/builtin"
	"github.com/toolgate/toolgate/internal/providers/sandbox"
)

// Provider runs attempts as local subprocesses.
type Provider struct {
	// WorkspaceBase holds one directory per session workspace.
	WorkspaceBase string
	// Notify is called when an attempt ends.
	Notify sandbox.Notifier

	mu   sync.Mutex
	runs map[string]*run
}

var _ sandbox.Provider = &Provider{}

// New returns a provider keeping workspaces under base.
func New(base string, notify sandbox.Notifier) *Provider {
	return &Provider{WorkspaceBase: base, Notify: notify, runs: map[string]*run{}}
}

type run struct {
	done   chan struct{}
	result sandbox.Result
	err    error
	cmd    *exec.Cmd // nil for built-ins
}

// Enforcement is partial: a local subprocess is not confined.
func (p *Provider) Enforcement(toolgatev1alpha1.SandboxPolicy) (bool, string) {
	return false, "the process provider runs tools as local subprocesses of the manager, without isolation (development only)"
}

// WorkspaceDir is the local directory of a session's workspace.
func (p *Provider) WorkspaceDir(session types.NamespacedName) string {
	return filepath.Join(p.WorkspaceBase, session.Namespace, session.Name)
}

// Run starts, polls or stops an attempt.
func (p *Provider) Run(ctx context.Context, job sandbox.Job) (sandbox.Result, error) {
	p.mu.Lock()
	r, ok := p.runs[job.Key]
	if !ok {
		if job.Resumed {
			p.mu.Unlock()
			return sandbox.Result{}, sandbox.ErrLost
		}
		r = &run{done: make(chan struct{})}
		p.runs[job.Key] = r
		p.mu.Unlock()
		if err := p.start(ctx, job, r); err != nil {
			return sandbox.Result{}, err
		}
	} else {
		p.mu.Unlock()
	}
	select {
	case <-r.done:
		return r.result, r.err
	default:
	}
	if ctx.Err() != nil {
		// Stop the owned work, and only then report.
		p.mu.Lock()
		cmd := r.cmd
		p.mu.Unlock()
		if cmd != nil {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
		<-r.done
		return sandbox.Result{}, ctx.Err()
	}
	return sandbox.Result{}, sandbox.ErrPending
}

// Forget drops a settled attempt's record.
func (p *Provider) Forget(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.runs, key)
}

func (p *Provider) start(_ context.Context, job sandbox.Job, r *run) error {
	dir := p.WorkspaceDir(job.Workspace.Session)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("workspace: %w", err)
	}
	finish := func(res sandbox.Result, err error) {
		r.result, r.err = res, err
		close(r.done)
		if p.Notify != nil {
			p.Notify(job.Owner)
		}
	}
	if b := job.Tool.Builtin; b != nil {
		writable := job.Policy.Mode != toolgatev1alpha1.SandboxReadOnly
		go func() {
			out, err := builtin.Run(b.Name, dir, writable, job.Arguments)
			finish(sandbox.Result{Stdout: out}, err)
		}()
		return nil
	}
	c := job.Tool.Container
	argsFile := filepath.Join(os.TempDir(), "toolgate-args-"+sanitize(job.Key)+".json")
	if err := os.WriteFile(argsFile, []byte(job.Arguments), 0o600); err != nil {
		return err
	}
	limit := int(c.MaxOutputBytes)
	if limit <= 0 {
		limit = 1 << 20
	}
	stdout := &boundedBuffer{limit: limit}
	stderr := &boundedBuffer{limit: 16 << 10}
	cmd := exec.Command(c.Command[0], c.Command[1:]...) // exact argv, never a shell
	cmd.Dir = dir
	cmd.Stdin = bytes.NewReader([]byte(job.Arguments))
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "TOOLGATE_ARGUMENTS_FILE=" + argsFile, "TOOLGATE_WORKSPACE=" + dir}
	for _, e := range c.Env {
		cmd.Env = append(cmd.Env, e.Name+"="+e.Value)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		_ = os.Remove(argsFile)
		finish(sandbox.Result{ExitCode: 127, Stderr: "the tool could not start"}, nil)
		return nil
	}
	p.mu.Lock()
	r.cmd = cmd
	p.mu.Unlock()
	go func() {
		err := cmd.Wait()
		// Reap the whole group: no process the tool started outlives it.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = os.Remove(argsFile)
		res := sandbox.Result{Stdout: stdout.String(), Stderr: stderr.String(), Truncated: stdout.truncated}
		if err != nil {
			res.ExitCode = cmd.ProcessState.ExitCode()
			if res.ExitCode < 0 {
				res.ExitCode = 128 + int(cmd.ProcessState.Sys().(syscall.WaitStatus).Signal())
			}
		}
		finish(res, nil)
	}()
	return nil
}

func sanitize(key string) string {
	b := []byte(key)
	for i, c := range b {
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && c != '-' {
			b[i] = '_'
		}
	}
	return string(b)
}

// boundedBuffer keeps the first limit bytes and notes the rest was cut.
type boundedBuffer struct {
	buf       bytes.Buffer
	limit     int
	truncated bool
}

func (b *boundedBuffer) Write(p []byte) (int, error) {
	room := b.limit - b.buf.Len()
	if room < len(p) {
		b.truncated = true
		if room > 0 {
			b.buf.Write(p[:room])
		}
		return len(p), nil
	}
	return b.buf.Write(p)
}

func (b *boundedBuffer) String() string { return b.buf.String() }
