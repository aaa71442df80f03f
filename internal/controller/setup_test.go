package controller

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// A starting manager's initial list is what recovers calls after a
// restart: it must not queue behind every later change, as the priority
// queue makes it (docs/reliability.md; hack/throughput counted 40 stalled
// turns in a sustained run with restarts, 0 with a FIFO queue).
func TestControllersQueueWhatARestartRecoversInOrder(t *testing.T) {
	o := controllerOptions(4)
	if o.UsePriorityQueue == nil || *o.UsePriorityQueue {
		t.Fatal("the controllers use controller-runtime's priority queue, which starves the initial list of a restarted manager")
	}
	if o.MaxConcurrentReconciles != 4 {
		t.Fatalf("workers %d, want 4", o.MaxConcurrentReconciles)
	}
}

// A call that failed through an outage of the API server (a minute of
// 429s or 5xx, each reconcile a failure) is retried within seconds of its
// end: its backoff stops growing at maxRetryBackoff, where
// controller-runtime's default reaches minutes after a minute of failures.
func TestRetriesAfterAnOutageComeWithinSeconds(t *testing.T) {
	o := controllerOptions(4)
	if o.RateLimiter == nil {
		t.Fatal("the controllers use controller-runtime's default rate limiter, whose backoff grows to 1000 s")
	}
	item := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "call"}}
	var waited, last time.Duration
	for waited < time.Minute { // a minute of failed reconciles
		last = o.RateLimiter.When(item)
		waited += last
	}
	if last > maxRetryBackoff {
		t.Fatalf("after a minute of failures the next retry waits %s, want at most %s", last, maxRetryBackoff)
	}
	o.RateLimiter.Forget(item)
	if d := o.RateLimiter.When(item); d > 10*time.Millisecond {
		t.Fatalf("a success resets the backoff: first retry after %s", d)
	}
}
