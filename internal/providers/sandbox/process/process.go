// Package process is the sandbox provider that runs a tool as a local
// subprocess of the manager, through the same runner code the pod provider
// runs in its pods (exact argv, never a shell; arguments on stdin and in a
// file; bounded output; the whole process group stopped on cancellation or
// timeout). It exists for development and tests: it does not isolate
// anything, and reports its enforcement as partial.
package process

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/providers/sandbox"
	"github.com/toolgate/toolgate/internal/runner"
)

// grace is how long a cancelled tool gets between SIGTERM and SIGKILL.
const grace = time.Second

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
	stop   context.CancelFunc
	result sandbox.Result
	err    error
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
		if err := p.start(job, r); err != nil {
			p.Forget(job.Key)
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
		r.stop()
		<-r.done
		return sandbox.Result{}, ctx.Err()
	}
	return sandbox.Result{}, sandbox.ErrPending
}

// Release stops every running attempt of the call and forgets them all.
func (p *Provider) Release(_ context.Context, _ types.NamespacedName, uid types.UID) (bool, error) {
	p.mu.Lock()
	var running []*run
	for key, r := range p.runs {
		if !sandbox.OfCall(key, uid) {
			continue
		}
		select {
		case <-r.done:
			delete(p.runs, key)
		default:
			running = append(running, r)
		}
	}
	p.mu.Unlock()
	for _, r := range running {
		r.stop()
	}
	return len(running) == 0, nil
}

// Forget drops a settled attempt's record.
func (p *Provider) Forget(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.runs, key)
}

func (p *Provider) start(job sandbox.Job, r *run) error {
	dir := p.WorkspaceDir(job.Workspace.Session)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	args, err := os.CreateTemp("", "toolgate-args-*.json")
	if err != nil {
		return err
	}
	if _, err := args.WriteString(job.Arguments); err != nil {
		_ = args.Close()
		return err
	}
	_ = args.Close()
	spec := runner.Spec{
		Workspace:     dir,
		Writable:      job.Policy.Mode != toolgatev1alpha1.SandboxReadOnly,
		ArgumentsFile: args.Name(),
	}
	if b := job.Tool.Builtin; b != nil {
		spec.Builtin = b.Name
	} else if c := job.Tool.Container; c != nil {
		spec.Argv, spec.MaxOutputBytes = c.Command, int(c.MaxOutputBytes)
		spec.Env = map[string]string{}
		for _, e := range c.Env {
			spec.Env[e.Name] = e.Value
		}
	}
	runCtx, stop := context.WithCancel(context.Background())
	r.stop = stop
	go func() {
		defer stop()
		defer func() { _ = os.Remove(args.Name()) }()
		h, stdout, stderr := runner.Execute(runCtx, spec, []byte(job.Arguments), grace)
		r.result, r.err = sandbox.Outcome(h, stdout, stderr)
		close(r.done)
		if p.Notify != nil {
			p.Notify(job.Owner)
		}
	}()
	return nil
}
