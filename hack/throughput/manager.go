package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/compose"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/internal/testmanager"
)

// writes counts the manager's write requests by the transport.
type writes struct {
	requests, conflicts atomic.Int64
	mu                  sync.Mutex
	callPatches         []time.Duration // round trips of ToolCall status patches, since reset
}

func (w *writes) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		start := time.Now()
		resp, err := rt.RoundTrip(req)
		if req.Method != http.MethodGet {
			w.requests.Add(1)
			if err == nil && resp.StatusCode == http.StatusConflict {
				w.conflicts.Add(1)
			}
		}
		if req.Method == http.MethodPatch && strings.Contains(req.URL.Path, "/toolcalls/") && strings.HasSuffix(req.URL.Path, "/status") {
			w.mu.Lock()
			w.callPatches = append(w.callPatches, time.Since(start))
			w.mu.Unlock()
		}
		return resp, err
	})
}

// patchRoundTrips returns the round trips of ToolCall status patches since
// the last call, and forgets them.
func (w *writes) patchRoundTrips() []time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.callPatches
	w.callPatches = nil
	return out
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// startManager starts the manager, and keeps what restart needs to start
// it again.
func (b *bench) startManager(cfg *rest.Config, env *testenv.Env, workers int) error {
	b.restartWith = func() error { return b.startManager(cfg, env, workers) }
	mctx, cancel := context.WithCancel(b.ctx)
	done, err := testmanager.Run(mctx, cfg, env.Scheme,
		// As cmd/manager: no managed fields in the cache.
		cache.Options{DefaultTransform: cache.TransformStripManagedFields()},
		compose.Options{
			Approvals:      []toolgatev1alpha1.ApprovalProvider{toolgatev1alpha1.ApprovalProviderNone},
			ProcessSandbox: true, ProcessWorkspaceDir: b.work,
			WakeBuffer: 4096, SessionWorkers: workers,
		})
	if err != nil {
		cancel()
		return err
	}
	stopped := make(chan struct{})
	b.stopManager = func() {
		cancel()
		<-stopped
	}
	go func() {
		defer close(stopped)
		if err := <-done; err != nil {
			fmt.Fprintln(os.Stderr, "throughput: manager:", err)
			os.Exit(1)
		}
	}()
	return nil
}

// restart stops the manager (its process-sandbox bodies die with it, as in
// a crash) and starts another.
func (b *bench) restart() error {
	b.stopManager()
	return b.restartWith()
}
