package controller

import (
	"context"
	"fmt"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/toolgate/toolgate/internal/audit"
	"github.com/toolgate/toolgate/internal/providers/approval"
	"github.com/toolgate/toolgate/internal/providers/sandbox"
	"github.com/toolgate/toolgate/internal/toolcalls"
)

// Config is what the composition (internal/compose, for cmd/manager and the
// test manager alike) hands the controllers: the
// mounted providers of each seam, and tuning.
type Config struct {
	// Approvals and Sandboxes are the mounted providers, by the names
	// profiles select them with. The controllers consume them through the
	// seams only.
	Approvals *approval.Mounts
	Sandboxes *sandbox.Mounts
	// Wake is the Notifier handed to the sandbox providers; Setup creates
	// one when nil.
	Wake *Wake
	// PollInterval is the safety-net requeue of running calls.
	PollInterval time.Duration
	// Clock defaults to the real clock.
	Clock clock.Clock
	// SessionWorkers is how many sessions are scheduled at once (one
	// session is never scheduled by two workers); default 4.
	SessionWorkers int
	// DefaultRetention is how long a committed call of a session that sets
	// no ttlSecondsAfterCommit is kept once its turn is complete; 0 keeps
	// it until the session is deleted.
	DefaultRetention time.Duration
	// Audit receives a record per settled call (nil: none), with digests
	// made by AuditDigests.
	Audit        audit.Sink
	AuditDigests audit.Digests
}

// Setup registers the three controllers on mgr.
func Setup(mgr ctrl.Manager, cfg Config) error {
	if cfg.Approvals == nil || cfg.Sandboxes == nil {
		return fmt.Errorf("controller setup: the approval and sandbox mounts are required")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Wake == nil {
		cfg.Wake = NewWake(1024)
	}
	profiles := NewProfiles(mgr.GetClient())
	index, err := toolcalls.NewIndex(context.Background(), mgr.GetCache())
	if err != nil {
		return fmt.Errorf("controller setup: %w", err)
	}
	if err := (&ToolProfileReconciler{
		Client: mgr.GetClient(), Profiles: profiles, Sandboxes: cfg.Sandboxes, Approvals: cfg.Approvals, Clock: cfg.Clock,
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("ToolProfile controller: %w", err)
	}
	if err := (&AgentSessionReconciler{
		Client: mgr.GetClient(), Profiles: profiles, Sandboxes: cfg.Sandboxes, Approvals: cfg.Approvals, Clock: cfg.Clock,
		Reader: mgr.GetAPIReader(), MaxConcurrentReconciles: cfg.SessionWorkers, DefaultRetention: cfg.DefaultRetention,
		index: index,
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("AgentSession controller: %w", err)
	}
	calls := &ToolCallReconciler{
		Client: mgr.GetClient(), Profiles: profiles, Approvals: cfg.Approvals, Sandboxes: cfg.Sandboxes,
		Clock: cfg.Clock, PollInterval: cfg.PollInterval, Wake: cfg.Wake, APIReader: mgr.GetAPIReader(),
		Audit: cfg.Audit, AuditDigests: cfg.AuditDigests, index: index,
	}
	if err := calls.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("ToolCall controller: %w", err)
	}
	// Every replica reports the questions waiting (its cache's view): an
	// alert takes the max over them.
	if err := useApprovalGauges(mgr.GetClient(), cfg.Clock); err != nil {
		return fmt.Errorf("approval metrics: %w", err)
	}
	return nil
}

// controllerOptions are every toolgate controller's: workers, and a FIFO
// work queue. controller-runtime's default priority queue gives what a
// starting manager's initial list enqueues the lowest priority, below
// every change; while busy sessions keep changing, those objects wait.
// After a restart they are what must not wait: calls whose attempts were
// lost or whose output was held, sessions that have turns to record. The
// sustained run with restarts (hack/throughput) found whole sessions
// stalled for 60-130 s with the priority queue (docs/reliability.md).
//
// A failed reconcile is retried after a backoff that doubles from 5 ms up
// to maxRetryBackoff, where controller-runtime's default grows to 1000 s:
// an API server that refused toolgate's writes for a minute (throttling,
// 5xx) left calls waiting about as long again after it recovered, backed
// off past the outage (hack/chaos, docs/reliability.md). The overall
// bucket (10 a second, bursts of 100) still bounds a hot loop.
func controllerOptions(workers int) controller.Options {
	return controller.Options{MaxConcurrentReconciles: workers, UsePriorityQueue: ptr.To(false), RateLimiter: retryLimiter()}
}

// maxRetryBackoff is the longest a failed reconcile waits to be retried.
const maxRetryBackoff = 10 * time.Second

func retryLimiter() workqueue.TypedRateLimiter[reconcile.Request] {
	return workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](5*time.Millisecond, maxRetryBackoff),
		&workqueue.TypedBucketRateLimiter[reconcile.Request]{Limiter: rate.NewLimiter(rate.Limit(10), 100)},
	)
}
