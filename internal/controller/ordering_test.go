package controller

import (
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	tu "github.com/toolgate/toolgate/internal/testutil"
)

// loggingTool logs "start ID" and "end ID" (ID from the arguments) around
// a sleep, then prints ID.
func loggingTool(name, sleep string, parallel bool) toolgatev1alpha1.ToolDefinition {
	script := `id=$(sed 's/.*"id":"\([A-Za-z0-9]*\)".*/\1/'); echo "start $id" >> log; sleep ` + sleep + `; echo "end $id" >> log; printf %s "$id"`
	w := shTool(name, script)
	if parallel {
		w.ConcurrencySafe("args.id != ''")
	}
	return w.Obj()
}

// logIndex is the position of line in the workspace log (-1 if absent).
func logIndex(ns, line string) int {
	for i, l := range strings.Split(workspaceFile(ns, "log"), "\n") {
		if l == line {
			return i
		}
	}
	return -1
}

var _ = Describe("ordering through the controllers", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	It("commits a mixed turn in model order while the first parallel body is slowest, and starts the next turn only after", func() {
		setup(processProfile(ns,
			loggingTool("slow", "1", true), loggingTool("fast", "0", true), loggingTool("excl", "0", false),
		).PreRule("allow-all", toolgatev1alpha1.ActionAllow, "").PostRule(toolgatev1alpha1.PostRule{
			Name: "note", Action: toolgatev1alpha1.PostAccept, Contexts: []string{"checked"},
		}))
		submit(ns, "a", "slow", `{"id":"A"}`, 1, 0, 4)
		submit(ns, "b", "fast", `{"id":"B"}`, 1, 1, 4)
		submit(ns, "c", "excl", `{"id":"C"}`, 1, 2, 4)
		submit(ns, "d", "fast", `{"id":"D"}`, 1, 3, 4)
		// Turn 2 arrives while turn 1 runs: it must wait for turn 1.
		submit(ns, "e", "fast", `{"id":"E"}`, 2, 0)

		var seq []int64
		var modes []toolgatev1alpha1.ExecutionMode
		for _, name := range []string{"a", "b", "c", "d", "e"} {
			c := committedCall(ns, name, 30*time.Second)
			Expect(c.Status.Result.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded), c.Status.Result.Message)
			seq = append(seq, *c.Status.Schedule.CommitSequence)
			modes = append(modes, c.Status.Schedule.ExecutionMode)
		}
		Expect(seq).To(Equal([]int64{0, 1, 2, 3, 4}), "commit sequence must equal model order")
		Expect(modes).To(Equal([]toolgatev1alpha1.ExecutionMode{"Parallel", "Parallel", "Exclusive", "Parallel", "Parallel"}))

		log := workspaceFile(ns, "log")
		Expect(logIndex(ns, "end B")).To(BeNumerically("<", logIndex(ns, "end A")), "B should finish before A:\n"+log)
		Expect(logIndex(ns, "start C")).To(BeNumerically(">", logIndex(ns, "end A")), "the exclusive call is a barrier:\n"+log)
		Expect(logIndex(ns, "start D")).To(BeNumerically(">", logIndex(ns, "end C")), "nothing starts before the barrier commits:\n"+log)
		Expect(logIndex(ns, "start E")).To(BeNumerically(">", logIndex(ns, "end D")), "turn 2 waits for turn 1:\n"+log)

		s := &toolgatev1alpha1.AgentSession{}
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "s"}, s)).To(Succeed())
			g.Expect(s.Status.CommittedTurn).To(Equal(int64(2)))
			g.Expect(s.Status.NextSequence).To(Equal(int64(5)))
			g.Expect(s.Status.Counts.Succeeded).To(Equal(int64(5)))
			g.Expect(s.Status.CommitCursor).To(Equal(&toolgatev1alpha1.CallPosition{Turn: 2, Index: 0}))
			g.Expect(s.Status.DeferredContexts).To(HaveLen(1))
			g.Expect(s.Status.DeferredContexts[0].CallID).To(Equal("call_e"))
		}).Should(Succeed())
	})

	It("refuses a call that arrives for a turn after a later turn started, and still settles it once", func() {
		setup(processProfile(ns, loggingTool("fast", "0", true)).PreRule("allow-all", toolgatev1alpha1.ActionAllow, ""))
		submit(ns, "t2", "fast", `{"id":"T2"}`, 2, 0)
		committedCall(ns, "t2")
		submit(ns, "t1", "fast", `{"id":"T1"}`, 1, 0)
		c := committedCall(ns, "t1")
		Expect(c.Status.Result.ErrorCode).To(Equal("turn_closed"))
		Expect(*c.Status.Schedule.CommitSequence).To(Equal(int64(1)))
		Expect(logIndex(ns, "start T1")).To(Equal(-1), "the refused call's body must not run")
	})

	It("lets later turns go on when a refused late call declared a turn of several calls that never come", func() {
		setup(processProfile(ns, loggingTool("fast", "0", true), loggingTool("slow", "2", false)).PreRule("allow-all", toolgatev1alpha1.ActionAllow, ""))
		submit(ns, "t0", "fast", `{"id":"T0"}`, 0, 0)
		committedCall(ns, "t0")
		// Turn 2's first call is a barrier: its second waits for it.
		submit(ns, "t2a", "slow", `{"id":"A"}`, 2, 0, 2)
		submit(ns, "t2b", "fast", `{"id":"B"}`, 2, 1, 2)
		Eventually(func() int { return logIndex(ns, "start A") }, 30*time.Second, 50*time.Millisecond).Should(BeNumerically(">=", 0))
		// Turn 1 arrives while turn 2 runs, declaring two calls: it is
		// refused, and no second call of it will ever be ordered.
		submit(ns, "late", "fast", `{"id":"L"}`, 1, 0, 2)
		Expect(committedCall(ns, "late").Status.Result.ErrorCode).To(Equal("turn_closed"))
		Expect(committedCall(ns, "t2a").Status.Result.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded))
		Expect(committedCall(ns, "t2b").Status.Result.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded))
		Expect(logIndex(ns, "start L")).To(Equal(-1), "the refused call's body must not run")
		s := &toolgatev1alpha1.AgentSession{}
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "s"}, s)).To(Succeed())
			g.Expect(s.Status.CommittedTurn).To(Equal(int64(2)))
			g.Expect(s.Status.CurrentTurn).To(Equal(int64(2)))
			g.Expect(s.Status.CommittedCalls).To(Equal(int64(4)))
		}).Should(Succeed())
	})

	It("holds a higher index of a declared turn until the lower one arrives, then runs both in model order", func() {
		setup(processProfile(ns, loggingTool("fast", "0", true)).PreRule("allow-all", toolgatev1alpha1.ActionAllow, ""))
		submit(ns, "second", "fast", `{"id":"S"}`, 0, 1, 2)
		Consistently(func() toolgatev1alpha1.ExecutionMode {
			c := &toolgatev1alpha1.ToolCall{}
			Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "second"}, c)).To(Succeed())
			return c.Status.Schedule.ExecutionMode
		}, time.Second).Should(BeEmpty(), "index 1 must not start before index 0 exists")
		submit(ns, "first", "fast", `{"id":"F"}`, 0, 0, 2)
		first, second := committedCall(ns, "first"), committedCall(ns, "second")
		Expect(*first.Status.Schedule.CommitSequence).To(Equal(int64(0)))
		Expect(*second.Status.Schedule.CommitSequence).To(Equal(int64(1)))
		// Pre-execute handling follows model order: the second call is
		// dispatched only after the first's dispatch is durable. Their
		// bodies are parallel-safe and may overlap, so which shell writes
		// its start line first is not an order the seed promises.
		Expect(first.Status.StartTime).NotTo(BeNil())
		Expect(second.Status.StartTime).NotTo(BeNil())
		Expect(second.Status.StartTime.Before(first.Status.StartTime)).To(BeFalse(), "dispatched %s before %s", second.Status.StartTime, first.Status.StartTime)
		Expect(logIndex(ns, "start F")).To(BeNumerically(">=", 0))
		Expect(logIndex(ns, "start S")).To(BeNumerically(">=", 0))
	})

	It("releases a turn's deferred contexts only once every call it declared has committed", func() {
		setup(processProfile(ns, loggingTool("fast", "0", true)).PreRule("allow-all", toolgatev1alpha1.ActionAllow, "").PostRule(toolgatev1alpha1.PostRule{
			Name: "note", Action: toolgatev1alpha1.PostAccept, Contexts: []string{"checked"},
		}))
		submit(ns, "a", "fast", `{"id":"A"}`, 0, 0, 2)
		committedCall(ns, "a")
		s := &toolgatev1alpha1.AgentSession{}
		Consistently(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "s"}, s)).To(Succeed())
			g.Expect(s.Status.DeferredContexts).To(BeEmpty())
			g.Expect(s.Status.CommittedTurn).To(Equal(int64(-1)))
		}, time.Second).Should(Succeed(), "call 1 of turn 0 is still to come")
		submit(ns, "b", "fast", `{"id":"B"}`, 0, 1, 2)
		committedCall(ns, "b")
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "s"}, s)).To(Succeed())
			g.Expect(s.Status.CommittedTurn).To(Equal(int64(0)))
			g.Expect(s.Status.DeferredContexts).To(HaveLen(2))
		}).Should(Succeed())
	})

	It("refuses a second call at the same place, or with the same callID, before it runs, and keeps it out of the log", func() {
		setup(processProfile(ns, loggingTool("fast", "0", true)).PreRule("allow-all", toolgatev1alpha1.ActionAllow, ""))
		submit(ns, "a", "fast", `{"id":"A"}`, 0, 0, 2)
		committedCall(ns, "a")
		submit(ns, "twin", "fast", `{"id":"T"}`, 0, 0, 2)
		dup := tu.MakeToolCall(ns, "same-id", "s").Tool("fast", `{"id":"I"}`).At(0, 1).Of(2).Obj()
		dup.Spec.CallID = "call_a"
		Expect(k8s.Create(ctx, dup)).To(Succeed())
		for _, name := range []string{"twin", "same-id"} {
			c := &toolgatev1alpha1.ToolCall{}
			Eventually(func(g Gomega) {
				g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, c)).To(Succeed())
				g.Expect(c.Status.Result).NotTo(BeNil())
			}).Should(Succeed())
			Expect(c.Status.Result.ErrorCode).To(Equal("duplicate_call"), name)
			Expect(c.Status.Phase).To(Equal(toolgatev1alpha1.PhaseSettled), name)
			Expect(c.Status.Schedule.CommitSequence).To(BeNil(), name)
		}
		Expect(logIndex(ns, "start T")).To(Equal(-1), "a duplicate's body must not run")
		Expect(logIndex(ns, "start I")).To(Equal(-1), "a duplicate's body must not run")
		submit(ns, "b", "fast", `{"id":"B"}`, 0, 1, 2)
		Expect(*committedCall(ns, "b").Status.Schedule.CommitSequence).To(Equal(int64(1)))
	})

	It("refuses a call whose turnSize disagrees with its turn's", func() {
		setup(processProfile(ns, loggingTool("fast", "0", true)).PreRule("allow-all", toolgatev1alpha1.ActionAllow, ""))
		submit(ns, "a", "fast", `{"id":"A"}`, 0, 0, 2)
		submit(ns, "odd", "fast", `{"id":"O"}`, 0, 1, 3)
		c := &toolgatev1alpha1.ToolCall{}
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "odd"}, c)).To(Succeed())
			g.Expect(c.Status.Result).NotTo(BeNil())
		}).Should(Succeed())
		Expect(c.Status.Result.ErrorCode).To(Equal("turn_size_mismatch"))
		Expect(logIndex(ns, "start O")).To(Equal(-1))
		submit(ns, "b", "fast", `{"id":"B"}`, 0, 1, 2)
		Expect(*committedCall(ns, "b").Status.Schedule.CommitSequence).To(Equal(int64(1)))
	})

	It("never reuses a sequence number, even after a committed call is deleted", func() {
		setup(processProfile(ns, loggingTool("fast", "0", true)).PreRule("allow-all", toolgatev1alpha1.ActionAllow, ""))
		submit(ns, "a", "fast", `{"id":"A"}`, 0, 0, 2)
		submit(ns, "b", "fast", `{"id":"B"}`, 0, 1, 2)
		Expect(*committedCall(ns, "b").Status.Schedule.CommitSequence).To(Equal(int64(1)))
		s := &toolgatev1alpha1.AgentSession{}
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "s"}, s)).To(Succeed())
			g.Expect(s.Status.NextSequence).To(Equal(int64(2)))
			g.Expect(s.Status.CommittedTurn).To(Equal(int64(0)))
		}).Should(Succeed())
		Expect(k8s.Delete(ctx, committedCall(ns, "b"))).To(Succeed())
		submit(ns, "c", "fast", `{"id":"C"}`, 1, 0)
		Expect(*committedCall(ns, "c").Status.Schedule.CommitSequence).To(Equal(int64(2)))
	})

	It("never exceeds maxParallel, and does run calls side by side", func() {
		setup(processProfile(ns, loggingTool("slow", "0.4", true)).PreRule("allow-all", toolgatev1alpha1.ActionAllow, ""),
			func(s *tu.AgentSessionWrapper) { s.MaxParallel(2) })
		for i := range 6 {
			submit(ns, fmt.Sprintf("c%d", i), "slow", fmt.Sprintf(`{"id":"C%d"}`, i), 0, int32(i), 6)
		}
		for i := range 6 {
			c := committedCall(ns, fmt.Sprintf("c%d", i), 30*time.Second)
			Expect(*c.Status.Schedule.CommitSequence).To(Equal(int64(i)))
		}
		inflight, peak := 0, 0
		for _, l := range strings.Split(strings.TrimSpace(workspaceFile(ns, "log")), "\n") {
			if strings.HasPrefix(l, "start") {
				inflight++
			} else {
				inflight--
			}
			peak = max(peak, inflight)
		}
		Expect(peak).To(Equal(2), workspaceFile(ns, "log"))
	})
})

var _ = Describe("nested calls", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	nestedCall := func(name, parent, id string) {
		c := tu.MakeToolCall(ns, name, "s").Tool("fast", `{"id":"`+id+`"}`).At(0, 0).Parent(parent).Obj()
		Expect(k8s.Create(ctx, c)).To(Succeed())
	}
	settledCall := func(name string) *toolgatev1alpha1.ToolCall {
		c := &toolgatev1alpha1.ToolCall{}
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, c)).To(Succeed())
			g.Expect(c.Status.Result).NotTo(BeNil())
		}, 20*time.Second).Should(Succeed())
		return c
	}

	It("runs within its executing parent's slot, even behind an exclusive parent, carries no contexts, and stays out of the log", func() {
		setup(processProfile(ns, loggingTool("slow", "2", false), loggingTool("fast", "0", true)).
			PreRule("allow-all", toolgatev1alpha1.ActionAllow, "").
			PostRule(toolgatev1alpha1.PostRule{Name: "note", Action: toolgatev1alpha1.PostAccept, Contexts: []string{"checked"}}))
		submit(ns, "parent", "slow", `{"id":"P"}`, 0, 0)
		Eventually(func() int { return logIndex(ns, "start P") }, 30*time.Second).Should(BeNumerically(">=", 0))
		nestedCall("child", "parent", "C")
		child := settledCall("child")
		Expect(child.Status.Result.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded), child.Status.Result.Message)
		Expect(child.Status.Result.Contexts).To(BeEmpty(), "a nested call omits additional contexts")
		Expect(child.Status.Schedule.CommitSequence).To(BeNil())
		Expect(child.Status.Phase).To(Equal(toolgatev1alpha1.PhaseSettled))
		parent := committedCall(ns, "parent", 20*time.Second)
		Expect(logIndex(ns, "end C")).To(BeNumerically("<", logIndex(ns, "end P")), "the child ran while its parent's body ran")
		Expect(*parent.Status.Schedule.CommitSequence).To(Equal(int64(0)))
		Expect(parent.Status.Token).NotTo(BeEmpty())
	})

	It("refuses a nested call whose parent does not exist, belongs to another session, or is not executing", func() {
		setup(processProfile(ns, loggingTool("fast", "0", true)).PreRule("allow-all", toolgatev1alpha1.ActionAllow, ""))
		nestedCall("orphan", "nobody", "O")
		Expect(settledCall("orphan").Status.Result.ErrorCode).To(Equal("invalid_parent"))

		other := tu.MakeAgentSession(ns, "other", "p").Obj()
		Expect(k8s.Create(ctx, other)).To(Succeed())
		foreign := tu.MakeToolCall(ns, "foreign", "other").Tool("fast", `{"id":"F"}`).Obj()
		Expect(k8s.Create(ctx, foreign)).To(Succeed())
		nestedCall("crossing", "foreign", "X")
		Expect(settledCall("crossing").Status.Result.ErrorCode).To(Equal("invalid_parent"))

		submit(ns, "done", "fast", `{"id":"D"}`, 0, 0)
		committedCall(ns, "done")
		nestedCall("late", "done", "L")
		late := settledCall("late")
		Expect(late.Status.Result.ErrorCode).To(Equal("invalid_parent"))
		for _, id := range []string{"O", "X", "L"} {
			Expect(logIndex(ns, "start "+id)).To(Equal(-1), "a refused nested call must not run")
		}
	})
})

var _ = Describe("a session's workspace claim", func() {
	It("never adopts a claim of the expected name that it did not create, and leaves it when deleted", func() {
		ns := newNamespace()
		planted := &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s-workspace"},
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
			},
		}
		Expect(k8s.Create(ctx, planted)).To(Succeed())
		Expect(k8s.Create(ctx, processProfile(ns, loggingTool("fast", "0", true)).Obj())).To(Succeed())
		s := tu.MakeAgentSession(ns, "s", "p").ClaimTemplate("1Gi").Obj()
		Expect(k8s.Create(ctx, s)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(s), s)).To(Succeed())
			ready := meta.FindStatusCondition(s.Status.Conditions, toolgatev1alpha1.ConditionReady)
			g.Expect(ready).NotTo(BeNil())
			g.Expect(ready.Reason).To(Equal(toolgatev1alpha1.AgentSessionReasonWorkspaceConflict))
			g.Expect(s.Status.WorkspaceClaimName).To(BeEmpty())
		}, 30*time.Second).Should(Succeed())
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(planted), planted)).To(Succeed())
		Expect(planted.OwnerReferences).To(BeEmpty(), "the claim was adopted")
		Expect(k8s.Delete(ctx, s)).To(Succeed())
		Eventually(func() bool { return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(s), s)) }, 30*time.Second).Should(BeTrue())
		Consistently(func() error { return k8s.Get(ctx, client.ObjectKeyFromObject(planted), planted) }, time.Second).Should(Succeed())
	})
})
