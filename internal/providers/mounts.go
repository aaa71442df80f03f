package providers

import (
	"context"
	"fmt"
	"sync"

	"github.com/toolgate/toolgate/internal/lifecycle"
)

// Stopper is implemented by a provider that owns work in this process
// (subprocesses, goroutines, timers, open streams). Stop stops all of it
// and returns only once it is gone: no behaviour of the provider survives
// Stop. From then on the provider starts no new work (its methods fail as
// unavailable). Stop is idempotent. ctx bounds the wait: Stop returns an
// error only when ctx ended before the work was gone (it may then still be
// stopping); Mounts passes a context that never ends, so a provider must
// bound its own stopping (the process provider: SIGTERM, a grace period,
// SIGKILL).
//
// A provider whose work lives outside the process (a pod, an object in the
// API server) and is re-attached after a restart need not implement it.
type Stopper interface {
	Stop(ctx context.Context) error
}

// Mounts holds the providers of one seam by name. A provider is mounted
// under a lifecycle scope; disposing the scope unmounts it, and consumers
// then see it as absent (which, for approval, fails closed). A provider that
// owns work (a Stopper) is stopped by the same disposal before it is
// unmounted, and Dispose returns only once that work is gone.
type Mounts[T any] struct {
	mu     sync.RWMutex
	byName map[string]T
}

// Mount registers p as the provider called name. The scope's disposal
// stops p's work when p is a Stopper (waiting for it to be gone), then
// forgets the registration.
func (m *Mounts[T]) Mount(scope *lifecycle.Scope, name string, p T) error {
	m.mu.Lock()
	if m.byName == nil {
		m.byName = map[string]T{}
	}
	if _, dup := m.byName[name]; dup {
		m.mu.Unlock()
		return fmt.Errorf("a provider %q is already mounted", name)
	}
	m.byName[name] = p
	m.mu.Unlock()
	undo := func() {
		if s, ok := any(p).(Stopper); ok {
			// A context that never ends: Stop returns (nil) only once the
			// work is gone.
			_ = s.Stop(context.Background())
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		delete(m.byName, name)
	}
	if err := scope.OnDispose(undo); err != nil {
		undo()
		return err
	}
	return nil
}

// Get returns the provider mounted as name.
func (m *Mounts[T]) Get(name string) (T, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	p, ok := m.byName[name]
	return p, ok
}

// All returns the mounted providers.
func (m *Mounts[T]) All() []T {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]T, 0, len(m.byName))
	for _, p := range m.byName {
		out = append(out, p)
	}
	return out
}

// Len is the number of mounted providers.
func (m *Mounts[T]) Len() int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return len(m.byName)
}
