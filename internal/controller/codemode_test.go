package controller

import (
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	tu "github.com/toolgate/toolgate/internal/testutil"
)

var _ = Describe("Code Mode", func() {
	// A body calls other tools of its session through the runner
	// ("$TOOLGATE_RUNNER call TOOL ARGS"); each sub-call is its own
	// ToolCall, nested under the caller, through the whole pipeline (here a
	// policy that denies one tool), and the body gets each result.
	It("runs a body's sub-calls as nested ToolCalls through the pipeline and gives the body their results", func() {
		ns := newNamespace()
		combine := shTool("combine", `a=$("$TOOLGATE_RUNNER" call echo '{"text":"one"}') && b=$("$TOOLGATE_RUNNER" call echo '{"text":"two"}') && `+
			`{ "$TOOLGATE_RUNNER" call fail '{}' 2>&1 >/dev/null; true; } && echo "$a+$b"`).Obj()
		combine.TimeoutSeconds = 60
		combine.SubCalls = []string{"echo", "fail"}
		setup(processProfile(ns, append(matrixTools(), combine)...).
			PreRule("no-fail", toolgatev1alpha1.ActionDeny, "call.tool == 'fail'").
			PreRule("allow-all", toolgatev1alpha1.ActionAllow, ""))
		submit(ns, "c1", "combine", `{}`, 0, 0)
		c := committedCall(ns, "c1")
		Expect(c.Status.Result.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded), c.Status.Result.Message)
		Expect(c.Status.Result.Content).To(ContainSubstring(`{\"text\":\"one\"}`))
		Expect(c.Status.Result.Content).To(ContainSubstring(`{\"text\":\"two\"}`))
		Expect(*c.Status.Schedule.CommitSequence).To(Equal(int64(0)))

		list := &toolgatev1alpha1.ToolCallList{}
		Expect(k8s.List(ctx, list, client.InNamespace(ns))).To(Succeed())
		byTool := map[string][]toolgatev1alpha1.ToolCall{}
		for _, n := range list.Items {
			if n.Spec.ParentRef != nil {
				Expect(n.Spec.ParentRef.Name).To(Equal("c1"))
				Expect(n.Spec.Requester).To(Equal(c.Spec.Requester), "a sub-call is made in the caller's name")
				Expect(n.Status.Schedule.CommitSequence).To(BeNil(), "a nested call stays out of the log")
				byTool[n.Spec.Tool] = append(byTool[n.Spec.Tool], n)
			}
		}
		Expect(byTool["echo"]).To(HaveLen(2))
		for _, n := range byTool["echo"] {
			Expect(n.Status.Result.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded))
			Expect(stageTrace(&n)).To(ContainSubstring("PreExecute:Allow"))
		}
		Expect(byTool["fail"]).To(HaveLen(1))
		Expect(byTool["fail"][0].Status.Result.ErrorCode).To(Equal("policy_denied"), "the policy decides a sub-call like any call")
		Expect(bodyRuns(ns, "runs")).To(Equal(2), "the denied sub-call's body never ran")
	})
})

var _ = Describe("Code Mode with retention", func() {
	It("expires a body's sub-calls with their parent", func() {
		ns := newNamespace()
		twice := shTool("twice", `a=$("$TOOLGATE_RUNNER" call echo '{"text":"one"}') && b=$("$TOOLGATE_RUNNER" call echo '{"text":"two"}') && echo "$a+$b"`).Obj()
		twice.TimeoutSeconds = 60
		twice.SubCalls = []string{"echo"}
		setup(processProfile(ns, append(matrixTools(), twice)...).PreRule("allow-all", toolgatev1alpha1.ActionAllow, ""),
			func(s *tu.AgentSessionWrapper) { s.Spec.TTLSecondsAfterCommit = ptr.To[int32](0) })
		submit(ns, "p", "twice", `{}`, 0, 0)
		Eventually(callGone(ns, "p"), 30*time.Second).Should(BeTrue(), "the parent expires once its turn is complete")
		Eventually(func() []string {
			list := &toolgatev1alpha1.ToolCallList{}
			Expect(k8s.List(ctx, list, client.InNamespace(ns))).To(Succeed())
			var left []string
			for _, c := range list.Items {
				left = append(left, c.Name)
			}
			return left
		}, 30*time.Second, 200*time.Millisecond).Should(BeEmpty(), "a sub-call outlived its parent")
	})
})

var _ = Describe("Code Mode for a tool whose definition lists no such sub-call", func() {
	It("denies the sub-call without a ToolCall, and the body goes on", func() {
		ns := newNamespace()
		// sneaky may call echo, and tries write as well; plain may call
		// nothing.
		sneaky := shTool("sneaky", `"$TOOLGATE_RUNNER" call write '{}' 2>&1; echo; "$TOOLGATE_RUNNER" call echo '{"text":"ok"}'`).Obj()
		sneaky.SubCalls = []string{"echo"}
		sneaky.TimeoutSeconds = 60
		plain := shTool("plain", `"$TOOLGATE_RUNNER" call echo '{"text":"no"}' 2>&1; true`).Obj()
		plain.TimeoutSeconds = 60
		setup(processProfile(ns, append(matrixTools(), sneaky, plain)...).PreRule("allow-all", toolgatev1alpha1.ActionAllow, ""))
		submit(ns, "c1", "sneaky", `{}`, 0, 0)
		submit(ns, "c2", "plain", `{}`, 1, 0)
		c1, c2 := committedCall(ns, "c1"), committedCall(ns, "c2")
		Expect(c1.Status.Result.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded), c1.Status.Result.Message)
		Expect(c1.Status.Result.Content).To(ContainSubstring("may not call write"))
		Expect(c1.Status.Result.Content).To(ContainSubstring(`{\"text\":\"ok\"}`), "a listed sub-call runs")
		Expect(c2.Status.Result.Content).To(ContainSubstring("may not call echo"), "no subCalls: none")
		list := &toolgatev1alpha1.ToolCallList{}
		Expect(k8s.List(ctx, list, client.InNamespace(ns))).To(Succeed())
		var nested []string
		for _, n := range list.Items {
			if n.Spec.ParentRef != nil {
				nested = append(nested, n.Spec.Tool)
			}
		}
		Expect(nested).To(Equal([]string{"echo"}), "a denied sub-call makes no ToolCall")
	})
})

var _ = Describe("Code Mode when someone made a call under a sub-call's name first", func() {
	It("never hands the body that call's result", func() {
		ns := newNamespace()
		caller := shTool("caller", `"$TOOLGATE_RUNNER" call echo '{"text":"mine"}' 2>&1; true`).Obj()
		caller.SubCalls = []string{"echo"}
		caller.TimeoutSeconds = 20
		setup(processProfile(ns, append(matrixTools(), caller)...).PreRule("allow-all", toolgatev1alpha1.ActionAllow, ""))
		// Another agent's call under the name the first sub-call of c1's
		// first attempt will have.
		squat := tu.MakeToolCall(ns, nestedName("c1", "a1-s1"), "elsewhere").Tool("echo", `{"text":"forged"}`).Obj()
		squat.Spec.Requester = "mallory"
		Expect(k8s.Create(ctx, squat)).To(Succeed())
		submit(ns, "c1", "caller", `{}`, 0, 0)
		c := committedCall(ns, "c1", 40*time.Second)
		Expect(c.Status.Result.Content).To(ContainSubstring("holds the sub-call's name"), c.Status.Result.Message)
		Expect(c.Status.Result.Content).NotTo(ContainSubstring("forged"))
	})
})

var _ = Describe("Code Mode with a large sub-call result", func() {
	// The manager's cache holds calls without results over 1 KiB
	// (cachestrip.go): the body still gets the whole of its sub-call's.
	It("gives the body the whole result", func() {
		ns := newNamespace()
		big := shTool("big", `head -c 3000 /dev/zero | tr '\0' b`).Obj()
		count := shTool("count", `"$TOOLGATE_RUNNER" call big '{}' | wc -c | tr -d ' '`).Obj()
		count.TimeoutSeconds = 60
		count.SubCalls = []string{"*"}
		setup(processProfile(ns, big, count).PreRule("allow-all", toolgatev1alpha1.ActionAllow, ""))
		submit(ns, "c1", "count", `{}`, 0, 0)
		c := committedCall(ns, "c1", 60*time.Second)
		Expect(c.Status.Result.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded), c.Status.Result.Message)
		n, err := strconv.Atoi(strings.TrimSpace(c.Status.Result.Content))
		Expect(err).NotTo(HaveOccurred(), c.Status.Result.Content)
		Expect(n).To(BeNumerically(">=", 3000), "the body read the sub-call's whole result (its 3,000 bytes, as the runner prints them)")
	})
})

var _ = Describe("Code Mode when the parent settles first", func() {
	// The parent times out while its sub-call's body still runs: the
	// sub-call is part of the parent's owned work, so it stops and settles
	// as cancelled; it never runs on to a success nobody asked for anymore.
	It("stops a sub-call whose parent timed out, and settles it before the parent", func() {
		ns := newNamespace()
		impatient := shTool("impatient", `"$TOOLGATE_RUNNER" call long_sleep '{}'; echo done`).Obj()
		impatient.TimeoutSeconds = 1
		impatient.SubCalls = []string{"long_sleep"}
		long := shTool("long_sleep", "echo ran >> runs; sleep 6; echo finished >> finished").Obj()
		long.TimeoutSeconds = 60
		setup(processProfile(ns, append(matrixTools(), impatient, long)...).PreRule("allow-all", toolgatev1alpha1.ActionAllow, ""))
		submit(ns, "c1", "impatient", `{}`, 0, 0)
		c := committedCall(ns, "c1", 30*time.Second)
		Expect(c.Status.Result.Outcome).To(Equal(toolgatev1alpha1.OutcomeTimedOut), c.Status.Result.Message)
		// Read after the parent's result: children first, so the
		// sub-call's result is already there.
		list := &toolgatev1alpha1.ToolCallList{}
		Expect(k8s.List(ctx, list, client.InNamespace(ns))).To(Succeed())
		var nested []toolgatev1alpha1.ToolCall
		for _, n := range list.Items {
			if n.Spec.ParentRef != nil {
				nested = append(nested, n)
			}
		}
		Expect(nested).To(HaveLen(1))
		child := nested[0]
		Expect(child.Status.Result).NotTo(BeNil(), "the parent settled before its sub-call")
		Expect(child.Status.Result.Outcome).To(Equal(toolgatev1alpha1.OutcomeCancelled), "the sub-call ran on after its parent's body ended: %s", child.Status.Result.ErrorCode)
		Expect(child.Status.Result.Message).To(ContainSubstring("parent call's body ended"))
		// Its body sleeps 6 s and then writes "finished": stopped, it never does.
		Consistently(func() int { return bodyRuns(ns, "finished") }, 7*time.Second, 100*time.Millisecond).Should(Equal(0))
	})
})

var _ = Describe("Code Mode within the session's bounds", func() {
	// A body fans out sub-calls at once: they count against the session's
	// maxParallel like a turn's calls, so with maxParallel 1 they run one
	// after the other, and all of them still run.
	It("runs at most maxParallel of one parent's sub-calls at a time", func() {
		ns := newNamespace()
		fanout := shTool("fanout", `for i in 1 2 3 4; do "$TOOLGATE_RUNNER" call step "{\"id\":\"S$i\"}" >/dev/null & done; wait; echo fanned`).Obj()
		fanout.TimeoutSeconds = 60
		fanout.SubCalls = []string{"step"}
		setup(processProfile(ns, append(matrixTools(), fanout, loggingTool("step", "0.3", true))...).PreRule("allow-all", toolgatev1alpha1.ActionAllow, ""),
			func(s *tu.AgentSessionWrapper) { s.MaxParallel(1) })
		submit(ns, "c1", "fanout", `{}`, 0, 0)
		c := committedCall(ns, "c1", 60*time.Second)
		Expect(c.Status.Result.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded), c.Status.Result.Message)
		lines := strings.Fields(strings.ReplaceAll(workspaceFile(ns, "log"), "\n", " "))
		Expect(lines).To(HaveLen(16), "every sub-call ran: %v", lines)
		running, most := 0, 0
		for i := 0; i < len(lines); i += 2 {
			switch lines[i] {
			case "start":
				running++
			case "end":
				running--
			}
			most = max(most, running)
		}
		Expect(most).To(Equal(1), "sub-calls overlapped: %v", lines)
	})
})
