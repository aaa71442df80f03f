package controller

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

// TestSettledCallsWakeOnlyTheirWaiters: a result wakes every wait for
// that call and no other; a wait stopped before is not woken, and leaves
// nothing behind.
func TestSettledCallsWakeOnlyTheirWaiters(t *testing.T) {
	s := &settledCalls{waiting: map[types.NamespacedName][]chan struct{}{}}
	a, b := types.NamespacedName{Namespace: "ns", Name: "a"}, types.NamespacedName{Namespace: "ns", Name: "b"}
	a1, stopA1 := s.await(a)
	a2, stopA2 := s.await(a)
	b1, stopB1 := s.await(b)
	stopB1()
	s.wake(a)
	for i, ch := range []<-chan struct{}{a1, a2} {
		select {
		case <-ch:
		default:
			t.Errorf("wait %d for a was not woken by its result", i)
		}
	}
	s.wake(b)
	select {
	case <-b1:
		t.Error("a stopped wait was woken")
	default:
	}
	stopA1()
	stopA2()
	if len(s.waiting) != 0 {
		t.Errorf("waits left behind: %v", s.waiting)
	}
}
