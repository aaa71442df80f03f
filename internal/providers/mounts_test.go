package providers

import (
	"context"
	"testing"

	"github.com/toolgate/toolgate/internal/lifecycle"
)

type plain struct{}

// owner is a provider owning work: Stop records what it saw.
type owner struct {
	mounts        *Mounts[any]
	stops         int
	mountedAtStop bool
}

func (o *owner) Stop(context.Context) error {
	o.stops++
	_, o.mountedAtStop = o.mounts.Get("owner")
	return nil
}

// TestDisposalStopsOwnedWorkThenUnmounts: disposing the scope stops a
// provider that owns work (once), then forgets it; a provider owning nothing
// is only forgotten.
func TestDisposalStopsOwnedWorkThenUnmounts(t *testing.T) {
	scope := lifecycle.NewScope()
	m := &Mounts[any]{}
	o := &owner{mounts: m}
	if err := m.Mount(scope, "owner", o); err != nil {
		t.Fatal(err)
	}
	if err := m.Mount(scope, "plain", plain{}); err != nil {
		t.Fatal(err)
	}
	scope.Dispose()
	scope.Dispose()
	if o.stops != 1 || !o.mountedAtStop {
		t.Fatalf("stopped %d times (want 1), mounted while stopping %v (want true: stop, then forget)", o.stops, o.mountedAtStop)
	}
	if m.Len() != 0 {
		t.Fatalf("%d providers still mounted", m.Len())
	}
}

// TestMountUnderADisposedScopeStopsAtOnce: a provider mounted under a scope
// already disposed is refused, stopped and not mounted.
func TestMountUnderADisposedScopeStopsAtOnce(t *testing.T) {
	scope := lifecycle.NewScope()
	scope.Dispose()
	m := &Mounts[any]{}
	o := &owner{mounts: m}
	if err := m.Mount(scope, "owner", o); err == nil {
		t.Fatal("mounted under a disposed scope")
	}
	if o.stops != 1 || m.Len() != 0 {
		t.Fatalf("stops %d, mounted %d", o.stops, m.Len())
	}
}
