package providers

import (
	"fmt"
	"sync"

	"github.com/toolgate/toolgate/internal/lifecycle"
)

// Mounts holds the providers of one seam by name. A provider is mounted
// under a lifecycle scope; disposing the scope unmounts it, and consumers
// then see it as absent (which, for approval, fails closed).
type Mounts[T any] struct {
	mu     sync.RWMutex
	byName map[string]T
}

// Mount registers p as the provider called name.
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
