package controller

import (
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolgate/toolgate/internal/pipeline"
	tu "github.com/toolgate/toolgate/internal/testutil"
)

// TestCallMemoryIsOneEntryPerCall: everything remembered of a call is in
// one entry, forget drops all of it, and a call made again under the same
// name (another UID) starts with nothing of its predecessor's.
func TestCallMemoryIsOneEntryPerCall(t *testing.T) {
	var mem callMemory
	first := tu.MakeToolCall("ns", "c", "s").Obj()
	first.UID = "uid-1"
	fill := func(m *memo) {
		m.live = map[int]pipeline.LiveAttempt{1: {Dispatched: true, Invoked: true}}
		m.prepared, m.announced, m.audited = 1, true, true
		m.resultAt, m.stamps = time.Now(), []time.Time{time.Now()}
	}
	empty := func(m *memo) bool {
		return m.live == nil && m.prepared == 0 && !m.announced && !m.audited && m.resultAt.IsZero() && m.stamps == nil
	}
	mem.with(first, fill)
	mem.with(first, func(m *memo) {
		if empty(m) {
			t.Error("the call's memory was not kept between reads")
		}
	})

	again := first.DeepCopy()
	again.UID = "uid-2"
	mem.with(again, func(m *memo) {
		if !empty(m) {
			t.Errorf("a call made again under the same name sees its predecessor's memory: %+v", m)
		}
	})

	mem.with(again, fill)
	mem.forget(client.ObjectKeyFromObject(again))
	mem.with(again, func(m *memo) {
		if !empty(m) {
			t.Errorf("forget left %+v", m)
		}
	})
	n := 0
	mem.m.Range(func(any, any) bool { n++; return true })
	if mem.forget(client.ObjectKeyFromObject(again)); n != 1 {
		t.Errorf("%d entries for one call", n)
	}
}
