package controller

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/runner"
)

// countingReader counts the reads of a reader.
type countingReader struct {
	client.Reader
	reads atomic.Int32
}

func (c *countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	c.reads.Add(1)
	return c.Reader.Get(ctx, key, obj, opts...)
}

// TestASubCallIsReadOnlyWhenWoken: a body waiting for its sub-call's
// result reads the call once, then only when the informer wakes the wait
// (its safety net set to an hour here): no poll (it read the cache every
// 100 ms before).
func TestASubCallIsReadOnlyWhenWoken(t *testing.T) {
	nested := &toolgatev1alpha1.ToolCall{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "parent-a1-s1"},
		Spec: toolgatev1alpha1.ToolCallSpec{SessionRef: toolgatev1alpha1.LocalObjectReference{Name: "s"}, Tool: "t", Arguments: `{}`,
			ParentRef: &toolgatev1alpha1.LocalObjectReference{Name: "parent"}, Requester: "agent"},
	}
	scheme := runtime.NewScheme()
	if err := toolgatev1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(nested.DeepCopy()).WithStatusSubresource(&toolgatev1alpha1.ToolCall{}).Build()
	reads := &countingReader{Reader: c}
	settled := &settledCalls{waiting: map[types.NamespacedName][]chan struct{}{}}
	done := make(chan runner.SubResult, 1)
	go func() { done <- awaitSubCall(context.Background(), reads, reads, settled, nested, time.Hour) }()

	deadline := time.Now().Add(10 * time.Second)
	for reads.reads.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // five of the old polls
	if n := reads.reads.Load(); n != 1 {
		t.Fatalf("the waiting sub-call was read %d times without a wake, want once", n)
	}

	got := &toolgatev1alpha1.ToolCall{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(nested), got); err != nil {
		t.Fatal(err)
	}
	got.Status.Result = &toolgatev1alpha1.ToolCallResult{Outcome: toolgatev1alpha1.OutcomeSucceeded, Value: `"ok"`, Content: "ok"}
	if err := c.Status().Update(context.Background(), got); err != nil {
		t.Fatal(err)
	}
	settled.wake(client.ObjectKeyFromObject(nested))
	select {
	case r := <-done:
		if r.Outcome != string(toolgatev1alpha1.OutcomeSucceeded) || r.Content != "ok" {
			t.Fatalf("result %+v, want the sub-call's", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the woken wait did not return the sub-call's result")
	}
	if n := reads.reads.Load(); n != 2 {
		t.Errorf("%d reads, want 2 (one before the wait, one on the wake)", n)
	}
}
