// Package process is the sandbox provider that runs a tool as a local
// subprocess of the manager, through the same runner code the pod provider
// runs in its pods (exact argv, never a shell; arguments on stdin and in a
// file; bounded output; the whole process group, and every process that
// kept the body's mark in its environment, stopped on cancellation or
// timeout). It exists for development and tests: it does not isolate
// anything, and reports its enforcement as partial.
//
// Its work lives in the manager's process, so it is a providers.Stopper:
// disposing the scope that mounted it stops every running tool (the whole
// process group) and returns once they are gone.
package process

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/types"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/providers"
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
	// SubCalls runs the sub-calls bodies make (nil: they get no endpoint),
	// and RunnerPath is the toolgate-runner binary a body's script calls
	// them with ($TOOLGATE_RUNNER).
	SubCalls   sandbox.SubCalls
	RunnerPath string

	mu      sync.Mutex
	runs    map[string]*run
	stopped bool
}

var (
	_ sandbox.Provider  = &Provider{}
	_ providers.Stopper = &Provider{}
)

// New returns a provider keeping workspaces under base.
func New(base string, notify sandbox.Notifier) *Provider {
	return &Provider{WorkspaceBase: base, Notify: notify, runs: map[string]*run{}}
}

type run struct {
	ctx  context.Context
	stop context.CancelFunc
	// done is closed once result and err are set; gone once nothing of the
	// run is left (its processes reaped, its arguments file removed, its
	// call notified).
	done   chan struct{}
	gone   chan struct{}
	result sandbox.Result
	err    error
	// cancelled: a caller's cancelled signal stopped the run; asked again
	// with a cancelled signal, Run answers the cancellation again.
	cancelled atomic.Bool
}

func newRun() *run {
	ctx, stop := context.WithCancel(context.Background())
	return &run{ctx: ctx, stop: stop, done: make(chan struct{}), gone: make(chan struct{})}
}

// Validate accepts every policy: the process provider enforces little of
// it, which Enforcement reports.
func (p *Provider) Validate(toolgatev1alpha1.SandboxPolicy) error { return nil }

// Enforcement is partial: a local subprocess is not confined.
func (p *Provider) Enforcement(toolgatev1alpha1.SandboxPolicy) (bool, string) {
	return false, "the process provider runs tools as local subprocesses of the manager, without isolation (development only)"
}

// WorkspaceDir is the local directory of a session's workspace.
func (p *Provider) WorkspaceDir(session types.NamespacedName) string {
	return filepath.Join(p.WorkspaceBase, session.Namespace, session.Name)
}

// errStopped answers every Run once the provider was stopped.
var errStopped = pipeline.Fail(pipeline.CodeSandboxUnavailable, "the process sandbox provider was stopped (its scope was disposed)")

// Run starts, polls or stops an attempt.
func (p *Provider) Run(ctx context.Context, job sandbox.Job) (sandbox.Result, error) {
	p.mu.Lock()
	if p.stopped {
		p.mu.Unlock()
		return sandbox.Result{}, errStopped
	}
	r, ok := p.runs[job.Key]
	if !ok {
		if job.Resumed {
			p.mu.Unlock()
			return sandbox.Result{}, sandbox.ErrLost
		}
		r = newRun()
		p.runs[job.Key] = r
		p.mu.Unlock()
		if err := p.start(job, r); err != nil {
			p.forget(job.Key)
			return sandbox.Result{}, err
		}
	} else {
		p.mu.Unlock()
	}
	select {
	case <-r.done:
		if r.cancelled.Load() && ctx.Err() != nil && !timedOut(r.err) {
			return sandbox.Result{}, ctx.Err()
		}
		return r.result, r.err
	default:
	}
	if ctx.Err() != nil {
		// Stop the owned work, and only then report. A body whose own
		// timeout came first (it was being stopped for it when the caller
		// cancelled) keeps the timeout as its outcome.
		r.cancelled.Store(true)
		r.stop()
		// Reported once nothing of the run is left: its processes reaped
		// and its arguments file removed (gone), not only its outcome set.
		<-r.gone
		if timedOut(r.err) {
			return r.result, r.err
		}
		return sandbox.Result{}, ctx.Err()
	}
	return sandbox.Result{}, sandbox.ErrPending
}

// timedOut reports whether a run ended on its own timeout (the runner
// decides it when its budget fires before anything else).
func timedOut(err error) bool {
	var f *pipeline.Failure
	return errors.As(err, &f) && f.Code == pipeline.CodeTimeout
}

// CheckProfile has nothing to add: the process provider's enforcement is
// its policy's (Enforcement).
func (p *Provider) CheckProfile(context.Context, *toolgatev1alpha1.ToolProfileSpec) ([]string, bool) {
	return nil, false
}

// Audit answers ErrNotApplicable: nothing in a namespace widens a local
// process's reach.
func (p *Provider) Audit(context.Context, string, toolgatev1alpha1.SandboxPolicy) (string, error) {
	return "", sandbox.ErrNotApplicable
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

// Stop stops every running attempt (SIGTERM to its process group, SIGKILL
// after the grace period), waits until each is gone, and forgets them all;
// the provider starts no new work afterwards. It returns ctx's error if ctx
// ends first.
func (p *Provider) Stop(ctx context.Context) error {
	p.mu.Lock()
	p.stopped = true
	runs := p.runs
	p.runs = map[string]*run{}
	p.mu.Unlock()
	for _, r := range runs {
		r.stop()
	}
	for _, r := range runs {
		select {
		case <-r.gone:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// Discard forgets a settled attempt. Its process has normally ended (Run
// reports an outcome only then, and the controller stops a body whose call
// settles without it); one still running is stopped, never left behind,
// and kept until it is gone, so that the call's Release sees it.
func (p *Provider) Discard(_ context.Context, key string) {
	p.mu.Lock()
	r, ok := p.runs[key]
	p.mu.Unlock()
	if !ok {
		return
	}
	select {
	case <-r.done:
		p.forget(key)
	default:
		r.stop()
	}
}

// forget drops a settled attempt's record.
func (p *Provider) forget(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.runs, key)
}

func (p *Provider) start(job sandbox.Job, r *run) (err error) {
	defer func() {
		if err != nil {
			// Nothing started: a Stop waiting for this run must not hang.
			r.err = err
			close(r.done)
			close(r.gone)
			r.stop()
		}
	}()
	dir := p.WorkspaceDir(job.Session.NamespacedName)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	args, err := os.CreateTemp("", "toolgate-args-*.json")
	if err != nil {
		return err
	}
	if _, err := args.WriteString(job.Arguments); err != nil {
		_ = args.Close()
		_ = os.Remove(args.Name())
		return err
	}
	_ = args.Close()
	spec := sandbox.RunnerSpec(job, dir)
	spec.ArgumentsFile = args.Name()
	go func() {
		defer close(r.gone)
		defer r.stop()
		defer func() { _ = os.Remove(args.Name()) }()
		calls := runner.Calls{Runner: p.RunnerPath}
		if p.SubCalls != nil {
			calls.Caller = func(ctx context.Context, c runner.SubCall) runner.SubResult { return p.SubCalls(ctx, job, c) }
		}
		h, stdout, stderr := runner.ExecuteWith(r.ctx, spec, []byte(job.Arguments), grace, calls)
		r.result, r.err = sandbox.Outcome(h, stdout, stderr)
		close(r.done)
		if p.Notify != nil {
			p.Notify(job.Owner)
		}
	}()
	return nil
}

var _ sandbox.Lister = &Provider{}

// List lists an MCP server's tools as a local subprocess, at once (a
// listing holds nothing a restart would lose).
func (p *Provider) List(ctx context.Context, job sandbox.ListJob) ([]runner.MCPTool, error) {
	p.mu.Lock()
	stopped := p.stopped
	p.mu.Unlock()
	if stopped {
		return nil, errStopped
	}
	spec := sandbox.ListSpec(job, "")
	ctx, cancel := context.WithTimeout(ctx, time.Duration(spec.TimeoutMillis)*time.Millisecond)
	defer cancel()
	return runner.ListMCPTools(ctx, spec, grace)
}
