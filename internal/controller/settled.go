package controller

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// settledCalls wakes whoever in this process waits for a call's result
// (a body's sub-call), as the cache's informer sees the result arrive: a
// wait is woken by the event, never by polling the cache.
type settledCalls struct {
	mu      sync.Mutex
	waiting map[types.NamespacedName][]chan struct{}
}

// newSettledCalls listens to the ToolCall informer of c.
func newSettledCalls(ctx context.Context, c cache.Cache) (*settledCalls, error) {
	s := &settledCalls{waiting: map[types.NamespacedName][]chan struct{}{}}
	inf, err := c.GetInformer(ctx, &toolgatev1alpha1.ToolCall{})
	if err != nil {
		return nil, fmt.Errorf("the ToolCall informer: %w", err)
	}
	seen := func(o any) {
		if tc, ok := o.(*toolgatev1alpha1.ToolCall); ok && tc.Status.Result != nil {
			s.wake(client.ObjectKeyFromObject(tc))
		}
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    seen,
		UpdateFunc: func(_, o any) { seen(o) },
	}); err != nil {
		return nil, fmt.Errorf("watching ToolCall results: %w", err)
	}
	return s, nil
}

// await returns a channel closed once the call with key is seen with its
// result, and a func that stops waiting. Ask before reading the call, so
// that a result arriving between the read and the wait is not missed.
func (s *settledCalls) await(key types.NamespacedName) (<-chan struct{}, func()) {
	ch := make(chan struct{})
	s.mu.Lock()
	s.waiting[key] = append(s.waiting[key], ch)
	s.mu.Unlock()
	return ch, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if rest := slices.DeleteFunc(s.waiting[key], func(c chan struct{}) bool { return c == ch }); len(rest) > 0 {
			s.waiting[key] = rest
		} else {
			delete(s.waiting, key)
		}
	}
}

func (s *settledCalls) wake(key types.NamespacedName) {
	s.mu.Lock()
	chans := s.waiting[key]
	delete(s.waiting, key)
	s.mu.Unlock()
	for _, ch := range chans {
		close(ch)
	}
}
