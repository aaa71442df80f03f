package controller

import "testing"

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
