package controller

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// longTool records its process group (the runner starts each tool as a
// group leader) in pid, then sleeps; only a body left running writes
// marker.
func longTool() toolgatev1alpha1.ToolDefinition {
	w := shTool("long", "echo $$ > pid; sleep 30; echo finished > marker; echo done").ConcurrencySafe("true")
	t := w.Obj()
	t.TimeoutSeconds = 120
	return t
}

// runningGroup waits until the long tool runs in ns and returns its process
// group; the group is killed when the spec ends, whatever happened.
func runningGroup(ns string) int {
	var pgid int
	Eventually(func() (err error) {
		pgid, err = strconv.Atoi(strings.TrimSpace(workspaceFile(ns, "pid")))
		return err
	}, 30*time.Second, 20*time.Millisecond).Should(Succeed())
	DeferCleanup(func() { _ = syscall.Kill(-pgid, syscall.SIGKILL) })
	return pgid
}

// groupRunning reports whether a process of group pgid is still running (a
// zombie waiting to be reaped is not).
func groupRunning(pgid int) bool {
	entries, err := os.ReadDir("/proc")
	Expect(err).NotTo(HaveOccurred())
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // not a process, or gone meanwhile
		}
		// pid (comm) state ppid pgrp ...
		s := string(data)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 2 && f[2] == strconv.Itoa(pgid) && f[0] != "Z" {
			return true
		}
	}
	return false
}

func deleteCall(ns, name string) {
	c := &toolgatev1alpha1.ToolCall{}
	Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, c)).To(Succeed())
	Expect(k8s.Delete(ctx, c)).To(Succeed())
}

func callGone(ns, name string) func() bool {
	return func() bool {
		return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &toolgatev1alpha1.ToolCall{}))
	}
}

func session(ns string) *toolgatev1alpha1.AgentSession {
	s := &toolgatev1alpha1.AgentSession{}
	Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "s"}, s)).To(Succeed())
	return s
}

var _ = Describe("deleting a call", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	It("stops its running body before the object goes, settles it once as cancelled, and lets the next turn go on", func() {
		setup(processProfile(ns, longTool(), loggingTool("fast", "0", true)).PreRule("allow-all", toolgatev1alpha1.ActionAllow, ""))
		submit(ns, "c", "long", `{}`, 0, 0)
		pgid := runningGroup(ns)
		deleteCall(ns, "c")

		Eventually(callGone(ns, "c"), 20*time.Second, 20*time.Millisecond).Should(BeTrue())
		Expect(groupRunning(pgid)).To(BeFalse(), "the call's object went while its subprocess still ran")
		Expect(workspaceFile(ns, "marker")).To(BeEmpty())
		Eventually(func() map[string]int { return settledEvents(ns) }).Should(Equal(map[string]int{"c": 1}))

		submit(ns, "next", "fast", `{"id":"N"}`, 1, 0)
		Expect(*committedCall(ns, "next").Status.Schedule.CommitSequence).To(Equal(int64(1)), "the deleted call kept its place in the log")
		Eventually(func(g Gomega) {
			st := session(ns).Status
			g.Expect(st.NextSequence).To(Equal(int64(2)))
			g.Expect(st.CommittedTurn).To(Equal(int64(1)))
		}).Should(Succeed())
		Consistently(func() string { return workspaceFile(ns, "marker") }, time.Second).Should(BeEmpty())
	})

	It("in the middle of a turn: its work stops, it commits cancelled in its place, and the later calls and turns commit in model order", func() {
		setup(processProfile(ns, longTool(), loggingTool("slow", "1.5", true), loggingTool("slower", "3", true), loggingTool("fast", "0", true)).
			PreRule("allow-all", toolgatev1alpha1.ActionAllow, ""))
		submit(ns, "a", "slow", `{"id":"A"}`, 0, 0, 3)
		submit(ns, "b", "long", `{}`, 0, 1, 3)
		submit(ns, "c", "slower", `{"id":"C"}`, 0, 2, 3)
		pgid := runningGroup(ns)
		deleteCall(ns, "b")

		// The deleted call keeps its place until its turn is complete.
		b := &toolgatev1alpha1.ToolCall{}
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "b"}, b)).To(Succeed())
			g.Expect(b.Status.Phase).To(Equal(toolgatev1alpha1.PhaseCommitted))
		}, 20*time.Second, 20*time.Millisecond).Should(Succeed())
		Expect(b.DeletionTimestamp).NotTo(BeNil())
		Expect(b.Status.Result.ErrorCode).To(Equal("cancelled"))
		Expect(b.Status.Result.Message).To(ContainSubstring("deleted"))
		Expect(*b.Status.Schedule.CommitSequence).To(Equal(int64(1)))
		Expect(groupRunning(pgid)).To(BeFalse(), "the deleted call settled while its subprocess still ran")

		a, c := committedCall(ns, "a"), committedCall(ns, "c")
		Expect(a.Status.Result.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded), a.Status.Result.Message)
		Expect(c.Status.Result.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded), c.Status.Result.Message)
		Expect([]int64{*a.Status.Schedule.CommitSequence, *c.Status.Schedule.CommitSequence}).To(Equal([]int64{0, 2}))
		Eventually(callGone(ns, "b"), 30*time.Second).Should(BeTrue())

		submit(ns, "d", "fast", `{"id":"D"}`, 1, 0)
		Expect(*committedCall(ns, "d").Status.Schedule.CommitSequence).To(Equal(int64(3)))
		Eventually(func(g Gomega) {
			st := session(ns).Status
			g.Expect(st.NextSequence).To(Equal(int64(4)))
			g.Expect(st.CommittedTurn).To(Equal(int64(1)))
			g.Expect(st.CurrentTurn).To(Equal(int64(1)))
			// The counts are of the calls present: the deleted one is gone.
			g.Expect(st.CommittedCalls).To(Equal(int64(3)))
			g.Expect(st.Counts).To(Equal(toolgatev1alpha1.OutcomeCounts{Succeeded: 3}))
			g.Expect(st.CommitCursor).To(Equal(&toolgatev1alpha1.CallPosition{Turn: 1, Index: 0}))
		}).Should(Succeed())
		Expect(settledEvents(ns)).To(HaveKeyWithValue("b", 1))
		Expect(workspaceFile(ns, "marker")).To(BeEmpty())
	})
})
