package main

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// curve measures how the costs grow with the number of sessions: for each
// count, every session submits its calls at once in turns of 10 (at least
// one turn, and 200 calls in all at the least), and the run prints
// calls/s against the ceiling, effective writes per call, the process's
// peak RSS and heap, its CPU per call, and the size of a session's object
// once its calls committed.
func (b *bench) curve(counts []int, limit float64) error {
	fmt.Println("scale: calls/s against the number of sessions (turns of 10, maxParallel 10, every call submitted at once)")
	fmt.Printf("  %8s %7s %8s %8s %6s %11s %13s %12s %13s %12s\n", "sessions", "calls", "seconds", "calls/s", "ratio", "writes/call", "peak RSS MiB", "peak heap MiB", "CPU ms/call", "session B")
	for _, n := range counts {
		per := max(10, (200/n+9)/10*10)
		w0 := b.changes.Load()
		cpu0 := cpuTime()
		peakRSS, peakHeap := sampleMemory()
		took, err := b.sessionRun(fmt.Sprintf("scale-%d", n), n, per, "echo", 10)
		rss, heap := peakRSS(), peakHeap()
		if err != nil {
			return err
		}
		calls := n * per
		eff := float64(b.changes.Load()-w0) / float64(calls)
		rate := float64(calls) / took.Seconds()
		size, err := b.sessionSize(b.last[0].Namespace)
		if err != nil {
			return err
		}
		fmt.Printf("  %8d %7d %8.1f %8.1f %6.2f %11.2f %13.0f %12.0f %13.2f %12d\n", n, calls, took.Seconds(), rate, rate/(limit/eff), eff,
			rss, heap, float64(cpuTime()-cpu0)/float64(time.Millisecond)/float64(calls), size)
	}
	return nil
}

// turnSizes measures a session's object once a turn of each size
// committed: what grows with a turn.
func (b *bench) turnSizes(sizes []int) error {
	fmt.Println("a session's object after one turn (bytes, as JSON):")
	for _, n := range sizes {
		if _, err := b.sessionRun(fmt.Sprintf("turn-%d", n), 1, n, "echo", n); err != nil {
			return err
		}
		size, err := b.sessionSize(b.last[0].Namespace)
		if err != nil {
			return err
		}
		fmt.Printf("  turn of %4d calls: %6d B\n", n, size)
	}
	return nil
}

// sessionSize is the mean size of the sessions of namespace ns as JSON.
func (b *bench) sessionSize(ns string) (int, error) {
	list := &toolgatev1alpha1.AgentSessionList{}
	if err := b.c.List(b.ctx, list, client.InNamespace(ns)); err != nil {
		return 0, err
	}
	total := 0
	for i := range list.Items {
		s := list.Items[i].DeepCopy()
		s.ManagedFields = nil
		raw, err := json.Marshal(s)
		if err != nil {
			return 0, err
		}
		total += len(raw)
	}
	return total / max(1, len(list.Items)), nil
}

// cpuTime is this process's CPU time (the manager and the bench; the API
// server and etcd are other processes).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// sampleMemory samples the process's RSS and heap every 100 ms until one
// of the functions it returns is called; each returns its peak (MiB).
func sampleMemory() (func() float64, func() float64) {
	var rss, heap atomic.Uint64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			h, r := memory()
			rss.Store(max(rss.Load(), uint64(r)))
			heap.Store(max(heap.Load(), uint64(h)))
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	var once atomic.Bool
	end := func() {
		if once.CompareAndSwap(false, true) {
			close(stop)
			<-done
		}
	}
	return func() float64 { end(); return float64(rss.Load()) }, func() float64 { end(); return float64(heap.Load()) }
}

// counts parses a comma-separated list of session counts.
func counts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("-curve: %q is not a number of sessions", f)
		}
		out = append(out, n)
	}
	return out, nil
}
