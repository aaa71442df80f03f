package toolcalls

import (
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/types"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// OwnWrites remembers, per call, the resourceVersions this process's own
// writes replaced since its cache last showed the call as written. A
// reconcile that reads one of them from the cache is behind a write this
// process made (a body that ends within milliseconds wakes its call before
// the watch has delivered the dispatch write): stepping from that state
// would redo work and fail on the optimistic lock. The watch event of the
// write follows and reconciles the call.
//
// It also keeps the call as this process last wrote it, until the cache
// shows that write: the calls after it in its session plan from it
// (current), so the next in line starts or commits as soon as the write
// is durable, not once its watch event has come back.
type OwnWrites struct {
	mu       sync.Mutex
	replaced map[types.NamespacedName][]string
	written  map[types.NamespacedName]*toolgatev1alpha1.ToolCall
}

// Wrote records that a write replaced version rv of the call.
func (o *OwnWrites) Wrote(key types.NamespacedName, rv string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.replaced == nil {
		o.replaced = map[types.NamespacedName][]string{}
	}
	o.replaced[key] = append(o.replaced[key], rv)
	delete(o.written, key) // what was kept is older than this write
}

// WroteCall records a status write that replaced version rv of the call,
// and keeps the call as written (the API server's answer: its own, never
// to be changed) for current.
func (o *OwnWrites) WroteCall(rv string, written *toolgatev1alpha1.ToolCall) {
	key := types.NamespacedName{Namespace: written.Namespace, Name: written.Name}
	o.Wrote(key, rv)
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.written == nil {
		o.written = map[types.NamespacedName]*toolgatev1alpha1.ToolCall{}
	}
	o.written[key] = written
}

// Current is the newer of c, read from the cache, and the call as this
// process last wrote it: the latter while the cache is behind that write.
// Neither may be changed.
func (o *OwnWrites) Current(c *toolgatev1alpha1.ToolCall) *toolgatev1alpha1.ToolCall {
	key := types.NamespacedName{Namespace: c.Namespace, Name: c.Name}
	o.mu.Lock()
	defer o.mu.Unlock()
	if w := o.written[key]; w != nil && w.UID == c.UID && slices.Contains(o.replaced[key], c.ResourceVersion) {
		return w
	}
	return c
}

// Behind reports whether version rv, read from the cache, is one this
// process's writes replaced. Any other version is current (this process's
// last write, or a later one by someone else), and the record is dropped.
func (o *OwnWrites) Behind(key types.NamespacedName, rv string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if slices.Contains(o.replaced[key], rv) {
		return true
	}
	delete(o.replaced, key)
	delete(o.written, key)
	return false
}

// Forget drops what is known of a call that is gone.
func (o *OwnWrites) Forget(key types.NamespacedName) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.replaced, key)
	delete(o.written, key)
}
