package controller

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	promtestutil "github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/pipeline"
	tu "github.com/toolgate/toolgate/internal/testutil"
)

const (
	success     = "Call:Admitted PreExecute:Allow Guard:Abstain Dispatch:Dispatched Execute:OK PostExecute:Accept Finalize:OK Observe:OK Result:Succeeded"
	settledTail = "Finalize:OK Observe:OK Result:"
	echoShell   = "echo ran >> runs; cat"
)

// matrixTools are the tools of the matrix: each appends a line to "runs" in
// the workspace when its body runs.
func matrixTools() []toolgatev1alpha1.ToolDefinition {
	sleeper := shTool("sleep", "echo ran >> runs; sleep 2; echo finished >> finished; echo slept").Obj()
	sleeper.TimeoutSeconds = 60
	quick := shTool("quick_sleep", "echo ran >> runs; sleep 3; echo finished >> finished; echo slept").Obj()
	quick.TimeoutSeconds = 1
	return []toolgatev1alpha1.ToolDefinition{
		shTool("echo", echoShell).ConcurrencySafe("true").Obj(),
		shTool("fail", "echo ran >> runs; echo broken >&2; exit 3").Obj(),
		sleeper, quick,
	}
}

func expectResult(c *toolgatev1alpha1.ToolCall, outcome toolgatev1alpha1.Outcome, code, trace string) {
	ExpectWithOffset(1, c.Status.Result).NotTo(BeNil())
	ExpectWithOffset(1, c.Status.Result.Outcome).To(Equal(outcome), c.Status.Result.Message)
	ExpectWithOffset(1, c.Status.Result.ErrorCode).To(Equal(code), c.Status.Result.Message)
	ExpectWithOffset(1, stageTrace(c)).To(Equal(trace))
	ExpectWithOffset(1, c.Status.Schedule.CommitSequence).NotTo(BeNil())
	committed := meta.FindStatusCondition(c.Status.Conditions, toolgatev1alpha1.ToolCallConditionCommitted)
	ExpectWithOffset(1, committed).NotTo(BeNil())
	ExpectWithOffset(1, committed.Status).To(Equal(metav1.ConditionTrue))
	succeeded := meta.FindStatusCondition(c.Status.Conditions, toolgatev1alpha1.ToolCallConditionSucceeded)
	ExpectWithOffset(1, succeeded).NotTo(BeNil())
	ExpectWithOffset(1, succeeded.Reason).To(Equal(string(outcome)))
	wantStatus := metav1.ConditionFalse
	if outcome == toolgatev1alpha1.OutcomeSucceeded {
		wantStatus = metav1.ConditionTrue
	}
	ExpectWithOffset(1, succeeded.Status).To(Equal(wantStatus))
}

// approvalRequest waits for the call's ApprovalRequest.
func approvalRequest(ns, call string) *toolgatev1alpha1.ApprovalRequest {
	ar := &toolgatev1alpha1.ApprovalRequest{}
	Eventually(func(g Gomega) {
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: call}, ar)).To(Succeed())
		g.Expect(ar.Status.Phase).To(Equal(toolgatev1alpha1.ApprovalPending))
	}, 30*time.Second, 50*time.Millisecond).Should(Succeed())
	return ar
}

func decide(ar *toolgatev1alpha1.ApprovalRequest, action toolgatev1alpha1.DecisionAction) {
	base := ar.DeepCopy()
	ar.Spec.Decision = ar.DecisionOf(action, "alice", "checked")
	Expect(k8s.Patch(ctx, ar, client.MergeFrom(base))).To(Succeed())
}

var _ = Describe("the seed's test matrix through the controllers", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	allowAll := func() *tu.ToolProfileWrapper {
		return processProfile(ns, matrixTools()...).PreRule("allow-all", toolgatev1alpha1.ActionAllow, "")
	}

	It("allow: the body runs once and the call succeeds", func() {
		setup(allowAll())
		submit(ns, "c1", "echo", `{"text":"hello"}`, 0, 0)
		c := committedCall(ns, "c1")
		expectResult(c, toolgatev1alpha1.OutcomeSucceeded, "", success)
		Expect(c.Status.Result.Value).To(Equal(`"{\"text\":\"hello\"}"`))
		Expect(bodyRuns(ns, "runs")).To(Equal(1))
		Expect(*c.Status.Schedule.CommitSequence).To(Equal(int64(0)))
		Expect(c.Status.Token).NotTo(BeEmpty())
		// Observability: the metrics counted the outcome, announced before
		// the result was written; a success has no Event (nobody acts on
		// it, and it would cost a write per call).
		Expect(promtestutil.ToFloat64(callsSettled.WithLabelValues("echo", "Succeeded", "none"))).To(BeNumerically(">=", 1))
		Expect(settledEvents(ns)).To(BeEmpty())
		Expect(promtestutil.ToFloat64(stageBoundaries.WithLabelValues("Dispatch", "Dispatched"))).To(BeNumerically(">=", 1))
		Expect(histogramCount(stageSeconds, "Execute")).To(BeNumerically(">=", 1))
		s := &toolgatev1alpha1.AgentSession{}
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "s"}, s)).To(Succeed())
			g.Expect(s.Status.Counts.Succeeded).To(Equal(int64(1)))
			g.Expect(s.Status.NextSequence).To(Equal(int64(1)))
		}).Should(Succeed())
	})

	It("deny: no body runs", func() {
		setup(processProfile(ns, matrixTools()...).PreRule("deny-all", toolgatev1alpha1.ActionDeny, ""))
		submit(ns, "c1", "echo", `{"text":"hello"}`, 0, 0)
		expectResult(committedCall(ns, "c1"), toolgatev1alpha1.OutcomeDenied, "policy_denied", "Call:Admitted PreExecute:Deny "+settledTail+"Denied")
		Expect(bodyRuns(ns, "runs")).To(Equal(0))
		// An outcome other than success is announced by a Warning Event,
		// created before the result was written.
		Expect(eventsAbout(ns, "ToolCall", "c1")).To(ContainElement(And(HaveField("Reason", EventSettled), HaveField("Type", corev1.EventTypeWarning),
			HaveField("Note", "outcome Denied, code policy_denied"))))
	})

	It("ask + approve: an ApprovalRequest owned by the call, then the body runs once", func() {
		setup(processProfile(ns, matrixTools()...).PreRule("ask-all", toolgatev1alpha1.ActionAsk, "").
			Approval(func(a *toolgatev1alpha1.ApprovalSettings) { a.RedactArguments = []string{"secret"} }))
		submit(ns, "c1", "echo", `{"text":"hello","secret":"hunter2"}`, 0, 0)
		ar := approvalRequest(ns, "c1")
		Expect(ar.Spec.ArgumentsPreview).To(Equal(`{"secret":"[redacted]","text":"hello"}`))
		Expect(ar.Spec.Requester).To(Equal("agent"))
		Expect(ar.Spec.SessionRef).To(Equal(&toolgatev1alpha1.LocalObjectReference{Name: "s"}), "the approver sees whose session the call enters")
		Expect(ar.OwnerReferences).To(HaveLen(1))
		Expect(bodyRuns(ns, "runs")).To(Equal(0))
		Eventually(func() []eventsv1.Event { return eventsAbout(ns, "ToolCall", "c1") }).Should(ContainElement(And(
			HaveField("Reason", EventApprovalRequested), HaveField("Note", ContainSubstring("kubectl toolgate pending")))))
		waits := histogramCount(approvalWait, pipeline.VerdictAllowedOnce)
		decide(ar, toolgatev1alpha1.DecisionApprove)
		c := committedCall(ns, "c1")
		Expect(histogramCount(approvalWait, pipeline.VerdictAllowedOnce)).To(Equal(waits + 1))
		expectResult(c, toolgatev1alpha1.OutcomeSucceeded, "",
			"Call:Admitted PreExecute:Ask Approval:AllowedOnce Guard:Abstain Dispatch:Dispatched Execute:OK PostExecute:Accept "+settledTail+"Succeeded")
		Expect(bodyRuns(ns, "runs")).To(Equal(1))
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(ar), ar)).To(Succeed())
		Expect(ar.Status.Phase).To(Equal(toolgatev1alpha1.ApprovalApproved))
	})

	It("ask + approve: a decision on the question as asked stays valid when the profile's redaction list changes while it is open", func() {
		setup(processProfile(ns, matrixTools()...).PreRule("ask-all", toolgatev1alpha1.ActionAsk, "").
			Approval(func(a *toolgatev1alpha1.ApprovalSettings) { a.RedactArguments = []string{"secret"} }))
		submit(ns, "c1", "echo", `{"text":"hello","secret":"hunter2"}`, 0, 0)
		ar := approvalRequest(ns, "c1")
		asked := ar.Spec.ArgumentsPreview

		// The profile now hides text as well; the open question still asks
		// about the same arguments.
		p := &toolgatev1alpha1.ToolProfile{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "p"}, p)).To(Succeed())
		base := p.DeepCopy()
		p.Spec.Approval.RedactArguments = []string{"secret", "text"}
		Expect(k8s.Patch(ctx, p, client.MergeFrom(base))).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())
			g.Expect(p.Status.ObservedGeneration).To(Equal(p.Generation))
			g.Expect(readyStatus(p.Status.Conditions)).To(Equal(metav1.ConditionTrue))
		}, 30*time.Second).Should(Succeed())
		// The pending question is polled on the new profile a few times.
		Consistently(func() *toolgatev1alpha1.ToolCallResult {
			c := &toolgatev1alpha1.ToolCall{}
			Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "c1"}, c)).To(Succeed())
			return c.Status.Result
		}, 2*time.Second, 100*time.Millisecond).Should(BeNil(), "the open question must stay open")

		Eventually(func() []eventsv1.Event { return eventsAbout(ns, "ToolCall", "c1") }).Should(ContainElement(And(
			HaveField("Reason", EventApprovalRequested), HaveField("Note", ContainSubstring("kubectl toolgate pending")))))
		waits := histogramCount(approvalWait, pipeline.VerdictAllowedOnce)
		decide(ar, toolgatev1alpha1.DecisionApprove)
		c := committedCall(ns, "c1")
		Expect(histogramCount(approvalWait, pipeline.VerdictAllowedOnce)).To(Equal(waits + 1))
		expectResult(c, toolgatev1alpha1.OutcomeSucceeded, "",
			"Call:Admitted PreExecute:Ask Approval:AllowedOnce Guard:Abstain Dispatch:Dispatched Execute:OK PostExecute:Accept "+settledTail+"Succeeded")
		Expect(bodyRuns(ns, "runs")).To(Equal(1))
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(ar), ar)).To(Succeed())
		Expect(ar.Spec.ArgumentsPreview).To(Equal(asked))
		Expect(ar.Status.Phase).To(Equal(toolgatev1alpha1.ApprovalApproved))
	})

	// plantedRequestNeverCounts: a request for the write "w" (index 1,
	// which waits for index 0: time to plant one), made by forge before
	// toolgate asks and approved, is not its question: the write is denied
	// and its body never runs.
	plantedRequestNeverCounts := func(args string, forge func(*toolgatev1alpha1.ApprovalRequest)) {
		setup(processProfile(ns, matrixTools()...).PreRule("ask-echo", toolgatev1alpha1.ActionAsk, "", "echo").PreRule("allow-rest", toolgatev1alpha1.ActionAllow, ""))
		w := submit(ns, "w", "echo", args, 0, 1, 2)
		forged := tu.MakeApprovalRequest(ns, "w", "w", metav1.NewTime(time.Now().Add(time.Hour))).Obj()
		forge(forged)
		Expect(controllerutil.SetControllerReference(w, forged, k8s.Scheme())).To(Succeed())
		Expect(k8s.Create(ctx, forged)).To(Succeed())
		decide(forged, toolgatev1alpha1.DecisionApprove)
		submit(ns, "first", "fail", `{}`, 0, 0, 2)
		c := committedCall(ns, "w")
		expectResult(c, toolgatev1alpha1.OutcomeDenied, "approval_unavailable", "Call:Admitted PreExecute:Ask Approval:Unavailable "+settledTail+"Denied")
		Expect(c.Status.Result.Message).To(ContainSubstring("does not ask this call's question"))
		Expect(bodyRuns(ns, "runs")).To(Equal(1), "only the first call's body ran")
	}

	It("ask: a request someone created before toolgate, owned by the call but asking another question, never counts", func() {
		plantedRequestNeverCounts(`{"text":"rm -rf /"}`, func(ar *toolgatev1alpha1.ApprovalRequest) { ar.Spec.ArgumentsPreview = `{"text":"harmless"}` })
	})

	It("ask: a request planted before toolgate asks, with the arguments' digest, a harmless preview and reason and no session, never counts", func() {
		plantedRequestNeverCounts(`{"text":"rm -rf /srv/prod"}`, func(ar *toolgatev1alpha1.ApprovalRequest) {
			ar.Spec.ArgumentsPreview, ar.Spec.Reason = `{"text":"ls -l /tmp"}`, "routine: a read-only listing"
			// Anyone can compute a plain hash of the arguments they want run.
			sum := sha256.Sum256([]byte(`{"text":"rm -rf /srv/prod"}`))
			ar.Annotations = map[string]string{toolgatev1alpha1.AnnotationArgumentsDigest: "sha256:" + hex.EncodeToString(sum[:])}
		})
	})

	It("ask + deny: no body runs", func() {
		setup(processProfile(ns, matrixTools()...).PreRule("ask-all", toolgatev1alpha1.ActionAsk, ""))
		submit(ns, "c1", "echo", `{"text":"hello"}`, 0, 0)
		decide(approvalRequest(ns, "c1"), toolgatev1alpha1.DecisionDeny)
		c := committedCall(ns, "c1")
		expectResult(c, toolgatev1alpha1.OutcomeDenied, "approval_rejected", "Call:Admitted PreExecute:Ask Approval:Rejected "+settledTail+"Denied")
		Expect(c.Status.Result.Message).To(ContainSubstring("denied by alice: checked"))
		Expect(bodyRuns(ns, "runs")).To(Equal(0))
	})

	It("ask + deadline passed: fails closed", func() {
		setup(processProfile(ns, matrixTools()...).PreRule("ask-all", toolgatev1alpha1.ActionAsk, ""),
			func(s *tu.AgentSessionWrapper) { s.ApprovalTimeout(10) })
		submit(ns, "c1", "echo", `{"text":"hello"}`, 0, 0)
		ar := approvalRequest(ns, "c1")
		c := committedCall(ns, "c1", 30*time.Second)
		expectResult(c, toolgatev1alpha1.OutcomeDenied, "approval_expired", "Call:Admitted PreExecute:Ask Approval:Expired "+settledTail+"Denied")
		Expect(bodyRuns(ns, "runs")).To(Equal(0))
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(ar), ar)).To(Succeed())
			g.Expect(ar.Status.Phase).To(Equal(toolgatev1alpha1.ApprovalExpired))
		}).Should(Succeed())
	})

	It("ask + the profile's timeout raised while the question is open: the deadline asked with holds", func() {
		p := processProfile(ns, matrixTools()...).PreRule("ask-all", toolgatev1alpha1.ActionAsk, "").
			Approval(func(a *toolgatev1alpha1.ApprovalSettings) { a.TimeoutSeconds = 10 })
		setup(p)
		submit(ns, "c1", "echo", `{"text":"hello"}`, 0, 0)
		ar := approvalRequest(ns, "c1")
		got := &toolgatev1alpha1.ToolProfile{}
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(p.Obj()), got)).To(Succeed())
		got.Spec.Approval.TimeoutSeconds = 3600
		Expect(k8s.Update(ctx, got)).To(Succeed())
		c := committedCall(ns, "c1", 30*time.Second)
		expectResult(c, toolgatev1alpha1.OutcomeDenied, "approval_expired", "Call:Admitted PreExecute:Ask Approval:Expired "+settledTail+"Denied")
		Expect(bodyRuns(ns, "runs")).To(Equal(0))
		Expect(c.Status.Result.SettledAt.Time).To(BeTemporally("<", ar.Spec.Deadline.Add(5*time.Second)), "settled at the deadline the request showed")
	})

	It("a tool removed from the profile while its body runs: the body stops before the call settles", func() {
		// The body sleeps 6 s, then writes "finished": long enough for the
		// profile's change to reach the call on a loaded machine.
		long := shTool("long_sleep", "echo ran >> runs; sleep 6; echo finished >> finished").Obj()
		long.TimeoutSeconds = 60
		p := processProfile(ns, append(matrixTools(), long)...).PreRule("allow-all", toolgatev1alpha1.ActionAllow, "")
		setup(p)
		submit(ns, "c1", "long_sleep", `{}`, 0, 0)
		Eventually(func() int { return bodyRuns(ns, "runs") }, 20*time.Second, 20*time.Millisecond).Should(Equal(1), "the body started")
		got := &toolgatev1alpha1.ToolProfile{}
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(p.Obj()), got)).To(Succeed())
		got.Spec.Tools = slices.DeleteFunc(got.Spec.Tools, func(t toolgatev1alpha1.ToolDefinition) bool { return t.Name == "long_sleep" })
		Expect(k8s.Update(ctx, got)).To(Succeed())
		c := committedCall(ns, "c1", 30*time.Second)
		Expect(c.Status.Result.ErrorCode).To(Equal("unknown_tool"), c.Status.Result.Message)
		// Stopped before the call settled, the body never finishes.
		Consistently(func() int { return bodyRuns(ns, "finished") }, 7*time.Second, 100*time.Millisecond).Should(Equal(0), "the body ran on after its call settled")
	})

	It("a timeout stays the outcome when the caller cancels while the body is being stopped", func() {
		stubborn := shTool("stubborn", "trap '' TERM; echo ran >> runs; sleep 6; echo finished >> finished").Obj()
		stubborn.TimeoutSeconds = 1
		setup(processProfile(ns, append(matrixTools(), stubborn)...).PreRule("allow-all", toolgatev1alpha1.ActionAllow, ""))
		submit(ns, "c1", "stubborn", `{}`, 0, 0)
		Eventually(func() int { return bodyRuns(ns, "runs") }, 20*time.Second, 20*time.Millisecond).Should(Equal(1), "the body started")
		// Past the timeout, within the kill grace period (the body ignores
		// SIGTERM): the caller cancels.
		time.Sleep(1400 * time.Millisecond)
		got := &toolgatev1alpha1.ToolCall{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "c1"}, got)).To(Succeed())
		base := got.DeepCopy()
		got.Spec.CancelRequested = true
		Expect(k8s.Patch(ctx, got, client.MergeFrom(base))).To(Succeed())
		c := committedCall(ns, "c1", 30*time.Second)
		Expect(c.Status.Result.Outcome).To(Equal(toolgatev1alpha1.OutcomeTimedOut), c.Status.Result.ErrorCode)
	})

	It("ask with the none provider: fails closed without asking anyone", func() {
		setup(processProfile(ns, matrixTools()...).PreRule("ask-all", toolgatev1alpha1.ActionAsk, "").
			Approval(func(a *toolgatev1alpha1.ApprovalSettings) { a.Provider = toolgatev1alpha1.ApprovalProviderNone }))
		submit(ns, "c1", "echo", `{"text":"hello"}`, 0, 0)
		expectResult(committedCall(ns, "c1"), toolgatev1alpha1.OutcomeDenied, "approval_unavailable", "Call:Admitted PreExecute:Ask Approval:Unavailable "+settledTail+"Denied")
		list := &toolgatev1alpha1.ApprovalRequestList{}
		Expect(k8s.List(ctx, list, client.InNamespace(ns))).To(Succeed())
		Expect(list.Items).To(BeEmpty())
	})

	It("guard denial after a pre-execute allow: no body runs", func() {
		setup(allowAll().Guard("no-hello", "call.args.text == 'hello'", "hello is off limits"))
		submit(ns, "c1", "echo", `{"text":"hello"}`, 0, 0)
		c := committedCall(ns, "c1")
		expectResult(c, toolgatev1alpha1.OutcomeDenied, "guard_denied", "Call:Admitted PreExecute:Allow Guard:Deny "+settledTail+"Denied")
		Expect(c.Status.Stages[2].Reason).To(Equal("no-hello"))
		Expect(bodyRuns(ns, "runs")).To(Equal(0))
	})

	It("finalizeContent of a declared tool shapes the content of a success and of a failure, once, content only", func() {
		p := allowAll().Guard("no-stop", "call.args.text == 'STOP'", "stop is off limits")
		for i := range p.Spec.Tools {
			if p.Spec.Tools[i].Name == "echo" {
				p.Spec.Tools[i].Output.FinalizeContent = &toolgatev1alpha1.FinalizeContentSpec{Template: "[{{.Outcome}}] {{.Content}}"}
			}
		}
		setup(p)
		submit(ns, "ok", "echo", `{"text":"hello"}`, 0, 0, 2)
		submit(ns, "denied", "echo", `{"text":"STOP"}`, 0, 1, 2)
		ok, denied := committedCall(ns, "ok"), committedCall(ns, "denied")
		expectResult(ok, toolgatev1alpha1.OutcomeSucceeded, "", success)
		Expect(ok.Status.Result.Content).To(Equal(`[Succeeded] {"text":"hello"}`))
		Expect(ok.Status.Result.Value).To(Equal(`"{\"text\":\"hello\"}"`), "the value never changes")
		expectResult(denied, toolgatev1alpha1.OutcomeDenied, "guard_denied", "Call:Admitted PreExecute:Allow Guard:Deny "+settledTail+"Denied")
		Expect(denied.Status.Result.Content).To(Equal("[Denied] error: guard_denied: stop is off limits"))
	})

	It("tool-deferred contexts of a declared tool precede decision contexts, reach the model after the turn commits, and a failure carries none", func() {
		note := shTool("note", `echo 'verify the figures' >> "$TOOLGATE_CONTEXTS_FILE"; echo done`)
		broken := shTool("broken", `echo 'never delivered' >> "$TOOLGATE_CONTEXTS_FILE"; exit 3`)
		setup(processProfile(ns, note.Obj(), broken.Obj()).PreRule("allow-all", toolgatev1alpha1.ActionAllow, "").PostRule(toolgatev1alpha1.PostRule{
			Name: "remind", Action: toolgatev1alpha1.PostAccept, Contexts: []string{"cite your sources"},
		}))
		submit(ns, "n", "note", `{}`, 0, 0, 2)
		submit(ns, "b", "broken", `{}`, 0, 1, 2)
		n, b := committedCall(ns, "n"), committedCall(ns, "b")
		Expect(n.Status.Result.Contexts).To(Equal([]toolgatev1alpha1.AdditionalContext{
			{Source: "Tool", Message: "verify the figures"},
			{Source: "Policy", Rule: "remind", Message: "cite your sources"},
		}))
		Expect(b.Status.Result.ErrorCode).To(Equal("tool_error"))
		Expect(b.Status.Result.Contexts).To(BeEmpty())
		s := &toolgatev1alpha1.AgentSession{}
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "s"}, s)).To(Succeed())
			g.Expect(s.Status.DeferredContexts).To(HaveLen(2))
			g.Expect(s.Status.DeferredContexts[0].Message).To(Equal("verify the figures"))
			g.Expect(s.Status.DeferredContexts[1].Message).To(Equal("cite your sources"))
		}).Should(Succeed())
	})

	It("body failure: one normalized error result", func() {
		setup(allowAll())
		submit(ns, "c1", "fail", `{}`, 0, 0)
		c := committedCall(ns, "c1")
		expectResult(c, toolgatev1alpha1.OutcomeFailed, "tool_error",
			"Call:Admitted PreExecute:Allow Guard:Abstain Dispatch:Dispatched Execute:Error "+settledTail+"Failed")
		Expect(c.Status.Result.Message).To(Equal("exit code 3 (7 bytes of stderr withheld: the tool's output.failureDetail is Withheld)"))
		Expect(c.Status.Result.Value).To(BeEmpty())
		Expect(bodyRuns(ns, "runs")).To(Equal(1))
	})

	It("body failure: its stderr, which no post-execute rule passed, reaches the agent only where the tool declares it safe", func() {
		leaky := shTool("leaky", "echo 'oops ghp_0123456789abcdef' >&2; exit 3")
		shown := shTool("shown", "echo 'usage: shown FILE' >&2; exit 2")
		shown.Output.FailureDetail = toolgatev1alpha1.FailureDetailStderrTail
		setup(processProfile(ns, leaky.Obj(), shown.Obj()).PreRule("allow-all", toolgatev1alpha1.ActionAllow, ""))
		submit(ns, "c1", "leaky", `{}`, 0, 0)
		submit(ns, "c2", "shown", `{}`, 1, 0)
		c := committedCall(ns, "c1")
		Expect(c.Status.Result.ErrorCode).To(Equal("tool_error"))
		Expect(c.Status.Result.Message + c.Status.Result.Content).NotTo(ContainSubstring("ghp_"))
		Expect(c.Status.Result.Message).To(ContainSubstring("exit code 3"))
		Expect(committedCall(ns, "c2").Status.Result.Message).To(Equal("exit code 2: usage: shown FILE"))
	})

	It("post block: a valueless failure", func() {
		setup(allowAll().PostRule(toolgatev1alpha1.PostRule{
			Name: "no-secrets", Action: toolgatev1alpha1.PostBlock, When: "result.content.contains('secret')",
			Message: "the output holds a secret", Contexts: []string{"the output was withheld"},
		}))
		submit(ns, "c1", "echo", `{"text":"a secret"}`, 0, 0)
		c := committedCall(ns, "c1")
		expectResult(c, toolgatev1alpha1.OutcomeFailed, "post_blocked",
			"Call:Admitted PreExecute:Allow Guard:Abstain Dispatch:Dispatched Execute:OK PostExecute:Block "+settledTail+"Failed")
		Expect(c.Status.Result.Value).To(BeEmpty())
		Expect(c.Status.Result.Contexts).To(ConsistOf(toolgatev1alpha1.AdditionalContext{
			Source: toolgatev1alpha1.ContextSourcePolicy, Rule: "no-secrets", Message: "the output was withheld",
		}))
	})

	// A finished body waiting for its turn (an earlier call of the turn is
	// still running) has passed no post-execute rule yet: its output must
	// not sit in the call's status, where the agent reads it, before a Block
	// rule withholds it.
	It("post block: nothing of an output waiting for its turn is readable before post-execute", func() {
		// The slow body says whether the other one ran meanwhile.
		slow := shTool("slow", "sleep 2; if grep -q ran runs; then echo waited; else echo alone; fi").ConcurrencySafe("true").Obj()
		setup(processProfile(ns, append(matrixTools(), slow)...).PreRule("allow-all", toolgatev1alpha1.ActionAllow, "").PostRule(toolgatev1alpha1.PostRule{
			Name: "no-secrets", Action: toolgatev1alpha1.PostBlock, When: "result.content.contains('TOKEN-')",
			Message: "the output holds a token",
		}))
		submit(ns, "c0", "slow", `{}`, 0, 0, 2)
		submit(ns, "c1", "echo", `{"text":"TOKEN-4242"}`, 0, 1, 2)
		Eventually(func(g Gomega) {
			c := &toolgatev1alpha1.ToolCall{}
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "c1"}, c)).To(Succeed())
			status, err := json.Marshal(c.Status)
			Expect(err).NotTo(HaveOccurred())
			Expect(string(status)).NotTo(ContainSubstring("TOKEN-4242"), "the output is readable before post-execute ran")
			g.Expect(c.Status.Phase).To(Equal(toolgatev1alpha1.PhaseCommitted))
		}, 20*time.Second, 10*time.Millisecond).Should(Succeed())
		Expect(committedCall(ns, "c0").Status.Result.Content).To(Equal("waited\n"), "the second body finished while the first ran, and waited for its turn")
		c := committedCall(ns, "c1")
		expectResult(c, toolgatev1alpha1.OutcomeFailed, "post_blocked",
			"Call:Admitted PreExecute:Allow Guard:Abstain Dispatch:Dispatched Execute:OK PostExecute:Block "+settledTail+"Failed")
		Expect(bodyRuns(ns, "runs")).To(Equal(1))
	})

	It("timeout: the body is killed and the call times out", func() {
		setup(allowAll())
		submit(ns, "c1", "quick_sleep", `{}`, 0, 0)
		c := committedCall(ns, "c1")
		expectResult(c, toolgatev1alpha1.OutcomeTimedOut, "timeout",
			"Call:Admitted PreExecute:Allow Guard:Abstain Dispatch:Dispatched Execute:Error "+settledTail+"TimedOut")
		Consistently(func() string { return workspaceFile(ns, "finished") }, 3*time.Second).Should(BeEmpty())
	})

	It("cancellation before dispatch: no stage runs, one result", func() {
		setup(allowAll())
		c := tu.MakeToolCall(ns, "c1", "s").Tool("echo", `{"text":"hello"}`).Obj()
		c.Spec.CancelRequested = true
		Expect(k8s.Create(ctx, c)).To(Succeed())
		expectResult(committedCall(ns, "c1"), toolgatev1alpha1.OutcomeCancelled, "cancelled", "Call:Cancelled "+settledTail+"Cancelled")
		Expect(bodyRuns(ns, "runs")).To(Equal(0))
	})

	It("cancellation after dispatch: the body is stopped before the result settles", func() {
		setup(allowAll())
		submit(ns, "c1", "sleep", `{}`, 0, 0)
		Eventually(func() int { return bodyRuns(ns, "runs") }, 30*time.Second, 20*time.Millisecond).Should(Equal(1))
		c := &toolgatev1alpha1.ToolCall{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "c1"}, c)).To(Succeed())
		base := c.DeepCopy()
		c.Spec.CancelRequested = true
		Expect(k8s.Patch(ctx, c, client.MergeFrom(base))).To(Succeed())
		c = committedCall(ns, "c1")
		expectResult(c, toolgatev1alpha1.OutcomeCancelled, "cancelled",
			"Call:Admitted PreExecute:Allow Guard:Abstain Dispatch:Dispatched Execute:Error "+settledTail+"Cancelled")
		Consistently(func() string { return workspaceFile(ns, "finished") }, 2500*time.Millisecond).Should(BeEmpty())
	})

	It("flags a cut output in the result, and fails a cut JSON output clearly", func() {
		big := shTool("big", "head -c 5000 /dev/zero | tr '\\0' x").Obj()
		big.Container.MaxOutputBytes = 1024
		bigJSON := shTool("big_json", `printf '{"x":"'; head -c 5000 /dev/zero | tr '\\0' x; printf '"}'`).Obj()
		bigJSON.Container.MaxOutputBytes = 1024
		bigJSON.Output = toolgatev1alpha1.OutputDeclaration{Schema: tu.JSON(`{"type":"object"}`), Render: toolgatev1alpha1.RenderSpec{Format: toolgatev1alpha1.RenderJSON}}
		setup(processProfile(ns, big, bigJSON).PreRule("allow-all", toolgatev1alpha1.ActionAllow, ""))
		submit(ns, "c1", "big", `{}`, 0, 0, 2)
		submit(ns, "c2", "big_json", `{}`, 0, 1, 2)
		c := committedCall(ns, "c1")
		Expect(c.Status.Result.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded))
		Expect(c.Status.Result.Truncated).To(BeTrue())
		Expect(c.Status.Result.Content).To(HaveLen(1024))
		c = committedCall(ns, "c2")
		Expect(c.Status.Result.ErrorCode).To(Equal("tool_error"))
		Expect(c.Status.Result.Message).To(ContainSubstring("exceeded maxOutputBytes"))
	})

	It("an output larger than a result can hold settles with a stable code instead of a status write that never succeeds", func() {
		huge := shTool("huge", "head -c 3000000 /dev/zero | tr '\\0' x").Obj()
		huge.Container.MaxOutputBytes = 8 << 20
		setup(processProfile(ns, huge).PreRule("allow-all", toolgatev1alpha1.ActionAllow, ""))
		submit(ns, "c1", "huge", `{}`, 0, 0)
		c := committedCall(ns, "c1", 60*time.Second)
		Expect(c.Status.Result.ErrorCode).To(Equal("output_too_large"), c.Status.Result.Message)
		Expect(c.Status.Result.Value).To(BeEmpty())
	})

	It("a missing profile settles the call with a stable error instead of hanging", func() {
		Expect(k8s.Create(ctx, tu.MakeAgentSession(ns, "s", "nope").Obj())).To(Succeed())
		submit(ns, "c1", "echo", `{"text":"hello"}`, 0, 0)
		c := committedCall(ns, "c1")
		Expect(c.Status.Result.ErrorCode).To(Equal("profile_unavailable"))
		s := &toolgatev1alpha1.AgentSession{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "s"}, s)).To(Succeed())
		Expect(readyStatus(s.Status.Conditions)).To(Equal(metav1.ConditionFalse))
	})
})

// deleteSession deletes session "s" of ns.
func deleteSession(ns string) {
	s := &toolgatev1alpha1.AgentSession{}
	ExpectWithOffset(1, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "s"}, s)).To(Succeed())
	ExpectWithOffset(1, k8s.Delete(ctx, s)).To(Succeed())
}

// keepFinalizer is the spec's own finalizer, holding deleted calls to read.
const keepFinalizer = "example.com/keep"

// keep adds keepFinalizer to the calls; release removes it after checking
// that someone deleted them.
func keep(ns string, names ...string) {
	for _, name := range names {
		// Retried: the call's controller may write it meanwhile.
		EventuallyWithOffset(1, func(g Gomega) {
			c := &toolgatev1alpha1.ToolCall{}
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, c)).To(Succeed())
			patch := client.MergeFromWithOptions(c.DeepCopy(), client.MergeFromWithOptimisticLock{})
			c.Finalizers = append(c.Finalizers, keepFinalizer)
			g.Expect(k8s.Patch(ctx, c, patch)).To(Succeed())
		}).Should(Succeed())
	}
}

func release(ns string, names ...string) {
	for _, name := range names {
		EventuallyWithOffset(1, func(g Gomega) {
			c := &toolgatev1alpha1.ToolCall{}
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, c)).To(Succeed())
			g.Expect(c.DeletionTimestamp).NotTo(BeNil(), "call %s was not deleted", name)
			patch := client.MergeFromWithOptions(c.DeepCopy(), client.MergeFromWithOptimisticLock{})
			c.Finalizers = slices.DeleteFunc(c.Finalizers, func(f string) bool { return f == keepFinalizer })
			g.Expect(k8s.Patch(ctx, c, patch)).To(Succeed())
		}).Should(Succeed())
	}
}

// expectSessionGone waits until session "s" of ns is gone (its finalizer
// removed).
func expectSessionGone(ns string) {
	EventuallyWithOffset(1, func() bool {
		return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "s"}, &toolgatev1alpha1.AgentSession{}))
	}, 30*time.Second).Should(BeTrue(), "the session's finalizer was not removed")
}

var _ = Describe("deleting a session", func() {
	It("cancels its calls, stops their work, settles and commits each once, then lets the session go", func() {
		ns := newNamespace()
		setup(processProfile(ns, matrixTools()...).PreRule("allow-all", toolgatev1alpha1.ActionAllow, ""))
		submit(ns, "running", "sleep", `{}`, 0, 0, 2)
		submit(ns, "waiting", "echo", `{"text":"later"}`, 0, 1, 2)
		Eventually(func() int { return bodyRuns(ns, "runs") }, 30*time.Second, 20*time.Millisecond).Should(Equal(1))
		// The session deletes its calls once they committed: the spec keeps
		// them a while to read their results.
		keep(ns, "running", "waiting")

		deleteSession(ns)

		running, waiting := committedCall(ns, "running"), committedCall(ns, "waiting")
		Expect(running.Status.Result.ErrorCode).To(Equal("cancelled"))
		Expect(waiting.Status.Result.ErrorCode).To(Equal("cancelled"))
		Expect(stageTrace(waiting)).To(Equal("Call:Cancelled " + settledTail + "Cancelled"))
		Expect([]int64{*running.Status.Schedule.CommitSequence, *waiting.Status.Schedule.CommitSequence}).To(Equal([]int64{0, 1}))
		expectSessionGone(ns)
		// Its calls go with it: the session deleted them (a call holds no
		// owner reference, and envtest runs no garbage collector anyway).
		release(ns, "running", "waiting")
		Eventually(callGone(ns, "running")).Should(BeTrue())
		Eventually(callGone(ns, "waiting")).Should(BeTrue())
		Consistently(func() string { return workspaceFile(ns, "finished") }, 2500*time.Millisecond).Should(BeEmpty())
		Expect(bodyRuns(ns, "runs")).To(Equal(1))
	})

	It("settles and commits every call in model order even when a declared index never arrived, then lets the session go", func() {
		ns := newNamespace()
		setup(processProfile(ns, matrixTools()...).PreRule("allow-all", toolgatev1alpha1.ActionAllow, ""))
		submit(ns, "first", "echo", `{"text":"first"}`, 0, 0, 3)
		// Index 1 of turn 0 never arrives: index 2 and turn 1 wait for it.
		submit(ns, "third", "echo", `{"text":"third"}`, 0, 2, 3)
		submit(ns, "next", "echo", `{"text":"next"}`, 1, 0)
		committedCall(ns, "first")
		keep(ns, "first", "third", "next")

		deleteSession(ns)

		third, next := committedCall(ns, "third"), committedCall(ns, "next")
		Expect(third.Status.Result.ErrorCode).To(Equal("cancelled"))
		Expect(next.Status.Result.ErrorCode).To(Equal("cancelled"))
		Expect([]int64{*third.Status.Schedule.CommitSequence, *next.Status.Schedule.CommitSequence}).To(Equal([]int64{1, 2}))
		expectSessionGone(ns)
		release(ns, "first", "third", "next")
		Expect(bodyRuns(ns, "runs")).To(Equal(1), "only the first call's body ran")
	})
})
