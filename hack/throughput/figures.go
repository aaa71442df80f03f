package main

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// hops profiles the last sessionRun of one session, where a session's rate
// is bound by latency: the calls of a turn are admitted one after another
// (each once the previous one's pre-execute decision is durable and seen)
// and commit one after another. It prints the p50 of each hop: admission
// (dispatch to the next dispatch; the API's startTime, to the
// microsecond), commit (commit to the next, as this process's watch saw
// them), a pool slot (the commit that frees it to the next dispatch), a
// turn (its last commit to the next turn's first dispatch), the round trip
// of the manager's ToolCall status patches (the write in each hop), and
// when the first dispatch came.
func (b *bench) hops(maxParallel int) error {
	calls := b.last
	dispatched := make([]time.Time, len(calls))
	for i, tc := range calls {
		got := &toolgatev1alpha1.ToolCall{}
		if err := b.c.Get(b.ctx, client.ObjectKeyFromObject(tc), got); err != nil {
			return err
		}
		if got.Status.StartTime == nil {
			return fmt.Errorf("call %s: no startTime", tc.Name)
		}
		dispatched[i] = got.Status.StartTime.Time
	}
	b.mu.Lock()
	committedAt := make([]time.Time, len(calls))
	for i, tc := range calls {
		committedAt[i] = b.done[tc.Namespace+"/"+tc.Name].at
	}
	b.mu.Unlock()
	var admit, commit, slot, turn []time.Duration
	for i := 1; i < len(calls); i++ {
		c, prev := calls[i], calls[i-1]
		if c.Spec.Turn != prev.Spec.Turn {
			turn = append(turn, dispatched[i].Sub(committedAt[i-1]))
			continue
		}
		commit = append(commit, committedAt[i].Sub(committedAt[i-1]))
		if int(c.Spec.Index) < maxParallel {
			admit = append(admit, dispatched[i].Sub(dispatched[i-1]))
		} else {
			slot = append(slot, dispatched[i].Sub(committedAt[i-maxParallel]))
		}
	}
	p50 := func(ds []time.Duration) string {
		if len(ds) == 0 {
			return "-"
		}
		slices.Sort(ds)
		return fmt.Sprintf("%.1f ms", float64(ds[len(ds)/2])/float64(time.Millisecond))
	}
	fmt.Printf("  hops (p50): admission %s, commit %s, pool slot %s, turn %s; a ToolCall status patch's round trip %s; first dispatch %.0f ms after the submission began\n",
		p50(admit), p50(commit), p50(slot), p50(turn), p50(b.mgr.patchRoundTrips()), float64(slices.MinFunc(dispatched, func(a, b time.Time) int { return a.Compare(b) }).Sub(b.lastStart))/float64(time.Millisecond))
	return nil
}

// print prints the sustained run's figures every 10 s.
func (b *bench) print(committed *atomic.Int64, stop chan struct{}) {
	t := time.NewTicker(10 * time.Second)
	defer t.Stop()
	start, lastCalls, lastWrites := time.Now(), int64(0), b.mgr.requests.Load()+b.created.Load()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		calls, w := committed.Load(), b.mgr.requests.Load()+b.created.Load()
		heap, rss := memory()
		b.mu.Lock()
		seen := len(b.done)
		b.mu.Unlock()
		fmt.Printf("  t=%4.0fs committed %6d  calls/s %5.1f  write requests/s %6.1f  ToolCalls held %6d  commits remembered %5d  heap %4.0f MiB  RSS %4.0f MiB\n",
			time.Since(start).Seconds(), calls, float64(calls-lastCalls)/10, float64(w-lastWrites)/10, b.held.Load(), seen, heap, rss)
		lastCalls, lastWrites = calls, w
	}
}

// memory returns the live heap after a collection and the process's RSS,
// in MiB.
func memory() (float64, float64) {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	rss := 0.0
	if data, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, l := range strings.Split(string(data), "\n") {
			if strings.HasPrefix(l, "VmRSS:") {
				var kb float64
				_, _ = fmt.Sscanf(strings.TrimSpace(strings.TrimPrefix(l, "VmRSS:")), "%f", &kb)
				rss = kb / 1024
			}
		}
	}
	return float64(m.HeapAlloc) / (1 << 20), rss
}
