package controller

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	tu "github.com/toolgate/toolgate/internal/testutil"
)

// expectCondition waits until obj's condition of type condType has status
// and reason at obj's current generation, and status.observedGeneration
// (read by observed) is that generation too. It returns the condition.
func expectCondition(obj client.Object, conditions func() []metav1.Condition, observed func() int64,
	condType string, status metav1.ConditionStatus, reason string) metav1.Condition {
	var got metav1.Condition
	EventuallyWithOffset(1, func(g Gomega) {
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
		c := meta.FindStatusCondition(conditions(), condType)
		g.Expect(c).NotTo(BeNil(), "no %s condition", condType)
		g.Expect(c.Status).To(Equal(status), c.Message)
		g.Expect(c.Reason).To(Equal(reason), c.Message)
		g.Expect(c.ObservedGeneration).To(Equal(obj.GetGeneration()), "the condition's observedGeneration")
		if observed != nil {
			g.Expect(observed()).To(Equal(obj.GetGeneration()), "status.observedGeneration")
		}
		got = *c
	}, 30*time.Second, 50*time.Millisecond).Should(Succeed())
	return got
}

func profileReady(p *toolgatev1alpha1.ToolProfile, status metav1.ConditionStatus, reason string) metav1.Condition {
	return expectCondition(p, func() []metav1.Condition { return p.Status.Conditions },
		func() int64 { return p.Status.ObservedGeneration }, toolgatev1alpha1.ConditionReady, status, reason)
}

func sessionReady(s *toolgatev1alpha1.AgentSession, status metav1.ConditionStatus, reason string) metav1.Condition {
	return expectCondition(s, func() []metav1.Condition { return s.Status.Conditions },
		func() int64 { return s.Status.ObservedGeneration }, toolgatev1alpha1.ConditionReady, status, reason)
}

func requestDecided(ar *toolgatev1alpha1.ApprovalRequest, status metav1.ConditionStatus, reason string) metav1.Condition {
	return expectCondition(ar, func() []metav1.Condition { return ar.Status.Conditions }, nil,
		toolgatev1alpha1.ApprovalRequestConditionDecided, status, reason)
}

var _ = Describe("observedGeneration and Ready on every reconcile", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	It("reports a profile whose sandbox provider is not mounted as not Ready, naming the provider, and Ready once it selects a mounted one", func() {
		// The sandbox provider defaults to Pod, which the suite does not mount.
		p := tu.MakeToolProfile(ns, "p").Obj()
		Expect(k8s.Create(ctx, p)).To(Succeed())
		s := tu.MakeAgentSession(ns, "s", "p").Obj()
		Expect(k8s.Create(ctx, s)).To(Succeed())

		c := profileReady(p, metav1.ConditionFalse, toolgatev1alpha1.ToolProfileReasonProviderNotMounted)
		Expect(c.Message).To(ContainSubstring("the Pod sandbox provider is not mounted"))
		Expect(p.Status.ToolCount).To(Equal(int32(1)), "the tools compiled")
		c = sessionReady(s, metav1.ConditionFalse, toolgatev1alpha1.AgentSessionReasonProfileNotReady)
		Expect(c.Message).To(ContainSubstring("the Pod sandbox provider is not mounted"))

		base := p.DeepCopy()
		p.Spec.Sandbox.Provider = toolgatev1alpha1.SandboxProviderProcess
		p.Spec.Sandbox.RuntimeClassName = ptr.To("gvisor")
		Expect(k8s.Patch(ctx, p, client.MergeFrom(base))).To(Succeed())
		Expect(p.Generation).To(Equal(int64(2)))
		profileReady(p, metav1.ConditionTrue, toolgatev1alpha1.ToolProfileReasonResolved)
		Expect(p.Status.Sandbox.RuntimeClassName).To(Equal("gvisor"), "the status names the runtime tool pods run under")
		sessionReady(s, metav1.ConditionTrue, toolgatev1alpha1.AgentSessionReasonActive)
	})

	It("says per tool what its body may reach, and the API server refuses a credential for a host the tool does not name", func() {
		open := shTool("open", "cat").Obj()
		named := shTool("named", "cat").Obj()
		named.Egress = &toolgatev1alpha1.ToolEgress{
			Hosts: []toolgatev1alpha1.EgressHost{{Host: "api.example.com"}, {Host: "*.cdn.example.com", Ports: []int32{443, 8443}}},
			Credentials: []toolgatev1alpha1.EgressCredential{{Host: "api.example.com",
				SecretRef: toolgatev1alpha1.SecretKeyRef{Name: "api", Key: "token"}, Format: "Bearer {{value}}"}},
		}
		p := processProfile(ns, open, named).Obj()
		p.Spec.Sandbox.AllowEgress = true
		Expect(k8s.Create(ctx, p)).To(Succeed())
		profileReady(p, metav1.ConditionTrue, toolgatev1alpha1.ToolProfileReasonResolved)
		byName := map[string]toolgatev1alpha1.ResolvedTool{}
		for _, t := range p.Status.Tools {
			byName[t.Name] = t
		}
		Expect(byName["open"].Network).To(Equal("egress"), "allowEgress: every public address")
		Expect(byName["open"].EgressHosts).To(BeEmpty())
		Expect(byName["named"].Network).To(Equal("hosts"), "a tool that names its hosts reaches them alone")
		Expect(byName["named"].EgressHosts).To(Equal([]string{"api.example.com:443 (credential)", "*.cdn.example.com:443", "*.cdn.example.com:8443"}))
		Expect(p.Spec.Tools[1].Egress.Credentials[0].Header).To(Equal("Authorization"), "the default header")

		bad := processProfile(ns, *named.DeepCopy()).Obj()
		bad.Name = "bad"
		bad.Spec.Tools[0].Egress.Credentials[0].Host = "elsewhere.example.com"
		Expect(k8s.Create(ctx, bad)).To(MatchError(ContainSubstring("a credential's host must be one of hosts")))
		bad = processProfile(ns, *named.DeepCopy()).Obj()
		bad.Name = "bad"
		bad.Spec.Tools[0].Egress.Credentials[0].Format = "Bearer"
		Expect(k8s.Create(ctx, bad)).To(MatchError(ContainSubstring("format must contain {{value}}")))
		bad = processProfile(ns, *named.DeepCopy()).Obj()
		bad.Name = "bad"
		bad.Spec.Tools[0].Egress.Hosts[0].Host = "API.example.com/path"
		Expect(k8s.Create(ctx, bad)).To(MatchError(ContainSubstring("spec.tools[0].egress.hosts[0].host")))

		By("an IPv6 address is a host in its canonical form, without brackets")
		v6 := processProfile(ns, *named.DeepCopy()).Obj()
		v6.Name = "v6"
		v6.Spec.Tools[0].Egress.Hosts[0].Host, v6.Spec.Tools[0].Egress.Credentials[0].Host = "2001:db8::1", "2001:db8::1"
		Expect(k8s.Create(ctx, v6)).To(Succeed())
		profileReady(v6, metav1.ConditionTrue, toolgatev1alpha1.ToolProfileReasonResolved)
		Expect(v6.Status.Tools[0].EgressHosts[0]).To(Equal("[2001:db8::1]:443 (credential)"))
		for i, host := range []string{"2001:DB8::1", "2001:db8:0::1", "[2001:db8::1]", "1:2:3", ":::"} {
			bad = processProfile(ns, *named.DeepCopy()).Obj()
			bad.Name = fmt.Sprintf("bad-v6-%d", i)
			bad.Spec.Tools[0].Egress.Hosts[1].Host = host
			if err := k8s.Create(ctx, bad); err != nil {
				continue // refused by the CRD's pattern
			}
			profileReady(bad, metav1.ConditionFalse, toolgatev1alpha1.ToolProfileReasonSchemaInvalid)
			Expect(meta.FindStatusCondition(bad.Status.Conditions, toolgatev1alpha1.ConditionReady).Message).To(ContainSubstring("an IPv6 host is a canonical address"), host)
		}
	})

	It("stamps the generation of a profile update it rejects", func() {
		p := processProfile(ns, shTool("echo", "cat").Obj()).Obj()
		Expect(k8s.Create(ctx, p)).To(Succeed())
		profileReady(p, metav1.ConditionTrue, toolgatev1alpha1.ToolProfileReasonResolved)
		Expect(p.Status.ObservedGeneration).To(Equal(int64(1)))

		// The API server accepts it (an object schema); the profile does
		// not compile (parameters must describe an object).
		base := p.DeepCopy()
		p.Spec.Tools[0].Parameters = tu.JSON(`{"type":"string"}`)
		Expect(k8s.Patch(ctx, p, client.MergeFrom(base))).To(Succeed())
		Expect(p.Generation).To(Equal(int64(2)))
		c := profileReady(p, metav1.ConditionFalse, toolgatev1alpha1.ToolProfileReasonSchemaInvalid)
		Expect(c.Message).To(ContainSubstring("tool echo: parameters"))
		Expect(p.Status.ObservedGeneration).To(Equal(int64(2)))
		// An operator is told, once for this generation.
		Eventually(func() []eventsv1.Event { return eventsAbout(ns, "ToolProfile", p.Name) }).Should(ConsistOf(And(
			HaveField("Reason", EventProfileInvalid), HaveField("Type", corev1.EventTypeWarning),
			HaveField("Note", ContainSubstring("SchemaInvalid: tool echo: parameters")))))
	})

	It("refuses a rule reading a field its tool's closed schema lacks, naming both, and warns of one an open schema does not declare", func() {
		closed := shTool("write", "cat").Parameters(`{"type":"object","additionalProperties":false,"properties":{"path":{"type":"string"}}}`).Obj()
		typo := processProfile(ns, closed).PreRule("no-dotfiles", toolgatev1alpha1.ActionDeny, "call.args.pth.startsWith('.')", "write").Obj()
		typo.Name = "typo"
		Expect(k8s.Create(ctx, typo)).To(Succeed())
		c := profileReady(typo, metav1.ConditionFalse, toolgatev1alpha1.ToolProfileReasonExpressionInvalid)
		Expect(c.Message).To(Equal("preExecute rule no-dotfiles: when: reads call.args.pth, a field the parameters of tool write do not have (they allow no other field)"))

		open := processProfile(ns, shTool("read", "cat").Obj()).Guard("no-dotfiles", "call.args.pth.startsWith('.')", "no dotfiles").Obj()
		open.Name = "open"
		Expect(k8s.Create(ctx, open)).To(Succeed())
		c = profileReady(open, metav1.ConditionTrue, toolgatev1alpha1.ToolProfileReasonResolved)
		Expect(c.Message).To(ContainSubstring("warnings (1): guard no-dotfiles: deny: reads call.args.pth, a field the parameters of tool read do not declare"))
		Eventually(func() []eventsv1.Event { return eventsAbout(ns, "ToolProfile", open.Name) }).Should(ConsistOf(And(
			HaveField("Reason", EventProfileWarnings), HaveField("Type", corev1.EventTypeWarning),
			HaveField("Note", ContainSubstring("reads call.args.pth")))))
	})

	It("stamps the generation of a session it cannot make Ready", func() {
		s := tu.MakeAgentSession(ns, "s", "missing").Obj()
		Expect(k8s.Create(ctx, s)).To(Succeed())
		sessionReady(s, metav1.ConditionFalse, toolgatev1alpha1.AgentSessionReasonProfileNotFound)
		Expect(s.Status.ObservedGeneration).To(Equal(int64(1)))

		base := s.DeepCopy()
		s.Spec.MaxParallel = 8
		Expect(k8s.Patch(ctx, s, client.MergeFrom(base))).To(Succeed())
		Expect(s.Generation).To(Equal(int64(2)))
		sessionReady(s, metav1.ConditionFalse, toolgatev1alpha1.AgentSessionReasonProfileNotFound)
		// Written whatever the outcome: the log head of an empty session.
		Expect(s.Status.CurrentTurn).To(Equal(int64(0)))
		Expect(s.Status.CommittedTurn).To(Equal(int64(-1)))
		Expect(s.Status.CommittedCalls).To(Equal(int64(0)))
	})
})

var _ = Describe("a question that needs two approvals", func() {
	It("asks with the rule's approvers, records each approval with its time, and runs the call once both are in", func() {
		ns := newNamespace()
		p := processProfile(ns, shTool("echo", "cat").Obj()).PreRule("ask-two", toolgatev1alpha1.ActionAsk, "")
		p.Spec.PreExecute[0].Approvers = &toolgatev1alpha1.Approvers{Required: 2, Groups: []string{"reviewers"}}
		setup(p)
		submit(ns, "c1", "echo", `{"text":"hello"}`, 0, 0)
		ar := approvalRequest(ns, "c1")
		Expect(ar.Spec.Approvers).To(Equal(&toolgatev1alpha1.Approvers{Required: 2, Groups: []string{"reviewers"}}), "the rule's approvers, frozen in the question")

		approve := func(user string) {
			GinkgoHelper()
			Expect(k8s.Get(ctx, client.ObjectKeyFromObject(ar), ar)).To(Succeed())
			base := ar.DeepCopy()
			ar.Spec.Approvals = append(ar.Spec.Approvals, ar.ApprovalOf(user, ""))
			Expect(k8s.Patch(ctx, ar, client.MergeFrom(base))).To(Succeed())
		}
		approve("carol")
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(ar), ar)).To(Succeed())
			g.Expect(ar.Status.Approvals).To(HaveLen(1))
		}).Should(Succeed())
		Expect(ar.Status.Approvals[0].User).To(Equal("carol"))
		Expect(ar.Status.Approvals[0].RecordedAt.IsZero()).To(BeFalse())
		first := ar.Status.Approvals[0].RecordedAt
		Consistently(func(g Gomega) {
			c := &toolgatev1alpha1.ToolCall{}
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "c1"}, c)).To(Succeed())
			g.Expect(c.Status.Result).To(BeNil(), "one approval of two does not run the call")
		}, 2*time.Second, 200*time.Millisecond).Should(Succeed())

		approve("dave")
		requestDecided(ar, metav1.ConditionTrue, toolgatev1alpha1.ApprovalRequestReasonApproved)
		Expect(committedCall(ns, "c1").Status.Result.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded))
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(ar), ar)).To(Succeed())
		Expect(ar.Status.Approvals).To(HaveLen(2))
		Expect(ar.Status.Approvals[0].RecordedAt).To(Equal(first), "a recorded time is never rewritten")
	})
})

var _ = Describe("an approver's message", func() {
	approveWith := func(ar *toolgatev1alpha1.ApprovalRequest, user, msg string) {
		GinkgoHelper()
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(ar), ar)).To(Succeed())
		base := ar.DeepCopy()
		ar.Spec.Approvals = append(ar.Spec.Approvals, ar.ApprovalOf(user, msg))
		Expect(k8s.Patch(ctx, ar, client.MergeFrom(base))).To(Succeed())
	}
	run := func(relay bool) (*toolgatev1alpha1.ApprovalRequest, *toolgatev1alpha1.ToolCall) {
		GinkgoHelper()
		ns := newNamespace()
		p := processProfile(ns, shTool("echo", "cat").Obj()).PreRule("ask-two", toolgatev1alpha1.ActionAsk, "")
		p.Spec.PreExecute[0].Approvers = &toolgatev1alpha1.Approvers{Required: 2, Groups: []string{"reviewers"}}
		p.Spec.Approval.RelayApprovalMessages = relay
		setup(p)
		submit(ns, "c1", "echo", `{"text":"hello"}`, 0, 0)
		ar := approvalRequest(ns, "c1")
		approveWith(ar, "carol", "fine, but only\nthis once")
		approveWith(ar, "dave", "")
		return ar, committedCall(ns, "c1")
	}

	It("reaches the model as an Approval context when the profile relays approval messages, and the question says so", func() {
		ar, c := run(true)
		Expect(ar.Spec.RelayApprovalMessages).To(BeTrue(), "the approvers are told their words reach the model")
		Expect(c.Status.Result.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded))
		Expect(c.Status.Result.Contexts).To(Equal([]toolgatev1alpha1.AdditionalContext{{
			Source: toolgatev1alpha1.ContextSourceApproval, Rule: "ask-two", Message: "approved by carol: fine, but only this once",
		}}), "one line per approver who wrote something")
	})

	It("stays with the approvers when the profile does not relay them", func() {
		ar, c := run(false)
		Expect(ar.Spec.RelayApprovalMessages).To(BeFalse())
		Expect(c.Status.Result.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded))
		Expect(c.Status.Result.Contexts).To(BeEmpty())
	})
})

var _ = Describe("an ApprovalRequest's Decided condition", func() {
	var ns string
	BeforeEach(func() {
		ns = newNamespace()
		setup(processProfile(ns, shTool("echo", "cat").Obj()).PreRule("ask-all", toolgatev1alpha1.ActionAsk, ""))
		submit(ns, "c1", "echo", `{"text":"hello"}`, 0, 0)
	})

	It("is False while pending and True once a person approved", func() {
		ar := approvalRequest(ns, "c1")
		requestDecided(ar, metav1.ConditionFalse, toolgatev1alpha1.ApprovalRequestReasonPending)
		decide(ar, toolgatev1alpha1.DecisionApprove)
		requestDecided(ar, metav1.ConditionTrue, toolgatev1alpha1.ApprovalRequestReasonApproved)
		Expect(ar.Status.Phase).To(Equal(toolgatev1alpha1.ApprovalApproved))
		Expect(committedCall(ns, "c1").Status.Result.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded))
		// The session's COMMITTED column counts it.
		Eventually(func(g Gomega) {
			s := &toolgatev1alpha1.AgentSession{}
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "s"}, s)).To(Succeed())
			g.Expect(s.Status.CommittedCalls).To(Equal(int64(1)))
			g.Expect(s.Status.CommittedTurn).To(Equal(int64(0)))
		}).Should(Succeed())
	})

	It("is True once a person denied", func() {
		ar := approvalRequest(ns, "c1")
		decide(ar, toolgatev1alpha1.DecisionDeny)
		requestDecided(ar, metav1.ConditionTrue, toolgatev1alpha1.ApprovalRequestReasonDenied)
		Expect(ar.Status.Phase).To(Equal(toolgatev1alpha1.ApprovalDenied))
	})

	It("stays False, reason Cancelled, when the call is cancelled before anyone decided", func() {
		ar := approvalRequest(ns, "c1")
		c := &toolgatev1alpha1.ToolCall{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "c1"}, c)).To(Succeed())
		base := c.DeepCopy()
		c.Spec.CancelRequested = true
		Expect(k8s.Patch(ctx, c, client.MergeFrom(base))).To(Succeed())
		Expect(committedCall(ns, "c1").Status.Result.ErrorCode).To(Equal("cancelled"))
		requestDecided(ar, metav1.ConditionFalse, toolgatev1alpha1.ApprovalRequestReasonCancelled)
		Expect(ar.Status.Phase).To(Equal(toolgatev1alpha1.ApprovalCancelled))
	})
})
