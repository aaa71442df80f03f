package controller

import (
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// ownWrites remembers, per call, the resourceVersions this process's own
// writes replaced since its cache last showed the call as written. A
// reconcile that reads one of them from the cache is behind a write this
// process made (a body that ends within milliseconds wakes its call before
// the watch has delivered the dispatch write): stepping from that state
// would redo work and fail on the optimistic lock. The watch event of the
// write follows and reconciles the call.
type ownWrites struct {
	mu       sync.Mutex
	replaced map[types.NamespacedName][]string
}

// wrote records that a write replaced version rv of the call.
func (o *ownWrites) wrote(key types.NamespacedName, rv string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.replaced == nil {
		o.replaced = map[types.NamespacedName][]string{}
	}
	o.replaced[key] = append(o.replaced[key], rv)
}

// behind reports whether version rv, read from the cache, is one this
// process's writes replaced. Any other version is current (this process's
// last write, or a later one by someone else), and the record is dropped.
func (o *ownWrites) behind(key types.NamespacedName, rv string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if slices.Contains(o.replaced[key], rv) {
		return true
	}
	delete(o.replaced, key)
	return false
}

// forget drops what is known of a call that is gone.
func (o *ownWrites) forget(key types.NamespacedName) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.replaced, key)
}
