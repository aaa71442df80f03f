package controller

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	promtestutil "github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	eventsv1 "k8s.io/api/events/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	tu "github.com/toolgate/toolgate/internal/testutil"
)

// crashAfter makes a manager's client stop the manager right after the
// n-th ToolCall status write succeeded, failing the reconcile that made it
// (so nothing that follows the write in that reconcile runs) and every
// later write: a crash right after the n-th boundary became durable.
func crashAfter(ns string, n int64, writes *atomic.Int64) func(*ctrl.Options) {
	return crashWhen(ns, func(*toolgatev1alpha1.ToolCall) bool { return writes.Load() >= n },
		func(*toolgatev1alpha1.ToolCall) bool { return writes.Add(1) == n })
}

// crashAfterResult stops the manager right after a call's result was
// written, failing the reconcile that wrote it.
func crashAfterResult(ns string) func(*ctrl.Options) {
	var crashed atomic.Bool
	return crashWhen(ns, func(*toolgatev1alpha1.ToolCall) bool { return crashed.Load() }, func(tc *toolgatev1alpha1.ToolCall) bool {
		return tc.Status.Result != nil && crashed.CompareAndSwap(false, true)
	})
}

// crashBeforeResult stops the manager instead of writing the first result:
// a crash between the live result and the durable one.
func crashBeforeResult(ns string) func(*ctrl.Options) {
	return crashWhen(ns, func(tc *toolgatev1alpha1.ToolCall) bool { return tc.Status.Result != nil },
		func(*toolgatev1alpha1.ToolCall) bool { return false })
}

// crashWhen makes a manager's client stop the manager instead of a status
// write of a ToolCall of ns for which before reports true, and right after
// a successful one for which after reports true; either way the reconcile
// that made the write fails, as it would in a crash. Calls of other
// namespaces (an earlier spec's, still settling) neither count nor crash.
func crashWhen(ns string, before, after func(*toolgatev1alpha1.ToolCall) bool) func(*ctrl.Options) {
	return intercepted(interceptor.Funcs{
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			tc, ok := obj.(*toolgatev1alpha1.ToolCall)
			if !ok || sub != "status" || tc.Namespace != ns {
				return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
			}
			if before(tc) {
				stopManager()
				return errors.New("crashed")
			}
			if err := c.SubResource(sub).Patch(ctx, obj, patch, opts...); err != nil {
				return err
			}
			if after(tc) {
				stopManager()
				return errors.New("crashed after the write")
			}
			return nil
		},
	})
}

// approveAll decides every request in ns as soon as it appears, until stop.
func approveAll(ns string, stop <-chan struct{}) {
	go func() {
		defer GinkgoRecover()
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			list := &toolgatev1alpha1.ApprovalRequestList{}
			if k8s.List(ctx, list, client.InNamespace(ns)) != nil {
				continue
			}
			for i := range list.Items {
				if ar := &list.Items[i]; ar.Spec.Decision == nil {
					decide(ar, toolgatev1alpha1.DecisionApprove)
				}
			}
		}
	}()
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// stopRunningManager stops the manager unless it already stopped (crashed).
func stopRunningManager() {
	stopManager()
	<-managerDone
}

func bothCommitted(ns string) bool {
	for _, name := range []string{"w", "r"} {
		c := &toolgatev1alpha1.ToolCall{}
		if k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, c) != nil || c.Status.Phase != toolgatev1alpha1.PhaseCommitted {
			return false
		}
	}
	return true
}

var _ = Describe("crash safety", Ordered, func() {
	// The scenario: one turn of a call that needs approval and runs a body
	// that is not idempotent ("w"), and an idempotent parallel read ("r").
	scenario := func(ns string) {
		w := shTool("write", "echo ran >> wruns; sleep 0.3; echo written")
		r := shTool("read", "echo ran >> rruns; echo read").ConcurrencySafe("true")
		r.Idempotent = true
		setup(processProfile(ns, w.Obj(), r.Obj()).
			PreRule("ask-writes", toolgatev1alpha1.ActionAsk, "", "write").
			PreRule("allow-reads", toolgatev1alpha1.ActionAllow, "", "read"))
		submit(ns, "w", "write", `{}`, 0, 0, 2)
		submit(ns, "r", "read", `{}`, 0, 1, 2)
	}

	BeforeAll(ownManagers)

	It("yields one result per call, one body run at most, one ApprovalRequest and model order, whatever boundary the manager dies at", func() {
		// A reference run counts the boundaries.
		var writes atomic.Int64
		ns := newNamespace()
		startManager(env.Config, crashAfter(ns, 1<<30, &writes))
		stop := make(chan struct{})
		approveAll(ns, stop)
		scenario(ns)
		committedCall(ns, "w")
		committedCall(ns, "r")
		close(stop)
		stopRunningManager()
		total := writes.Load()
		// w: its admission with its question, the boundary before its
		// body, its result; r: its admission with that boundary, its
		// result.
		Expect(total).To(BeNumerically(">=", 5))
		GinkgoWriter.Printf("the scenario makes %d ToolCall status writes\n", total)

		for n := int64(1); n <= total; n++ {
			By(fmt.Sprintf("crashing after status write %d of %d", n, total))
			ns := newNamespace()
			writes.Store(0)
			stop := make(chan struct{})
			approveAll(ns, stop)
			startManager(env.Config, crashAfter(ns, n, &writes))
			scenario(ns)
			// Timing varies the number of writes: a run may finish before
			// its n-th write, and then there is no crash to recover from.
			Eventually(func() bool { return isClosed(managerDone) || bothCommitted(ns) }, 30*time.Second).Should(BeTrue())
			stopRunningManager()

			startManager(env.Config)
			wc, rc := committedCall(ns, "w", 30*time.Second), committedCall(ns, "r", 30*time.Second)
			s := &toolgatev1alpha1.AgentSession{}
			// One Settled Event per call that did not succeed, none for a
			// success.
			events := map[string]int{}
			if wc.Status.Result.Outcome != toolgatev1alpha1.OutcomeSucceeded {
				events["w"] = 1
			}
			Eventually(func(g Gomega) {
				g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "s"}, s)).To(Succeed())
				g.Expect(s.Status.NextSequence).To(Equal(int64(2)))
				g.Expect(settledEvents(ns)).To(Equal(events))
			}).Should(Succeed())
			close(stop)
			stopRunningManager()

			Expect(*wc.Status.Schedule.CommitSequence).To(Equal(int64(0)))
			Expect(*rc.Status.Schedule.CommitSequence).To(Equal(int64(1)))
			Expect(rc.Status.Result.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded), rc.Status.Result.Message)
			runs := bodyRuns(ns, "wruns")
			GinkgoWriter.Printf("crash after write %d: w %s %s (body runs %d), r %s\n", n, wc.Status.Result.Outcome, wc.Status.Result.ErrorCode, runs, rc.Status.Result.Outcome)
			Expect(runs).To(BeNumerically("<=", 1), "a body not declared idempotent ran twice")
			switch wc.Status.Result.Outcome {
			case toolgatev1alpha1.OutcomeSucceeded:
				Expect(runs).To(Equal(1))
			default:
				Expect(wc.Status.Result.ErrorCode).To(Equal("interrupted"), wc.Status.Result.Message)
			}
			list := &toolgatev1alpha1.ApprovalRequestList{}
			Expect(k8s.List(ctx, list, client.InNamespace(ns))).To(Succeed())
			Expect(list.Items).To(HaveLen(1), "one question per call")
			Consistently(func() map[string]int { return settledEvents(ns) }, 200*time.Millisecond).Should(Equal(events))
		}
	})

	It("closes the question of a call settled without its answer, and announces it once, even when the manager dies right after the result", func() {
		scenario := func(ns string) {
			setup(processProfile(ns, shTool("write", "echo written").Obj()).PreRule("ask-writes", toolgatev1alpha1.ActionAsk, "", "write"))
			submit(ns, "w", "write", `{}`, 0, 0)
			// Cancel the call while its question is open.
			ar := &toolgatev1alpha1.ApprovalRequest{}
			Eventually(func() error { return k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "w"}, ar) }, 20*time.Second).Should(Succeed())
			tc := &toolgatev1alpha1.ToolCall{}
			Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "w"}, tc)).To(Succeed())
			base := tc.DeepCopy()
			tc.Spec.CancelRequested = true
			Expect(k8s.Patch(ctx, tc, client.MergeFrom(base))).To(Succeed())
		}
		ns := newNamespace()
		startManager(env.Config, crashAfterResult(ns))
		scenario(ns)
		Eventually(func() bool { return isClosed(managerDone) }, 30*time.Second).Should(BeTrue())
		stopRunningManager()
		wc := committedCall(ns, "w", time.Second)
		Expect(wc.Status.Result.ErrorCode).To(Equal("cancelled"))

		startManager(env.Config)
		Eventually(func(g Gomega) {
			ar := &toolgatev1alpha1.ApprovalRequest{}
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "w"}, ar)).To(Succeed())
			g.Expect(ar.Status.Phase).To(Equal(toolgatev1alpha1.ApprovalCancelled))
			g.Expect(settledEvents(ns)).To(Equal(map[string]int{"w": 1}))
		}, 20*time.Second).Should(Succeed())
		stopRunningManager()
	})
})

var _ = Describe("live result before the durable one", Ordered, func() {
	BeforeAll(ownManagers)

	It("announces the frozen outcome before writing the result, and a crash between them still yields one result and one announcement", func() {
		ns := newNamespace()
		startManager(env.Config, crashBeforeResult(ns))
		// It fails: a success is announced by the metrics only, a failure
		// by an Event too, after its frozen outcome is in the status.
		echo := shTool("echo", "cat; exit 3")
		echo.Idempotent = true
		setup(processProfile(ns, echo.Obj()).PreRule("allow-all", toolgatev1alpha1.ActionAllow, ""))
		submit(ns, "c", "echo", `{}`, 0, 0)
		Eventually(func() bool { return isClosed(managerDone) }, 30*time.Second).Should(BeTrue())
		stopRunningManager()
		tc := &toolgatev1alpha1.ToolCall{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "c"}, tc)).To(Succeed())
		Expect(tc.Status.Result).To(BeNil(), "the durable result was not written")
		Expect(tc.Status.Checkpoint).NotTo(BeNil())
		Expect(tc.Status.Checkpoint.Failure).NotTo(BeNil(), "the frozen outcome is in the status")
		Expect(tc.Status.Checkpoint.Failure.Code).To(Equal("tool_error"))
		Expect(settledEvents(ns)).To(Equal(map[string]int{"c": 1}), "the live result came first")

		startManager(env.Config)
		Expect(committedCall(ns, "c").Status.Result.ErrorCode).To(Equal("tool_error"))
		Consistently(func() map[string]int { return settledEvents(ns) }, time.Second).Should(Equal(map[string]int{"c": 1}))
		stopRunningManager()
	})

	// crashThenRestart runs the call "c" of tool on a manager that stops
	// instead of writing its result, then on a fresh one, and returns the
	// committed call.
	crashThenRestart := func(ns string, tool *tu.ToolWrapper, meanwhile ...func()) *toolgatev1alpha1.ToolCall {
		startManager(env.Config, crashBeforeResult(ns))
		setup(processProfile(ns, tool.Obj()).PreRule("allow-all", toolgatev1alpha1.ActionAllow, ""))
		submit(ns, "c", tool.Obj().Name, `{}`, 0, 0)
		Eventually(func() bool { return isClosed(managerDone) }, 30*time.Second).Should(BeTrue())
		stopRunningManager()
		for _, f := range meanwhile {
			f()
		}
		startManager(env.Config)
		defer stopRunningManager()
		return committedCall(ns, "c")
	}

	It("commits the failure it announced when the crash lost the body's work, and never reruns a body that is not idempotent", func() {
		ns := newNamespace()
		// The process sandbox loses the body with the manager: the next
		// one finds the attempt interrupted. The announced tool_error is
		// what the call commits.
		tc := crashThenRestart(ns, shTool("fails-once-only", "echo ran >> runs; exit 3"))
		Expect(tc.Status.Result.Outcome).To(Equal(toolgatev1alpha1.OutcomeFailed))
		Expect(tc.Status.Result.ErrorCode).To(Equal("tool_error"), tc.Status.Result.Message)
		Expect(tc.Status.Result.Message).To(ContainSubstring("exit code 3"), "the message frozen with it is kept")
		Expect(bodyRuns(ns, "runs")).To(Equal(1))
		Expect(settledEvents(ns)).To(Equal(map[string]int{"c": 1}))
	})

	It("commits the failure it announced without running an idempotent body again: the frozen outcome is durable", func() {
		ns := newNamespace()
		flaky := shTool("flaky", "echo ran >> runs; if [ -f failed ]; then echo fine; else touch failed; exit 3; fi")
		flaky.Idempotent = true
		tc := crashThenRestart(ns, flaky)
		Expect(bodyRuns(ns, "runs")).To(Equal(1), "the body ran again after its outcome was announced")
		Expect(tc.Status.Result.ErrorCode).To(Equal("tool_error"), "the outcome announced is the one committed")
		Expect(settledEvents(ns)).To(Equal(map[string]int{"c": 1}))
	})

	It("commits the failure it announced when its Settled Event is gone: no Event decides a result", func() {
		ns := newNamespace()
		// Events are best effort and expire (an hour by default): here
		// every Event of the namespace is gone before the next manager
		// starts, which then finds the body's work lost with the first.
		tc := crashThenRestart(ns, shTool("fails-once-only", "echo ran >> runs; exit 3"), func() {
			Expect(k8s.DeleteAllOf(ctx, &eventsv1.Event{}, client.InNamespace(ns))).To(Succeed())
			Eventually(func() map[string]int { return settledEvents(ns) }).Should(BeEmpty())
		})
		Expect(tc.Status.Result.ErrorCode).To(Equal("tool_error"), tc.Status.Result.Message)
		Expect(bodyRuns(ns, "runs")).To(Equal(1))
	})

	It("counts a success only once it is durable: a crash that loses the work announced nothing else", func() {
		ns := newNamespace()
		succeeded := func() float64 {
			return promtestutil.ToFloat64(callsSettled.WithLabelValues("succeeds-once", string(toolgatev1alpha1.OutcomeSucceeded), "none"))
		}
		before := succeeded()
		tc := crashThenRestart(ns, shTool("succeeds-once", "echo ran >> runs; echo done"))
		Expect(tc.Status.Result.ErrorCode).To(Equal("interrupted"), "the body is not idempotent and its output went with the manager")
		Expect(succeeded()).To(Equal(before), "nobody was told of a success the call never commits")
		Expect(settledEvents(ns)).To(Equal(map[string]int{"c": 1}))
	})
})

// eventsAbout lists the Events in ns regarding the object of kind and name.
func eventsAbout(ns, kind, name string) []eventsv1.Event {
	list := &eventsv1.EventList{}
	Expect(k8s.List(ctx, list, client.InNamespace(ns))).To(Succeed())
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.Kind == kind && e.Regarding.Name == name {
			out = append(out, e)
		}
	}
	return out
}

// histogramCount is how many observations a histogram of vec holds under
// label.
func histogramCount(vec *prometheus.HistogramVec, label string) uint64 {
	m := &dto.Metric{}
	Expect(vec.WithLabelValues(label).(prometheus.Metric).Write(m)).To(Succeed())
	return m.GetHistogram().GetSampleCount()
}

// settledEvents counts the Settled Events in ns by the call they regard.
func settledEvents(ns string) map[string]int {
	list := &eventsv1.EventList{}
	Expect(k8s.List(ctx, list, client.InNamespace(ns))).To(Succeed())
	out := map[string]int{}
	for _, e := range list.Items {
		if e.Reason == "Settled" && e.Regarding.Kind == "ToolCall" {
			out[e.Regarding.Name]++
		}
	}
	return out
}
