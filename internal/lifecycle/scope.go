package lifecycle

import (
	"errors"
	"sync"
)

// ErrDisposed is returned when registering under a disposed scope.
var ErrDisposed = errors.New("lifecycle: scope is disposed")

// Scope owns disposers. It is safe for concurrent use.
type Scope struct {
	mu        sync.Mutex
	parent    *Scope
	disposers []func()
	children  []*Scope
	disposed  bool
}

// NewScope returns a root scope.
func NewScope() *Scope { return &Scope{} }

// Child returns a scope disposed together with s (or earlier, on its own).
func (s *Scope) Child() (*Scope, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.disposed {
		return nil, ErrDisposed
	}
	c := &Scope{parent: s}
	s.children = append(s.children, c)
	return c, nil
}

// OnDispose records fn to run when the scope is disposed. Disposers run in
// reverse order of registration, children before their parent's own.
func (s *Scope) OnDispose(fn func()) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.disposed {
		return ErrDisposed
	}
	s.disposers = append(s.disposers, fn)
	return nil
}

// Disposed reports whether Dispose has run.
func (s *Scope) Disposed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.disposed
}

// Dispose disposes the child scopes, then runs the scope's disposers. It is
// idempotent.
func (s *Scope) Dispose() {
	s.mu.Lock()
	if s.disposed {
		s.mu.Unlock()
		return
	}
	s.disposed = true
	children, disposers := s.children, s.disposers
	s.children, s.disposers = nil, nil
	parent := s.parent
	s.mu.Unlock()

	for i := len(children) - 1; i >= 0; i-- {
		children[i].Dispose()
	}
	for i := len(disposers) - 1; i >= 0; i-- {
		disposers[i]()
	}
	if parent != nil {
		parent.forget(s)
	}
}

func (s *Scope) forget(child *Scope) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, c := range s.children {
		if c == child {
			s.children = append(s.children[:i], s.children[i+1:]...)
			return
		}
	}
}
