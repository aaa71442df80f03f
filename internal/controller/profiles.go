package controller

import (
	"context"
	"fmt"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/profile"
)

// Profiles compiles ToolProfiles once per generation and shares the result
// between the controllers. A compiled profile is replaced, never edited;
// the previous one is left to the garbage collector, never disposed
// (Resolve says why).
type Profiles struct {
	Reader client.Reader

	mu      sync.Mutex
	entries map[types.NamespacedName]*profileEntry
}

type profileEntry struct {
	generation int64
	listings   string // listingsOf the status compiled with
	compiled   *profile.Compiled
	err        *profile.Error
}

// NewProfiles returns a cache reading ToolProfiles through r.
func NewProfiles(r client.Reader) *Profiles {
	return &Profiles{Reader: r, entries: map[types.NamespacedName]*profileEntry{}}
}

// Resolve returns the compiled profile for key at its current generation,
// with the ToolProfile read. obj is nil when the ToolProfile does not
// exist; compiled is nil and cerr set when it does not compile; err is a
// failure to read it (transient: nothing settles on it).
func (p *Profiles) Resolve(ctx context.Context, key types.NamespacedName) (compiled *profile.Compiled, obj *toolgatev1alpha1.ToolProfile, cerr *profile.Error, err error) {
	obj = &toolgatev1alpha1.ToolProfile{}
	if err := p.Reader.Get(ctx, key, obj); err != nil {
		if apierrors.IsNotFound(err) {
			p.forget(key)
			return nil, nil, nil, nil
		}
		return nil, nil, nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	listings := listingsOf(obj)
	if e, ok := p.entries[key]; ok && e.generation == obj.Generation && e.listings == listings {
		return e.compiled, obj, e.err, nil
	}
	e := &profileEntry{generation: obj.Generation, listings: listings}
	c, cerr2 := profile.Compile(obj)
	if cerr2 != nil {
		pe, ok := cerr2.(*profile.Error)
		if !ok {
			return nil, obj, nil, cerr2
		}
		e.err = pe
	} else {
		e.compiled = c
	}
	// The previous generation is not disposed: a reconcile that resolved it
	// a moment ago may still be stepping a call on it, and disposing would
	// empty its registry under it (skipping, say, a blocking post-execute
	// rule). Unreferenced, it is garbage collected.
	p.entries[key] = e
	return e.compiled, obj, e.err, nil
}

// listingsOf names the MCP servers' listings in the profile's status (a
// tool may take its schemas from one): a new listing is compiled again,
// though the generation is the same. Cheap: it is asked on every resolve.
func listingsOf(obj *toolgatev1alpha1.ToolProfile) string {
	var b strings.Builder
	for _, s := range obj.Status.MCPServers {
		fmt.Fprintf(&b, "%s/%s/%d/%d/%t;", s.Name, s.SpecDigest, len(s.Tools), len(s.Error), s.ListedTime != nil)
		if s.ListedTime != nil {
			fmt.Fprintf(&b, "%d;", s.ListedTime.UnixNano())
		}
	}
	return b.String()
}

func (p *Profiles) forget(key types.NamespacedName) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.entries, key)
}
