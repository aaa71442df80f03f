package main

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	tu "github.com/toolgate/toolgate/internal/testutil"
)

// policyLive waits until the API server applies the mutating policy.
func (b *bench) policyLive() error {
	ns, err := b.namespace("probe")
	if err != nil {
		return err
	}
	for i := range 300 {
		tc := tu.MakeToolCall(ns, fmt.Sprintf("probe-%d", i), "none").Obj()
		if err := b.c.Create(b.ctx, tc); err != nil {
			return err
		}
		if len(tc.Finalizers) > 0 {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("the mutating admission policy toolcall-stop-work is not applied after 30 s")
}

func (b *bench) namespace(prefix string) (string, error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}
	if err := b.c.Create(b.ctx, ns); err != nil {
		return "", err
	}
	return ns.Name, nil
}

// profile creates the profile every session uses: echo (cat) and nap
// (sleep 0.2), both parallel-safe, all allowed.
func (b *bench) profile(ns string) error {
	tool := func(name, script string) toolgatev1alpha1.ToolDefinition {
		w := tu.MakeTool(name).Parameters(`{"type":"object"}`).ConcurrencySafe("true")
		w.Container.Command = []string{"/bin/sh", "-c", script}
		w.Output = toolgatev1alpha1.OutputDeclaration{Schema: tu.JSON(`{"type":"string"}`), Render: toolgatev1alpha1.RenderSpec{Format: toolgatev1alpha1.RenderText}}
		return w.Obj()
	}
	// echo is idempotent: a restart of the manager kills the process
	// sandbox's bodies, and the call runs its body again.
	echo := tool("echo", "cat")
	echo.Idempotent = true
	p := tu.MakeToolProfile(ns, "p").Tools(echo, tool("nap", "sleep 0.2; echo ok")).
		PreRule("allow-all", toolgatev1alpha1.ActionAllow, "").
		Sandbox(func(s *toolgatev1alpha1.SandboxPolicy) {
			s.Provider = toolgatev1alpha1.SandboxProviderProcess
			s.Mode = toolgatev1alpha1.SandboxWorkspaceWrite
		}).
		Approval(func(a *toolgatev1alpha1.ApprovalSettings) { a.Provider = toolgatev1alpha1.ApprovalProviderNone })
	return b.c.Create(b.ctx, p.Obj())
}

// sessionRun creates n sessions of perSession calls of tool each, in turns
// of turnSize, submits every call at once (8 writers) and waits until all
// have committed; it returns the time from the first creation to the last
// commit.
func (b *bench) sessionRun(prefix string, n, perSession int, tool string, turnSize int) (time.Duration, error) {
	ns, err := b.namespace(prefix)
	if err != nil {
		return 0, err
	}
	if err := b.profile(ns); err != nil {
		return 0, err
	}
	var calls []*toolgatev1alpha1.ToolCall
	for s := range n {
		name := fmt.Sprintf("s%d", s)
		if err := b.c.Create(b.ctx, tu.MakeAgentSession(ns, name, "p").MaxParallel(10).Obj()); err != nil {
			return 0, err
		}
		for i := range perSession {
			calls = append(calls, tu.MakeToolCall(ns, fmt.Sprintf("%s-c%d", name, i), name).
				Tool(tool, `{"text":"hello"}`).At(int64(i/turnSize), int32(i%turnSize)).Of(int32(turnSize)).Obj())
		}
	}
	if err := b.waitReady(ns, n); err != nil {
		return 0, err
	}
	start := time.Now()
	b.last, b.lastStart = calls, start
	b.mgr.patchRoundTrips()
	if err := b.submit(calls); err != nil {
		return 0, err
	}
	return b.waitCommitted(calls, start, 5*time.Minute)
}

// waitReady waits until the profile and n sessions are Ready.
func (b *bench) waitReady(ns string, n int) error {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		list := &toolgatev1alpha1.AgentSessionList{}
		if err := b.c.List(b.ctx, list, client.InNamespace(ns)); err != nil {
			return err
		}
		ready := 0
		for _, s := range list.Items {
			for _, c := range s.Status.Conditions {
				if c.Type == toolgatev1alpha1.ConditionReady && c.Status == metav1.ConditionTrue {
					ready++
				}
			}
		}
		if ready == n {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("sessions of %s not Ready after a minute", ns)
}

// submit creates the calls with 8 writers, in order within each writer.
func (b *bench) submit(calls []*toolgatev1alpha1.ToolCall) error {
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < len(calls); i += 8 {
				if err := b.c.Create(b.ctx, calls[i]); err != nil {
					errs <- err
					return
				}
				b.created.Add(1)
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// sustained runs n calls over 50 sessions, each an agent that submits a
// turn of 10 and waits for it to commit before the next, and prints the
// figures every 10 s.
func (b *bench) sustained(n, ttl, restarts int) error {
	ns, err := b.namespace("long")
	if err != nil {
		return err
	}
	if err := b.profile(ns); err != nil {
		return err
	}
	const sessions, turn = 50, 10
	turns := max(1, n/(sessions*turn))
	for s := range sessions {
		session := tu.MakeAgentSession(ns, fmt.Sprintf("s%d", s), "p").MaxParallel(10).Obj()
		if ttl >= 0 {
			session.Spec.TTLSecondsAfterCommit = ptr.To(int32(ttl))
		}
		if err := b.c.Create(b.ctx, session); err != nil {
			return err
		}
	}
	if err := b.waitReady(ns, sessions); err != nil {
		return err
	}
	var committed atomic.Int64
	stop := make(chan struct{})
	go b.print(&committed, stop)
	faults := make(chan error, 1)
	go func() { faults <- b.faults(&committed, turns*sessions*turn, restarts, stop) }()
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, sessions)
	for s := range sessions {
		wg.Go(func() {
			for t := range turns {
				var calls []*toolgatev1alpha1.ToolCall
				for i := range turn {
					calls = append(calls, tu.MakeToolCall(ns, fmt.Sprintf("s%d-t%d-c%d", s, t, i), fmt.Sprintf("s%d", s)).
						Tool("echo", `{"text":"hello"}`).At(int64(t), int32(i)).Of(turn).Obj())
				}
				for _, tc := range calls {
					if err := b.c.Create(b.ctx, tc); err != nil {
						errs <- err
						return
					}
					b.created.Add(1)
				}
				if _, err := b.waitCommitted(calls, time.Now(), 5*time.Minute); err != nil {
					errs <- err
					return
				}
				b.forget(calls) // checked: the run's own memory stays flat
				committed.Add(turn)
			}
		})
	}
	wg.Wait()
	close(stop)
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	if err := <-faults; err != nil {
		return err
	}
	took := time.Since(start)
	heap, rss := memory()
	retention := "calls kept"
	if ttl >= 0 {
		retention = fmt.Sprintf("ttlSecondsAfterCommit %d", ttl)
	}
	fmt.Printf("sustained (%s, %d manager restarts; each call one result, succeeded, in model order): %d calls in %.0f s = %.1f calls/s; turns %s without a commit: %d; after them: heap %.0f MiB, RSS %.0f MiB\n", retention, restarts, committed.Load(), took.Seconds(), float64(committed.Load())/took.Seconds(), stallReport, b.stalls.Load(), heap, rss)
	return nil
}

// forget drops calls' commits from what the bench has seen.
func (b *bench) forget(calls []*toolgatev1alpha1.ToolCall) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, tc := range calls {
		delete(b.done, tc.Namespace+"/"+tc.Name)
	}
}

// faults restarts the manager restarts times, evenly through a run of
// total calls, and prints each restart and the time to the next commit.
func (b *bench) faults(committed *atomic.Int64, total, restarts int, stop chan struct{}) error {
	for i := 1; i <= restarts; i++ {
		at := int64(total * i / (restarts + 1))
		for committed.Load() < at {
			select {
			case <-stop:
				return nil
			case <-time.After(50 * time.Millisecond):
			}
		}
		seen := b.commits.Load()
		start := time.Now()
		if err := b.restart(); err != nil {
			return err
		}
		for b.commits.Load() <= seen {
			select {
			case <-stop:
				return nil
			case <-time.After(10 * time.Millisecond):
			}
		}
		// The first commit seen may come from the old manager's last
		// writes; the restart took what the stop took.
		fmt.Printf("  fault: manager restarted at %d calls committed; next commit %.2f s after the stop began\n", at, time.Since(start).Seconds())
	}
	return nil
}
