package controller

import (
	"strings"
	"time"

	"github.com/toolgate/toolgate/internal/keys"
	approvalapiserver "github.com/toolgate/toolgate/internal/providers/approval/apiserver"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/audit"
	"github.com/toolgate/toolgate/internal/pipeline"
	tu "github.com/toolgate/toolgate/internal/testutil"
)

var _ = Describe("the audit trail", func() {
	It("keeps the record of a call that retention deleted: who asked, the arguments by digest and redacted, every verdict, who approved, the outcome", func() {
		ns := newNamespace()
		setup(processProfile(ns, shTool("echo", "cat").Obj()).PreRule("ask-all", toolgatev1alpha1.ActionAsk, "").
			Approval(func(a *toolgatev1alpha1.ApprovalSettings) { a.RedactArguments = []string{"token"} }),
			func(s *tu.AgentSessionWrapper) { s.Spec.TTLSecondsAfterCommit = ptr.To[int32](0) })
		tc := submit(ns, "c1", "echo", `{"text":"hello","token":"s3cret-arg"}`, 0, 0)
		ar := approvalRequest(ns, "c1")
		digest := ar.Annotations[toolgatev1alpha1.AnnotationArgumentsDigest]
		decide(ar, toolgatev1alpha1.DecisionApprove)
		Eventually(callGone(ns, "c1"), 30*time.Second).Should(BeTrue(), "retention deletes the committed call")
		// (Its question goes with it by garbage collection, which envtest
		// does not run; the e2e suite's cluster does.)

		var call, decision *audit.Record
		for _, r := range auditTrail.of(tc.UID) {
			switch r.Type {
			case audit.TypeCall:
				call = &r
			case audit.TypeDecision:
				decision = &r
			}
		}
		Expect(call).NotTo(BeNil(), "the settled call's record")
		Expect(decision).NotTo(BeNil(), "the decision's record")

		Expect(call.ID).To(Equal(string(tc.UID) + "/call"))
		Expect(call.Namespace).To(Equal(ns))
		Expect(call.Session).To(Equal("s"))
		Expect(call.Call).To(Equal("c1"))
		Expect(call.Tool).To(Equal("echo"))
		Expect(call.Requester).To(Equal(tc.Spec.Requester))
		Expect(call.Profile).To(Equal("p"))
		Expect(call.ArgumentsDigest).To(Equal(digest), "the same digest as the question's")
		Expect(call.DigestKey).To(Equal(keys.KeyID(suiteKey)), "the key the digests were made under, named")
		Expect(call.ArgumentsPreview).To(ContainSubstring("[redacted]"))
		Expect(call.Outcome).To(Equal(string(toolgatev1alpha1.OutcomeSucceeded)))
		Expect(call.ResultDigest).To(HavePrefix("hmac-sha256:"))
		Expect(call.Verdicts).To(ContainElement(And(HaveField("Stage", "PreExecute"), HaveField("Verdict", "Ask"), HaveField("Reason", "ask-all"))))
		Expect(call.Verdicts).To(ContainElement(And(HaveField("Stage", "Approval"), HaveField("Verdict", "AllowedOnce"))))
		Expect(call.Approval).NotTo(BeNil())
		Expect(call.Approval.Phase).To(Equal(string(toolgatev1alpha1.ApprovalApproved)))
		Expect(call.Approval.Decision).To(Equal(&audit.Decision{Action: "Approve", DecidedBy: "alice", Message: "checked"}))

		Expect(decision.ID).To(Equal(string(tc.UID) + "/decision"))
		Expect(decision.Approval.Decision.DecidedBy).To(Equal("alice"))
		Expect(decision.ArgumentsDigest).To(Equal(digest))
		Expect(decision.DigestKey).To(Equal(call.DigestKey))

		for _, r := range []*audit.Record{call, decision} {
			Expect(r.ArgumentsPreview).NotTo(ContainSubstring("s3cret-arg"), "a redacted argument")
			Expect(r.Time.IsZero()).To(BeFalse())
			Expect(r.Time.Before(metav1.Now().Add(time.Minute))).To(BeTrue())
		}
	})

	It("records a call nobody was asked about by its digest alone: its arguments stay out of the manager's output", func() {
		ns := newNamespace()
		setup(processProfile(ns, shTool("echo", "cat").Obj()).PreRule("allow-all", toolgatev1alpha1.ActionAllow, ""))
		tc := submit(ns, "c1", "echo", `{"text":"e2e-not-in-the-trail"}`, 0, 0)
		Expect(committedCall(ns, "c1").Status.Result.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded))
		Eventually(func() []audit.Record { return auditTrail.of(tc.UID) }).Should(HaveLen(1))
		r := auditTrail.of(tc.UID)[0]
		Expect(r.ArgumentsDigest).To(HavePrefix("hmac-sha256:"))
		Expect(r.ArgumentsPreview).To(BeEmpty())
		Expect(r.Approval).To(BeNil())
	})

	It("records a call the cache holds without its bulk by the digests of the call as stored", func() {
		ns := newNamespace()
		setup(processProfile(ns, shTool("echo", "cat").Obj()).PreRule("allow-all", toolgatev1alpha1.ActionAllow, ""))
		args := `{"text":"` + strings.Repeat("b", 4<<10) + `"}`
		tc := submit(ns, "c1", "echo", args, 0, 0)
		res := committedCall(ns, "c1").Status.Result
		Expect(res.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded))
		Expect(len(res.Value)).To(BeNumerically(">", strippedAbove))

		// A manager that starts after the call settled writes its record
		// again (at least once) from its cache, which holds the call
		// without its arguments.
		stored := &toolgatev1alpha1.ToolCall{}
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(tc), stored)).To(Succeed())
		cached, err := StripCachedCall(stored.DeepCopy())
		Expect(err).NotTo(HaveOccurred())
		Expect(strippedInCache(cached.(*toolgatev1alpha1.ToolCall))).To(BeTrue())
		trail := &memoryAudit{}
		restarted := &ToolCallReconciler{Client: k8s, APIReader: k8s, Clock: clock.RealClock{}, Audit: trail, AuditDigests: approvalapiserver.AuditDigests(suiteKey)}
		restarted.auditCall(ctx, &callScope{tc: cached.(*toolgatev1alpha1.ToolCall)})
		Expect(trail.of(tc.UID)).To(HaveLen(1))
		r := trail.of(tc.UID)[0]
		Expect(r.ArgumentsDigest).To(Equal(approvalapiserver.ArgumentsDigest(suiteKey, pipeline.ArgumentsOf(args))), "the arguments the cache left out")
		Expect(r.ResultDigest).To(Equal(approvalapiserver.ResultDigest(suiteKey, res.Value, res.Content)), "the result the cache left out")
	})

	It("records a denied call's question as it ended, not as the cache last saw it", func() {
		ns := newNamespace()
		setup(processProfile(ns, shTool("echo", "cat").Obj()).PreRule("ask-all", toolgatev1alpha1.ActionAsk, ""))
		tc := submit(ns, "c1", "echo", `{"text":"hello"}`, 0, 0)
		decide(approvalRequest(ns, "c1"), toolgatev1alpha1.DecisionDeny)
		Expect(committedCall(ns, "c1").Status.Result.ErrorCode).To(Equal("approval_rejected"))
		var call *audit.Record
		Eventually(func() *audit.Record {
			for _, r := range auditTrail.of(tc.UID) {
				if r.Type == audit.TypeCall {
					call = &r
				}
			}
			return call
		}).ShouldNot(BeNil())
		Expect(call.Approval.Phase).To(Equal(string(toolgatev1alpha1.ApprovalDenied)))
		Expect(call.Approval.Resolved).NotTo(BeNil())
		Expect(call.Code).To(Equal("approval_rejected"))
	})
})

var _ = Describe("the audit trail after a leader change", Ordered, func() {
	BeforeAll(ownManagers)

	It("writes a recent call's record again, as complete as the first: its profile and runtime class too", func() {
		ns := newNamespace()
		startManager(env.Config)
		setup(processProfile(ns, shTool("echo", "cat").Obj()).Preset(toolgatev1alpha1.PresetTrusted).
			Sandbox(func(s *toolgatev1alpha1.SandboxPolicy) { s.RuntimeClassName = ptr.To("gvisor") }))
		tc := submit(ns, "c1", "echo", `{"text":"hello"}`, 0, 0)
		committedCall(ns, "c1")
		calls := func() []audit.Record {
			var out []audit.Record
			for _, r := range auditTrail.of(tc.UID) {
				if r.Type == audit.TypeCall {
					out = append(out, r)
				}
			}
			return out
		}
		Eventually(calls).Should(HaveLen(1))
		stopRunningManager()

		startManager(env.Config) // a new leader: it knows nothing of what its predecessor wrote
		Eventually(calls, 30*time.Second).Should(HaveLen(2), "written again, at least once")
		for _, r := range calls() {
			Expect(r.ID).To(Equal(string(tc.UID) + "/call"))
			Expect(r.Profile).To(Equal("p"))
			Expect(r.RuntimeClass).To(Equal("gvisor"))
			Expect(r.Outcome).To(Equal(string(toolgatev1alpha1.OutcomeSucceeded)))
		}
	})
})
