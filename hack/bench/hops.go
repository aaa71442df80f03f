package main

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/toolgate/toolgate/internal/tracing"
)

// measured is one measured call: how long from its creation to the bench
// seeing it Committed, the pod that served it, and the call's UID.
type measured struct {
	took  time.Duration
	pod   string
	call  string
	start time.Time
}

// Targets of a warm call, create → Committed (issue 28).
const (
	warmTargetP50 = 50 * time.Millisecond
	warmTargetP95 = 80 * time.Millisecond
)

// warmHops are the hops of a warm call, in order: each from the instant
// the one before ended. Together they are the call's whole time.
var warmHops = []string{
	"admission: created → first boundary",
	"policy: → dispatch decided",
	"sandbox prepare (warm pod claimed)",
	"dispatch boundary write",
	"hand-over: → runner connected",
	"hand-over: claim, greeting, request",
	"hand-over: → body started",
	"body (the runner's timing)",
	"result: body ended → result write",
	"result write (the commit)",
	"agent sees it Committed",
}

// hopsOf splits one call's time at the instants its spans give; false
// when a span it needs did not arrive.
func hopsOf(ss []span, m measured) ([]time.Duration, bool) {
	root, ok1 := find(ss, "toolgate call", "", "")
	dispatch, ok2 := find(ss, "toolgate Dispatch", "", "")
	prepare, ok3 := find(ss, "toolgate sandbox prepare", "", "")
	dwrite, ok4 := find(ss, "toolgate status write", "toolgate.stage", "Dispatch")
	body, ok5 := find(ss, "toolgate body", "", "")
	commit, ok6 := find(ss, "toolgate status write", "toolgate.phase", "Committed")
	handed, ok7 := find(ss, "toolgate hand-over", "", "")
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || !ok6 || !ok7 {
		return nil, false
	}
	instants := []time.Time{m.start, root.start, dispatch.end, prepare.end, dwrite.end, handed.start, handed.end, body.start, body.end, commit.start, commit.end, m.start.Add(m.took)}
	// The runner may be connected to before the boundary is durable (it
	// is greeted while the boundary and the claim are written): an
	// instant before the one it follows counts from that one, so that a
	// hop waited for is where the call waited.
	for i := 1; i < len(instants); i++ {
		if instants[i].Before(instants[i-1]) && i != len(instants)-1 {
			instants[i] = instants[i-1]
		}
	}
	hops := make([]time.Duration, len(instants)-1)
	for i := range hops {
		hops[i] = instants[i+1].Sub(instants[i])
	}
	return hops, true
}

// printWarmHops prints where the warm calls' time went, p50 and p95 of
// each hop, and the whole against the targets.
func printWarmHops(received *spans, calls [][]measured) {
	for j, k := range kinds {
		if !k.warm || len(calls[j]) == 0 {
			continue
		}
		byHop := make([][]time.Duration, len(warmHops))
		var whole, slowest, claimLag []time.Duration
		missing := 0
		for _, m := range calls[j] {
			trace := tracing.CallOf(m.call, "").Root.TraceID().String()
			ss := received.of(trace, func(ss []span) bool { _, ok := hopsOf(ss, m); return ok }, 10*time.Second)
			hops, ok := hopsOf(ss, m)
			if !ok {
				missing++
				continue
			}
			for i, h := range hops {
				byHop[i] = append(byHop[i], h)
			}
			// The claim is written beside the dispatch boundary; the
			// hand-over waits for both.
			claim, ok1 := find(ss, "toolgate sandbox claim", "", "")
			dwrite, ok2 := find(ss, "toolgate status write", "toolgate.stage", "Dispatch")
			if ok1 && ok2 {
				claimLag = append(claimLag, claim.end.Sub(dwrite.end))
			}
			if len(whole) == 0 || m.took > slices.Max(whole) {
				slowest = hops
			}
			whole = append(whole, m.took)
		}
		fmt.Printf("where a %s's time goes (%d calls; the manager's and the runner's spans, one clock):\n", strings.TrimSuffix(k.label, " (create→Committed)")+under(k.runtimeClass), len(whole))
		if missing > 0 {
			fmt.Printf("  (%d calls without all their spans: left out)\n", missing)
		}
		for i, name := range warmHops {
			fmt.Printf("  %-40s p50 %7.1f ms   p95 %7.1f ms   slowest call %7.1f ms\n", name, ms(pct(byHop[i], 50)), ms(pct(byHop[i], 95)), ms(slowest[i]))
		}
		if len(claimLag) > 0 {
			fmt.Printf("  %-40s p50 %7.1f ms   p95 %7.1f ms   (not a hop: the claim is written beside the boundary)\n", "(the claim's write ends after it by)", ms(pct(claimLag, 50)), ms(pct(claimLag, 95)))
		}
		fmt.Printf("  %-40s p50 %7.1f ms   p95 %7.1f ms   (target p50 ≤ %.0f ms, p95 ≤ %.0f ms: %s)\n", "whole call", ms(pct(whole, 50)), ms(pct(whole, 95)),
			ms(warmTargetP50), ms(warmTargetP95), verdict(pct(whole, 50) <= warmTargetP50 && pct(whole, 95) <= warmTargetP95))
	}
}

func verdict(met bool) string {
	if met {
		return "met"
	}
	return "not met"
}
