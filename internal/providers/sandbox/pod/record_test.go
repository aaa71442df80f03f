package pod

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/providers/sandbox"
)

// TestABodyIsHandedOnlyToARecordedPod: when the caller records where an
// attempt runs (Job.Record), its body is handed only to the pod the
// call's durable status names. So a successor resuming an attempt whose
// status names no pod, and finding none, knows nothing ran and makes it
// again; one whose status names a pod that is gone cannot know, and
// reports the attempt lost. (A one-replica kill storm ended a
// non-idempotent call interrupted: its leader wrote the dispatch, was
// killed before the attempt's pod existed, and the successor read the
// missing pod as lost.)
func TestABodyIsHandedOnlyToARecordedPod(t *testing.T) {
	c, newProvider := onAPIServer(t)
	ctx := context.Background()
	job, podOf := oneCall(t, c, "recorded-")

	// A successor resumes an attempt whose status names no pod: its
	// predecessor stopped before making one. Made now, not lost.
	p := newProvider()
	t.Cleanup(func() { _ = p.Stop(context.Background()) })
	j := job(1)
	j.Resumed, j.Record = true, &sandbox.Record{}
	if _, err := p.Run(ctx, j); !errors.Is(err, sandbox.ErrPending) {
		t.Fatalf("resumed, nothing recorded, no pod: %v, want the pod made (pending)", err)
	}
	pod := podOf(1)
	k := startKubelet(t, c, pod)
	p.Dial = k.dial
	// Not handed while the status does not name it.
	for range 20 {
		if _, err := p.Run(ctx, j); !errors.Is(err, sandbox.ErrPending) {
			t.Fatalf("unrecorded: %v, want pending", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if k.runs.Load() != 0 {
		t.Fatal("the body was handed to a pod the call's status does not name")
	}
	if got := p.Where(j.Key); got != pod.Name {
		t.Fatalf("Where = %q, want %q (what the caller records)", got, pod.Name)
	}
	// Recorded: handed at once, and runs once.
	p.Recorded(j.Key, pod.Name)
	j.Record.Where = pod.Name
	if _, err := settle(t, p, j); err != nil {
		t.Fatalf("recorded: %v", err)
	}
	if k.runs.Load() != 1 {
		t.Fatalf("ran %d times, want 1", k.runs.Load())
	}

	// A successor resumes an attempt whose status names its pod, and the
	// pod is gone: it may have run, so the attempt is lost.
	q := newProvider()
	t.Cleanup(func() { _ = q.Stop(context.Background()) })
	j2 := job(2)
	j2.Resumed, j2.Record = true, &sandbox.Record{Where: Name("call-1", string(j2.OwnerUID), 2)}
	if _, err := q.Run(ctx, j2); !errors.Is(err, sandbox.ErrLost) {
		t.Fatalf("resumed, recorded, no pod: %v, want ErrLost", err)
	}
}
