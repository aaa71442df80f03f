package controller

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	dto "github.com/prometheus/client_model/go"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/providers/approval"
	"github.com/toolgate/toolgate/internal/providers/sandbox"
	tu "github.com/toolgate/toolgate/internal/testutil"
	"github.com/toolgate/toolgate/internal/toolcalls"
)

// API writes are toolgate's cost: the API server, not toolgate's CPU, bounds
// its throughput (docs/performance.md). These specs pin the writes a path
// makes, counted where they happen.

var _ = Describe("API writes", Ordered, func() {
	var sessionPatches atomic.Int64
	var ns string

	BeforeAll(func() {
		stopRunningManager()
		ns = stopWorkNamespace("writes")
		startManager(env.Config, intercepted(interceptor.Funcs{
			SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
				if _, ok := obj.(*toolgatev1alpha1.AgentSession); ok && obj.GetNamespace() == ns {
					sessionPatches.Add(1)
				}
				return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
			},
		}))
		DeferCleanup(func() {
			stopRunningManager()
			startManager(env.Config)
		})
		setup(processProfile(ns, shTool("echo", "cat").ConcurrencySafe("true").Obj(), shTool("slow", "sleep 1; cat").ConcurrencySafe("true").Obj()).PreRule("allow-all", toolgatev1alpha1.ActionAllow, ""))
	})

	It("a session reconcile that changes nothing sends no patch", func() {
		s := &toolgatev1alpha1.AgentSession{}
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "s"}, s)).To(Succeed())
			g.Expect(readyStatus(s.Status.Conditions)).To(Equal(metav1.ConditionTrue))
		}).Should(Succeed())
		before, reconciles := sessionPatches.Load(), reconcileCount("agentsession")
		for _, v := range []string{"1", "2", "3"} {
			patch := client.MergeFrom(s.DeepCopy())
			s.Annotations = map[string]string{"example.com/touch": v}
			Expect(k8s.Patch(ctx, s, patch)).To(Succeed())
		}
		// Each annotation is an update the session controller reconciles.
		Eventually(func() float64 { return reconcileCount("agentsession") }).Should(BeNumerically(">=", reconciles+3))
		Expect(sessionPatches.Load()).To(Equal(before), "a reconcile with nothing new patched the session's status")
	})

	It("calls admit and release themselves: the session writes no call of a parallel turn, and each call has three versions at most", func() {
		// Every version of the calls, also if the API server ends the
		// watch (under load it may): watched again from the last version
		// seen.
		w, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
		Expect(err).NotTo(HaveOccurred())
		list := &toolgatev1alpha1.ToolCallList{}
		Expect(w.List(ctx, list, client.InNamespace(ns))).To(Succeed())
		watcher, err := watchtools.NewRetryWatcherWithContext(ctx, list.ResourceVersion, &toolscache.ListWatch{
			WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
				return w.Watch(ctx, &toolgatev1alpha1.ToolCallList{}, client.InNamespace(ns), &client.ListOptions{Raw: &opts})
			},
		})
		Expect(err).NotTo(HaveOccurred())
		defer watcher.Stop()
		var mu sync.Mutex
		versions := map[string][]*toolgatev1alpha1.ToolCall{}
		go func() {
			for ev := range watcher.ResultChan() {
				if tc, ok := ev.Object.(*toolgatev1alpha1.ToolCall); ok && (ev.Type == watch.Added || ev.Type == watch.Modified) {
					mu.Lock()
					versions[tc.Name] = append(versions[tc.Name], tc)
					mu.Unlock()
				}
			}
		}()
		errorsBefore := controllerCounter("controller_runtime_reconcile_errors_total", "toolcall")
		// The first call is slow: the other two finish first and wait for
		// their turn.
		submit(ns, "c0", "slow", `{"text":"first"}`, 0, 0, 3)
		submit(ns, "c1", "echo", `{"text":"second"}`, 0, 1, 3)
		submit(ns, "c2", "echo", `{"text":"third"}`, 0, 2, 3)
		for i, name := range []string{"c0", "c1", "c2"} {
			c := committedCall(ns, name)
			Expect(c.Status.Result.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded))
			Expect(*c.Status.Schedule.CommitSequence).To(Equal(int64(i)))
		}
		// No reconcile stepped a call from a cache behind the call's own
		// write (a body done within milliseconds wakes its call before the
		// watch delivers the dispatch write): no conflict, no retry.
		Expect(controllerCounter("controller_runtime_reconcile_errors_total", "toolcall")).To(Equal(errorsBefore))
		// The test's own watch has seen every call committed.
		Eventually(func() bool {
			mu.Lock()
			defer mu.Unlock()
			for _, name := range []string{"c0", "c1", "c2"} {
				if v := versions[name]; len(v) == 0 || !v[len(v)-1].Committed() {
					return false
				}
			}
			return true
		}).Should(BeTrue())
		mu.Lock()
		defer mu.Unlock()
		for _, name := range []string{"c0", "c1", "c2"} {
			Expect(scheduleOnlyWrites(versions[name])).To(Equal(0), "writes by the session to %s", name)
			// Its creation (with the finalizer), the boundary before the
			// body with its admission, the result: a body done early waits
			// for its turn without a write.
			Expect(versions[name][0].Finalizers).To(ConsistOf(callFinalizer))
			Expect(len(versions[name])).To(BeNumerically("<=", 3), "versions of %s: %s", name, stageTraces(versions[name]))
		}
	})

	It("the session records a turn's commits together, not one status write per call, and the turn's completion at once", func() {
		Eventually(func(g Gomega) {
			g.Expect(session(ns).Status.CommittedTurn).To(Equal(int64(0)))
		}).Should(Succeed())
		before := sessionPatches.Load()
		const size = 8
		for i := range size {
			submit(ns, fmt.Sprintf("t1-c%d", i), "echo", `{"text":"hello"}`, 1, int32(i), size)
		}
		for i := range size {
			Expect(*committedCall(ns, fmt.Sprintf("t1-c%d", i)).Status.Schedule.CommitSequence).To(Equal(int64(3 + i)))
		}
		Eventually(func(g Gomega) {
			st := session(ns).Status
			g.Expect(st.CommittedTurn).To(Equal(int64(1)))
			g.Expect(st.NextSequence).To(Equal(int64(3 + size)))
			g.Expect(st.Counts.Succeeded).To(Equal(int64(3 + size)))
		}).Should(Succeed())
		// The turn's start and its completion; the commits before the
		// last only change counts and are recorded with it (one write per
		// commit before: 9 or more here).
		Consistently(sessionPatches.Load, countsDelay+200*time.Millisecond).Should(BeNumerically("<=", before+4))
	})
})

// stopWorkNamespace creates a namespace where the shipped mutating policy
// applies: each call is created with its finalizer, so the manager makes no
// finalizer write (which would race the session's admission).
func stopWorkNamespace(prefix string) string {
	label := prefix + "-spec"
	installAdmission(label, "toolcall_defaults.yaml")
	n := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-", Labels: map[string]string{label: "true"}}}
	Expect(k8s.Create(ctx, n)).To(Succeed())
	// The policy is live once the API server has loaded it.
	Eventually(func(g Gomega) {
		probe := tu.MakeToolCall(n.Name, "probe-"+string(uuid.NewUUID()), "none").Obj()
		g.Expect(k8s.Create(ctx, probe)).To(Succeed())
		g.Expect(probe.Finalizers).To(ContainElement(callFinalizer))
	}).Should(Succeed())
	return n.Name
}

// scheduleOnlyWrites counts the versions of a call that changed its
// status.schedule and nothing else of its status: the session's writes.
func scheduleOnlyWrites(versions []*toolgatev1alpha1.ToolCall) int {
	n := 0
	for i := 1; i < len(versions); i++ {
		a, b := versions[i-1].Status, versions[i].Status
		if equality.Semantic.DeepEqual(a.Schedule, b.Schedule) {
			continue
		}
		a.Schedule = b.Schedule
		if equality.Semantic.DeepEqual(a, b) {
			n++
		}
	}
	return n
}

// stageTraces renders each version's next stage and schedule, to explain
// a failure.
func stageTraces(versions []*toolgatev1alpha1.ToolCall) []string {
	var out []string
	for _, v := range versions {
		out = append(out, fmt.Sprintf("next=%s mode=%s released=%t phase=%s finalizers=%d", toolcalls.NextStage(v), v.Status.Schedule.ExecutionMode, v.Status.Schedule.Released, v.Status.Phase, len(v.Finalizers)))
	}
	return out
}

// reconcileCount is how many reconciles the named controller finished, in
// every manager this process ran.
func reconcileCount(name string) float64 {
	return controllerCounter("controller_runtime_reconcile_total", name)
}

// controllerCounter sums a controller-runtime counter of the named
// controller.
func controllerCounter(metric, name string) float64 {
	total := 0.0
	for _, m := range gathered(metric, "controller", name) {
		total += m.GetCounter().GetValue()
	}
	return total
}

// gathered are the registry's series of metric whose label is value.
func gathered(metric, label, value string) []*dto.Metric {
	families, err := metrics.Registry.Gather()
	Expect(err).NotTo(HaveOccurred())
	var out []*dto.Metric
	for _, f := range families {
		if f.GetName() != metric {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					out = append(out, m)
				}
			}
		}
	}
	return out
}

var _ = Describe("a call denied in the middle of a turn", func() {
	// Its decision must be durable for the session to admit the next call,
	// although the denied call waits for its turn to settle.
	It("does not hold back the admission of the calls after it", func() {
		ns := newNamespace()
		setup(processProfile(ns,
			shTool("slow", "sleep 2; if [ -f next-ran ]; then echo overlapped; else echo alone; fi").ConcurrencySafe("true").Obj(),
			shTool("nope", "cat").ConcurrencySafe("true").Obj(),
			shTool("next", "touch next-ran; cat").ConcurrencySafe("true").Obj(),
		).PreRule("no-nope", toolgatev1alpha1.ActionDeny, "call.tool == 'nope'").PreRule("allow-all", toolgatev1alpha1.ActionAllow, ""))
		submit(ns, "c0", "slow", `{}`, 0, 0, 3)
		submit(ns, "c1", "nope", `{}`, 0, 1, 3)
		submit(ns, "c2", "next", `{}`, 0, 2, 3)
		Expect(committedCall(ns, "c0").Status.Result.Content).To(Equal("overlapped\n"), "the call after the denied one ran only after the first committed")
		Expect(committedCall(ns, "c1").Status.Result.ErrorCode).To(Equal("policy_denied"))
		Expect(*committedCall(ns, "c2").Status.Schedule.CommitSequence).To(Equal(int64(2)))
	})
})

var _ = Describe("a cache behind the manager's own write", Ordered, func() {
	var ns string

	BeforeAll(func() {
		stopRunningManager()
		ns = stopWorkNamespace("stale")
		// After each status write of a call by its own controller, the
		// next read of that call returns the version the write replaced,
		// once: a cache the watch has not yet brought the write to.
		var mu sync.Mutex
		stale := map[client.ObjectKey]*toolgatev1alpha1.ToolCall{}
		startManager(env.Config, intercepted(interceptor.Funcs{
			Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
				mu.Lock()
				old, ok := stale[key]
				delete(stale, key)
				mu.Unlock()
				if tc, isCall := obj.(*toolgatev1alpha1.ToolCall); ok && isCall {
					old.DeepCopyInto(tc)
					return nil
				}
				return c.Get(ctx, key, obj, opts...)
			},
			SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
				tc, isCall := obj.(*toolgatev1alpha1.ToolCall)
				before := &toolgatev1alpha1.ToolCall{}
				if isCall && obj.GetNamespace() == ns {
					if err := c.Get(ctx, client.ObjectKeyFromObject(obj), before); err != nil {
						return err
					}
				}
				if err := c.SubResource(sub).Patch(ctx, obj, patch, opts...); err != nil {
					return err
				}
				// Only the call's own writes (the session's change
				// nothing but the schedule).
				if isCall && tc.Namespace == ns && scheduleOnlyWrites([]*toolgatev1alpha1.ToolCall{before, tc}) == 0 {
					mu.Lock()
					stale[client.ObjectKeyFromObject(tc)] = before
					mu.Unlock()
				}
				return nil
			},
		}))
		DeferCleanup(func() {
			stopRunningManager()
			startManager(env.Config)
		})
		setup(processProfile(ns, shTool("echo", "cat").ConcurrencySafe("true").Obj()).PreRule("allow-all", toolgatev1alpha1.ActionAllow, ""))
	})

	It("is not stepped from: the call waits for the watch, with no conflict and no retry", func() {
		errorsBefore := controllerCounter("controller_runtime_reconcile_errors_total", "toolcall")
		submit(ns, "c0", "echo", `{"text":"a"}`, 0, 0, 2)
		submit(ns, "c1", "echo", `{"text":"b"}`, 0, 1, 2)
		for _, name := range []string{"c0", "c1"} {
			Expect(committedCall(ns, name).Status.Result.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded))
		}
		Expect(controllerCounter("controller_runtime_reconcile_errors_total", "toolcall")).To(Equal(errorsBefore))
	})
})

var _ = Describe("the install's default retention", Ordered, func() {
	BeforeAll(func() {
		ownManagers()
		defaultRetention = time.Second
		DeferCleanup(func() { defaultRetention = 0 })
		startManager(env.Config)
	})

	It("deletes the committed calls of a session that sets no ttlSecondsAfterCommit, and a session's own ttl wins", func() {
		ns := newNamespace()
		p := processProfile(ns, shTool("echo", "cat").ConcurrencySafe("true").Obj()).PreRule("allow-all", toolgatev1alpha1.ActionAllow, "")
		setup(p)
		keeps := tu.MakeAgentSession(ns, "keeps", "p").Obj()
		keeps.Spec.TTLSecondsAfterCommit = ptr.To[int32](3600)
		Expect(k8s.Create(ctx, keeps)).To(Succeed())
		c := tu.MakeToolCall(ns, "a", "s").Tool("echo", `{"text":"a"}`).At(0, 0).Obj()
		c.Finalizers = append(c.Finalizers, keepFinalizer)
		Expect(k8s.Create(ctx, c)).To(Succeed())
		k := tu.MakeToolCall(ns, "kept", "keeps").Tool("echo", `{"text":"kept"}`).At(0, 0).Obj()
		Expect(k8s.Create(ctx, k)).To(Succeed())
		Expect(committedCall(ns, "a").Status.Result.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded))
		Expect(committedCall(ns, "kept").Status.Result.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded))
		release(ns, "a")
		Eventually(callGone(ns, "a")).Should(BeTrue(), "the default retention deletes the call")
		Consistently(callGone(ns, "kept"), 3*time.Second).Should(BeFalse(), "a session's own ttl wins")
	})
})

var _ = Describe("a session with ttlSecondsAfterCommit", func() {
	It("deletes its committed calls once their turn is complete, and keeps its place in the log", func() {
		ns := newNamespace()
		setup(processProfile(ns, shTool("echo", "cat").ConcurrencySafe("true").Obj()).PreRule("allow-all", toolgatev1alpha1.ActionAllow, ""),
			func(s *tu.AgentSessionWrapper) { s.Spec.TTLSecondsAfterCommit = ptr.To[int32](0) })
		// Created holding the spec's finalizer, to read their results
		// before they go (a call may commit and expire within
		// milliseconds).
		for i, name := range []string{"a", "b"} {
			c := tu.MakeToolCall(ns, name, "s").Tool("echo", fmt.Sprintf(`{"text":%q}`, name)).At(0, int32(i)).Of(2).Obj()
			c.Finalizers = append(c.Finalizers, keepFinalizer)
			Expect(k8s.Create(ctx, c)).To(Succeed())
		}
		for i, name := range []string{"a", "b"} {
			Expect(*committedCall(ns, name).Status.Schedule.CommitSequence).To(Equal(int64(i)))
		}
		release(ns, "a", "b")
		Eventually(callGone(ns, "a")).Should(BeTrue())
		Eventually(callGone(ns, "b")).Should(BeTrue())

		// A call sent again after its predecessor expired is not run again:
		// its place is committed.
		sendAgain := func(name string, turn int64, index, size int32, callID string) {
			GinkgoHelper()
			c := tu.MakeToolCall(ns, name, "s").Tool("echo", `{"text":"again"}`).At(turn, index).Of(size).Obj()
			c.Spec.CallID = callID
			Expect(k8s.Create(ctx, c)).To(Succeed())
			Eventually(func(g Gomega) {
				got := &toolgatev1alpha1.ToolCall{}
				g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(c), got)).To(Succeed())
				g.Expect(got.Status.Result).NotTo(BeNil())
				g.Expect(got.Status.Result.ErrorCode).To(Equal("duplicate_call"), name)
				g.Expect(got.Status.Schedule.CommitSequence).To(BeNil(), "it never enters the log")
				for _, st := range got.Status.Stages {
					g.Expect(st.Stage).NotTo(Equal("Dispatch"), "its body never runs")
				}
			}).Should(Succeed())
		}
		Eventually(func() int64 { return session(ns).Status.CommittedTurn }).Should(BeZero())
		sendAgain("a", 0, 0, 2, "a")       // as the client sent it first: same name, callID and place
		sendAgain("b-again", 0, 1, 2, "x") // another name and callID, the same place

		// The next turn goes on after a turn whose calls are gone.
		submit(ns, "c", "echo", `{"text":"c"}`, 1, 0)
		Eventually(callGone(ns, "c")).Should(BeTrue())
		Eventually(func(g Gomega) {
			st := session(ns).Status
			g.Expect(st.CommittedTurn).To(Equal(int64(1)))
			g.Expect(st.NextSequence).To(Equal(int64(3)))
			g.Expect(st.CommittedCalls).To(BeZero(), "the counts are of the calls present")
			g.Expect(st.CommitCursor).To(Equal(&toolgatev1alpha1.CallPosition{Turn: 1, Index: 0}))
		}).Should(Succeed())
		sendAgain("c", 1, 0, 1, "c")
		Consistently(func() int64 { return session(ns).Status.NextSequence }, 2*time.Second).Should(Equal(int64(3)), "no second result in the log")
	})
})

var _ = Describe("a session's retention under a backlog", Ordered, func() {
	BeforeAll(func() {
		ownManagers()
		startManager(env.Config)
	})

	It("expires a turn in the reconcile that records it complete, not one reconcile later", func() {
		ns := newNamespace()
		setup(processProfile(ns, shTool("echo", "cat").ConcurrencySafe("true").Obj()).PreRule("allow-all", toolgatev1alpha1.ActionAllow, ""),
			func(s *tu.AgentSessionWrapper) { s.Spec.TTLSecondsAfterCommit = ptr.To[int32](3600) })
		for turn, name := range []string{"c0", "c1"} {
			submit(ns, name, "echo", `{"text":"a"}`, int64(turn), 0)
			Expect(committedCall(ns, name).Status.Result.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded))
		}
		Eventually(func() int64 { return session(ns).Status.CommittedTurn }).Should(Equal(int64(1)))
		stopRunningManager()

		// The session's status one turn behind its calls, as a session
		// under load has it, and its calls due at once.
		s := session(ns)
		base := s.DeepCopy()
		s.Spec.TTLSecondsAfterCommit = ptr.To[int32](0)
		Expect(k8s.Patch(ctx, s, client.MergeFrom(base))).To(Succeed())
		base = s.DeepCopy()
		s.Status.CommittedTurn = 0
		Expect(k8s.Status().Patch(ctx, s, client.MergeFrom(base))).To(Succeed())

		r := &AgentSessionReconciler{Client: k8s, Profiles: NewProfiles(k8s), Sandboxes: &sandbox.Mounts{}, Approvals: &approval.Mounts{}, Clock: clock.RealClock{}}
		_, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(s)})
		Expect(err).NotTo(HaveOccurred())
		Expect(session(ns).Status.CommittedTurn).To(Equal(int64(1)))
		for _, name := range []string{"c0", "c1"} {
			c := &toolgatev1alpha1.ToolCall{}
			err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, c)
			Expect(apierrors.IsNotFound(err) || (err == nil && toolcalls.Deleting(c))).To(BeTrue(), name+" is still held")
		}
	})
})
