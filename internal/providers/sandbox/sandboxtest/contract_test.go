package sandboxtest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/lifecycle"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/providers/sandbox"
)

// goroutines is a third provider, written here in a few dozen lines to
// show what the seam asks of one: each attempt is a goroutine, the Echo
// tool answers its arguments and the Slow one waits to be stopped. It
// knows nothing of pods or processes.
type goroutines struct {
	notify  sandbox.Notifier
	started atomic.Int32
	mu      sync.Mutex
	stopped bool
	runs    map[string]*attempt
}

type attempt struct {
	stop       context.CancelFunc
	done, gone chan struct{}
	out        string
}

func (g *goroutines) Run(ctx context.Context, job sandbox.Job) (sandbox.Result, error) {
	g.mu.Lock()
	a, ok := g.runs[job.Key]
	switch {
	case g.stopped:
		g.mu.Unlock()
		return sandbox.Result{}, pipeline.Fail(pipeline.CodeSandboxUnavailable, "stopped")
	case !ok && job.Resumed:
		g.mu.Unlock()
		return sandbox.Result{}, sandbox.ErrLost
	case !ok:
		body, stop := context.WithCancel(context.Background())
		a = &attempt{stop: stop, done: make(chan struct{}), gone: make(chan struct{})}
		g.runs[job.Key] = a
		g.started.Add(1)
		go func() {
			defer close(a.gone)
			if job.Tool.Name == "slow" {
				<-body.Done()
			} else {
				a.out = job.Arguments
			}
			close(a.done)
			g.notify(job.Owner)
		}()
	}
	g.mu.Unlock()
	if ctx.Err() != nil {
		a.stop()
		<-a.gone
		return sandbox.Result{}, ctx.Err()
	}
	select {
	case <-a.done:
		return sandbox.Result{Stdout: a.out}, nil
	default:
		return sandbox.Result{}, sandbox.ErrPending
	}
}

// Release and Stop end attempts; Discard forgets one.
func (g *goroutines) Release(_ context.Context, _ types.NamespacedName, uid types.UID) (bool, error) {
	return g.end(func(key string) bool { return sandbox.OfCall(key, uid) }), nil
}

func (g *goroutines) Stop(context.Context) error {
	g.mu.Lock()
	g.stopped = true
	g.mu.Unlock()
	g.end(func(string) bool { return true })
	return nil
}

func (g *goroutines) end(which func(key string) bool) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for key, a := range g.runs {
		if which(key) {
			a.stop()
			<-a.gone
			delete(g.runs, key)
		}
	}
	return true
}

func (g *goroutines) Discard(_ context.Context, key string) {
	g.end(func(k string) bool { return k == key })
}

func (g *goroutines) Enforcement(toolgatev1alpha1.SandboxPolicy) (bool, string) {
	return false, "goroutines confine nothing"
}
func (g *goroutines) Validate(toolgatev1alpha1.SandboxPolicy) error { return nil }
func (g *goroutines) CheckProfile(context.Context, *toolgatev1alpha1.ToolProfileSpec) ([]string, bool) {
	return nil, false
}
func (g *goroutines) Audit(context.Context, string, toolgatev1alpha1.SandboxPolicy) (string, error) {
	return "", sandbox.ErrNotApplicable
}

// TestAProviderWrittenHerePassesTheContract: the contract asks nothing a
// provider of another substrate cannot give.
func TestAProviderWrittenHerePassesTheContract(t *testing.T) {
	var g *goroutines
	calls := 0
	Contract(t, Harness{
		Mount: func(t *testing.T, scope *lifecycle.Scope, mounts *sandbox.Mounts, notify sandbox.Notifier) {
			g = &goroutines{notify: notify, runs: map[string]*attempt{}}
			if err := mounts.Mount(scope, "Test", g); err != nil {
				t.Fatal(err)
			}
		},
		Job: func(t *testing.T, args string) sandbox.Job {
			calls++
			uid := types.UID(fmt.Sprintf("uid-%d", calls))
			return sandbox.Job{Key: sandbox.Key(uid, 1), Attempt: 1, Owner: types.NamespacedName{Namespace: "ns", Name: "c"}, OwnerUID: uid, Arguments: args}
		},
		Echo:    &toolgatev1alpha1.ToolDefinition{Name: "echo"},
		Want:    func(args string) string { return args },
		Slow:    &toolgatev1alpha1.ToolDefinition{Name: "slow"},
		Started: func() int { return int(g.started.Load()) },
		Alive: func(job sandbox.Job) (int, int) {
			g.mu.Lock()
			defer g.mu.Unlock()
			n := 0
			for key, a := range g.runs {
				select {
				case <-a.gone:
				default:
					if sandbox.OfCall(key, job.OwnerUID) {
						n++
					}
				}
			}
			return n, 0
		},
	})
}
