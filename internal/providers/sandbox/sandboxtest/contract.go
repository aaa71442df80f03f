// Package sandboxtest is the sandbox seam's provider contract: the checks
// every sandbox provider passes, whatever its substrate, the way the
// seam's definition reads them. A provider's own test runs Contract with
// a Harness that mounts it and can tell what of its work exists.
package sandboxtest

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/lifecycle"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/providers/sandbox"
)

// Harness is what the contract needs of a provider under test.
type Harness struct {
	// Mount builds the provider and mounts it in mounts under scope as
	// "Test"; notify is its sandbox.Notifier.
	Mount func(t *testing.T, scope *lifecycle.Scope, mounts *sandbox.Mounts, notify sandbox.Notifier)
	// Job is a job of a new call of the provider's kind, attempt 1, not
	// resumed, with its arguments: each call is new, so contract cases
	// never share work.
	Job func(t *testing.T, arguments string) sandbox.Job
	// Echo is a tool whose body answers what it was handed; Want is its
	// stdout for arguments.
	Echo *toolgatev1alpha1.ToolDefinition
	Want func(arguments string) string
	// Slow is a tool whose body runs until it is stopped.
	Slow *toolgatev1alpha1.ToolDefinition
	// Started counts the bodies that started so far, of every tool.
	Started func() int
	// Alive counts the work the provider owns that still exists for the
	// call of job: in this process (running bodies, what of the provider
	// follows them: goroutines, timers), and outside it (a pod), which a
	// successor re-attaches to and so may outlive the provider's scope.
	Alive func(job sandbox.Job) (inProcess, outside int)
	// Poll is how often Run is asked again while it answers ErrPending
	// (0: every 50 ms).
	Poll time.Duration
}

// Contract checks provider behaviour every consumer relies on: an attempt
// runs once per key and its outcome comes back through Run; a cancelled
// attempt's work is stopped before Run reports it; Release stops a call's
// work; an attempt never started is lost, not started, on resume; and the
// scope's disposal unmounts the provider and leaves none of its work and
// no behaviour, even through a reference held from before.
func Contract(t *testing.T, h Harness) {
	if h.Poll == 0 {
		h.Poll = 50 * time.Millisecond
	}
	scope := lifecycle.NewScope()
	mounts := &sandbox.Mounts{}
	var notified atomic.Int32
	h.Mount(t, scope, mounts, func(types.NamespacedName) { notified.Add(1) })
	provider, ok := mounts.Get("Test")
	if !ok {
		t.Fatal("the harness mounted no provider named Test")
	}
	disposed := false
	t.Cleanup(func() {
		if !disposed {
			scope.Dispose()
		}
	})

	t.Run("an attempt runs once and its outcome comes back through Run", func(t *testing.T) {
		args := `{"text":"contract"}`
		job := h.Job(t, args)
		job.Tool = h.Echo
		before, woke := h.Started(), notified.Load()
		res, err := settle(t, h, provider, context.Background(), job)
		if err != nil || res.ExitCode != 0 || res.Stdout != h.Want(args) {
			t.Fatalf("Run answered %+v, %v; want stdout %q", res, err, h.Want(args))
		}
		if n := h.Started() - before; n != 1 {
			t.Errorf("the body started %d times for one attempt", n)
		}
		if notified.Load() == woke {
			t.Error("the attempt's end notified nobody")
		}
		// Asked again once settled: the same outcome, nothing started.
		job.Resumed = true
		if again, err := provider.Run(context.Background(), job); err != nil || again.Stdout != res.Stdout {
			t.Errorf("asked again: %+v, %v", again, err)
		}
		if n := h.Started() - before; n != 1 {
			t.Errorf("asking again started the body: %d starts", n)
		}
		provider.Discard(context.Background(), job.Key)
		eventually(t, "the discarded attempt's work to go", func() bool { return alive(h, job) == 0 })
	})

	t.Run("a cancelled attempt's work is stopped before Run reports it", func(t *testing.T) {
		job := h.Job(t, `{}`)
		job.Tool = h.Slow
		untilStarted(t, h, provider, job)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		job.Resumed = true
		_, err := settle(t, h, provider, ctx, job)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("a cancelled attempt: %v, want context.Canceled", err)
		}
		if n := alive(h, job); n != 0 {
			t.Errorf("Run reported the cancellation with %d pieces of its work alive", n)
		}
		releaseAll(t, h, provider, job)
	})

	t.Run("Release stops a call's work and reports it gone", func(t *testing.T) {
		job := h.Job(t, `{}`)
		job.Tool = h.Slow
		untilStarted(t, h, provider, job)
		releaseAll(t, h, provider, job)
	})

	t.Run("an attempt never started is lost on resume, never started", func(t *testing.T) {
		job := h.Job(t, `{}`)
		job.Tool, job.Resumed = h.Echo, true
		before := h.Started()
		_, err := provider.Run(context.Background(), job)
		if !errors.Is(err, sandbox.ErrLost) {
			t.Errorf("a resumed attempt that never started: %v, want ErrLost", err)
		}
		time.Sleep(3 * h.Poll)
		if h.Started() != before {
			t.Error("resuming an attempt that never started started it")
		}
		releaseAll(t, h, provider, job)
	})

	t.Run("disposal unmounts the provider and leaves no work and no behaviour", func(t *testing.T) {
		job := h.Job(t, `{}`)
		job.Tool = h.Slow
		untilStarted(t, h, provider, job)
		disposed = true
		scope.Dispose()
		if _, ok := mounts.Get("Test"); ok || mounts.Len() != 0 {
			t.Fatal("the provider is still mounted once its scope is disposed")
		}
		if n, _ := h.Alive(job); n != 0 {
			t.Errorf("%d pieces of the provider's work in this process survive its disposal", n)
		}
		// Through a reference held from before: nothing starts.
		held := h.Job(t, `{}`)
		held.Tool = h.Echo
		before := h.Started()
		_, err := provider.Run(context.Background(), held)
		var f *pipeline.Failure
		if !errors.As(err, &f) || f.Code != pipeline.CodeSandboxUnavailable {
			t.Errorf("Run after disposal: %v, want sandbox_unavailable", err)
		}
		time.Sleep(3 * h.Poll)
		if h.Started() != before || alive(h, held) != 0 {
			t.Error("a provider disposed of started work through a held reference")
		}
	})
}

// settle asks Run until it answers something other than ErrPending, as
// the pipeline does: resumed after the first ask.
func settle(t *testing.T, h Harness, p sandbox.Provider, ctx context.Context, job sandbox.Job) (sandbox.Result, error) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(h.Poll) {
		res, err := p.Run(ctx, job)
		if !errors.Is(err, sandbox.ErrPending) {
			return res, err
		}
		job.Resumed = true
		if time.Now().After(deadline) {
			t.Fatal("Run answered nothing but ErrPending for 30s")
		}
	}
}

// untilStarted runs job until its body has started.
func untilStarted(t *testing.T, h Harness, p sandbox.Provider, job sandbox.Job) {
	t.Helper()
	before := h.Started()
	for deadline := time.Now().Add(30 * time.Second); h.Started() == before; time.Sleep(h.Poll) {
		if _, err := p.Run(context.Background(), job); !errors.Is(err, sandbox.ErrPending) {
			t.Fatalf("decided before its body started: %v", err)
		}
		job.Resumed = true
		if time.Now().After(deadline) {
			t.Fatal("the body never started")
		}
	}
}

// releaseAll releases job's call until the provider reports nothing left,
// then checks that nothing is.
func releaseAll(t *testing.T, h Harness, p sandbox.Provider, job sandbox.Job) {
	t.Helper()
	eventually(t, "Release to report the call's work gone", func() bool {
		gone, err := p.Release(context.Background(), job.Owner, job.OwnerUID)
		if err != nil {
			t.Logf("release: %v", err)
		}
		return gone
	})
	if n := alive(h, job); n != 0 {
		t.Errorf("Release reported the call's work gone with %d pieces alive", n)
	}
}

// alive is all of job's work that exists, in this process or outside it.
func alive(h Harness, job sandbox.Job) int {
	in, out := h.Alive(job)
	return in + out
}

func eventually(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !ok(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited 30s for %s", what)
		}
	}
}
