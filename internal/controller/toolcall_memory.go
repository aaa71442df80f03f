package controller

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/pipeline"
)

// callMemory is everything this process remembers of each call between
// its reconciles, one entry per call: none of it is durable, and a
// restart forgets it on purpose (an attempt this process did not see
// dispatched looks interrupted to the pipeline). An entry belongs to one
// call: a call made again under the same name starts a fresh one. forget
// drops an entry whole when its call is gone.
type callMemory struct{ m sync.Map } // types.NamespacedName -> *memo

// memo is what is remembered of one call.
type memo struct {
	mu  sync.Mutex
	uid types.UID
	// live is, per attempt, that this process dispatched it and invoked
	// its body (pipeline.LiveAttempt).
	live map[int]pipeline.LiveAttempt
	// prepared is the last attempt whose sandbox this process prepared
	// (sandbox.Preparer); one beyond the call's durable attempts is
	// released before the call settles without it. 0: none.
	prepared int
	// announced: the call's Settled Event and metrics were emitted (or
	// found emitted) by this process; audited: likewise its audit record.
	announced, audited bool
	// resultAt is when this process saw the call's durable result, to the
	// microsecond, while tracing: the start of its commit span.
	resultAt time.Time
	// stamps are the times of the call's boundaries to the microsecond
	// where this process crossed them (the status keeps whole seconds).
	stamps []time.Time
}

// of is the memo of tc, fresh when none is kept for this very call.
func (c *callMemory) of(tc *toolgatev1alpha1.ToolCall) *memo {
	key := client.ObjectKeyFromObject(tc)
	if v, ok := c.m.Load(key); ok && v.(*memo).uid == tc.UID {
		return v.(*memo)
	}
	// A call's reconciles never run at once, so nothing else replaces
	// its entry meanwhile.
	m := &memo{uid: tc.UID}
	c.m.Store(key, m)
	return m
}

// forget drops everything remembered of the call with key.
func (c *callMemory) forget(key types.NamespacedName) { c.m.Delete(key) }

// with runs f on the memo of tc under its lock.
func (c *callMemory) with(tc *toolgatev1alpha1.ToolCall, f func(m *memo)) {
	m := c.of(tc)
	m.mu.Lock()
	defer m.mu.Unlock()
	f(m)
}
