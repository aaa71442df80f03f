package main

import (
	"bufio"
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// report checks every promise and prints the figures; it returns how many
// promises were broken.
func (r *chaos) report(ctx context.Context) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	o := r.observe(ctx)
	calls, warm := o.calls, o.warmPods
	// Each breach's note first, then the figures.
	verdicts := make([]verdict, len(promises))
	for i, p := range promises {
		verdicts[i] = p.check(o)
		for _, note := range verdicts[i].notes {
			fmt.Println(note)
		}
	}
	results, runs, idempotentReruns := 0, 0, 0
	codes := map[string]int{}
	for _, c := range calls {
		n := o.runs[c.name]
		runs += n
		if n > 1 && !nonIdempotent[c.tool] {
			idempotentReruns++
		}
		if c.obj == nil || c.obj.Status.Result == nil {
			continue
		}
		results++
		res := c.obj.Status.Result
		codes[string(res.Outcome)+"/"+orNone(res.ErrorCode)]++
	}

	fmt.Printf("\nchaos: %d calls in %d sessions, %.0fs, %d faults, seed %d\n", len(calls), r.o.sessions, time.Since(r.start).Seconds(), len(r.faults), r.o.seed)
	fmt.Printf("  %-52s %6d\n", "calls submitted", len(calls))
	fmt.Printf("  %-52s %6d\n", "results", results)
	broken := 0
	for i, p := range promises {
		mark := ""
		if !verdicts[i].kept() {
			mark = "  <- BROKEN"
			broken++
		}
		fmt.Printf("  %-52s %6d%s\n", p.name, verdicts[i].count, mark)
	}
	fmt.Printf("  %-52s %6d\n", "warm pods ready for the next calls", warm)
	fmt.Printf("  %-52s %6d\n", "body runs (markers)", runs)
	fmt.Printf("  %-52s %6d\n", "idempotent bodies run again (allowed)", idempotentReruns)
	fmt.Println("  outcomes:")
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range codes {
			if !yield(k) {
				return
			}
		}
	})
	for _, k := range keys {
		fmt.Printf("    %-50s %6d\n", k, codes[k])
	}
	fmt.Println("  calls ended interrupted, sandbox_lost or sandbox_evicted (explained):")
	for _, c := range calls {
		if c.obj == nil || c.obj.Status.Result == nil {
			continue
		}
		if code := c.obj.Status.Result.ErrorCode; code == "interrupted" || code == "sandbox_lost" || code == "sandbox_evicted" {
			settled := c.obj.Status.Result.SettledAt.Time
			cause := "no fault before it"
			for _, f := range r.faults {
				switch {
				case (f.kind == faultPod || f.kind == faultEvict) && strings.HasSuffix(f.note, "the pod of call "+c.name):
					cause = fmt.Sprintf("its pod was deleted or evicted by the fault (%s)", f.note)
				case !f.at.After(settled) && !strings.HasPrefix(cause, "its pod"):
					cause = fmt.Sprintf("last fault before it: %s (%s), %.0fs earlier", f.kind, f.note, settled.Sub(f.at).Seconds())
				}
			}
			fmt.Printf("    %-22s %-11s %s: %s; %s\n", c.name, c.tool, code, c.obj.Status.Result.Message, cause)
		}
	}
	fmt.Println("  faults (kind, count, how long it lasted, recovery: from its end to the next commit, median / max):")
	type figures struct{ lasted, recovery []time.Duration }
	byKind := map[string]*figures{}
	for _, f := range r.faults {
		next := time.Duration(-1)
		for _, c := range calls {
			if !c.committedAt.IsZero() && c.committedAt.After(f.end) && (next < 0 || c.committedAt.Sub(f.end) < next) {
				next = c.committedAt.Sub(f.end)
			}
		}
		if byKind[f.kind] == nil {
			byKind[f.kind] = &figures{}
		}
		byKind[f.kind].lasted = append(byKind[f.kind].lasted, f.end.Sub(f.at))
		byKind[f.kind].recovery = append(byKind[f.kind].recovery, next)
	}
	for _, kind := range slices.Sorted(maps.Keys(byKind)) {
		fg := byKind[kind]
		lasted := median(fg.lasted)
		med, mx := "-", "-"
		if known := slices.DeleteFunc(slices.Clone(fg.recovery), func(d time.Duration) bool { return d < 0 }); len(known) > 0 {
			slices.Sort(known)
			med, mx = fmt.Sprintf("%.1fs", known[len(known)/2].Seconds()), fmt.Sprintf("%.1fs", known[len(known)-1].Seconds())
		}
		fmt.Printf("    %-28s %4d %7.1fs   %8s / %8s\n", kind, len(fg.recovery), lasted.Seconds(), med, mx)
	}
	for _, p := range managerProcs() {
		if status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.pid)); err == nil {
			for _, l := range strings.Split(string(status), "\n") {
				if strings.HasPrefix(l, "VmRSS:") {
					fmt.Printf("  manager pid %d (leader %v) RSS %s\n", p.pid, p.leader, strings.TrimSpace(strings.TrimPrefix(l, "VmRSS:")))
				}
			}
		}
	}
	return broken
}

// observe gathers what the run saw: every call as last seen, the body runs
// their markers in the workspaces count, and the tool pods once every call
// has its result (waiting up to a minute for them to go).
func (r *chaos) observe(ctx context.Context) observations {
	o := observations{runs: map[string]int{}, podsLeft: -1}
	for _, c := range r.calls {
		o.calls = append(o.calls, c)
	}
	slices.SortFunc(o.calls, func(a, b *call) int { return strings.Compare(a.name, b.name) })
	for _, c := range o.calls {
		o.runs[c.name] = countLines(filepath.Join(r.o.clusterDir, "pv", r.ns, c.session, "runs", c.name))
	}
	// Warm pods (kept ready for the sessions' next calls, holding no call)
	// are not left behind: they go when their session is idle or deleted.
	_ = r.waitFor(ctx, 60*time.Second, func() bool {
		pods := &corev1.PodList{}
		if r.c.List(ctx, pods, client.InNamespace(r.ns), client.MatchingLabels{toolgatev1alpha1.LabelSandbox: "true"}) != nil {
			return false
		}
		o.podsLeft, o.warmPods = 0, 0
		for _, p := range pods.Items {
			if toolgatev1alpha1.WarmWaiting(&p) {
				o.warmPods++
			} else {
				o.podsLeft++
			}
		}
		return o.podsLeft == 0
	})
	return o
}

// median of ds (sorted or not); 0 for none.
func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(ds))
	return s[len(s)/2]
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func countLines(path string) int {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer func() { _ = f.Close() }()
	n := 0
	for s := bufio.NewScanner(f); s.Scan(); {
		n++
	}
	return n
}
