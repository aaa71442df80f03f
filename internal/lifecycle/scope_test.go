package lifecycle

import (
	"errors"
	"slices"
	"testing"
)

func TestDisposeRunsDisposersInReverseAndChildrenFirst(t *testing.T) {
	root := NewScope()
	var got []string
	must(t, root.OnDispose(func() { got = append(got, "root-1") }))
	child, err := root.Child()
	must(t, err)
	must(t, child.OnDispose(func() { got = append(got, "child") }))
	must(t, root.OnDispose(func() { got = append(got, "root-2") }))

	root.Dispose()
	root.Dispose() // idempotent

	want := []string{"child", "root-2", "root-1"}
	if !slices.Equal(got, want) {
		t.Fatalf("dispose order = %v, want %v", got, want)
	}
	if !child.Disposed() || !root.Disposed() {
		t.Fatal("scopes not marked disposed")
	}
}

func TestDisposedScopeRefusesRegistrations(t *testing.T) {
	s := NewScope()
	s.Dispose()
	if err := s.OnDispose(func() {}); !errors.Is(err, ErrDisposed) {
		t.Fatalf("OnDispose after Dispose = %v, want ErrDisposed", err)
	}
	if _, err := s.Child(); !errors.Is(err, ErrDisposed) {
		t.Fatalf("Child after Dispose = %v, want ErrDisposed", err)
	}
}

func TestChildDisposedAloneLeavesParent(t *testing.T) {
	root := NewScope()
	child, err := root.Child()
	must(t, err)
	ran := 0
	must(t, child.OnDispose(func() { ran++ }))
	child.Dispose()
	root.Dispose()
	if ran != 1 {
		t.Fatalf("child disposer ran %d times, want 1", ran)
	}
	if root.children != nil {
		t.Fatalf("root still tracks %d children", len(root.children))
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
