package apicontract

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	tu "github.com/toolgate/toolgate/internal/testutil"
)

// expectUpdateRejected applies edit to a fresh copy of obj and expects the
// API server to refuse the update naming field.
func expectUpdateRejected[T client.Object](obj T, edit func(T), field string) {
	fresh := obj.DeepCopyObject().(T)
	Expect(k8s.Get(ctx, client.ObjectKeyFromObject(obj), fresh)).To(Succeed())
	edit(fresh)
	err := k8s.Update(ctx, fresh)
	Expect(err).To(HaveOccurred(), "the API server accepted a forbidden update of %s", field)
	Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want 422 Invalid, got: %v", err)
	Expect(err.Error()).To(ContainSubstring(field))
}

func expectUpdateAccepted[T client.Object](obj T, edit func(T)) {
	fresh := obj.DeepCopyObject().(T)
	Expect(k8s.Get(ctx, client.ObjectKeyFromObject(obj), fresh)).To(Succeed())
	edit(fresh)
	Expect(k8s.Update(ctx, fresh)).To(Succeed())
}

var _ = Describe("a ToolCall's spec", func() {
	var tc *v1.ToolCall

	BeforeEach(func() {
		ns := newNamespace()
		tc = tu.MakeToolCall(ns, "c", "s").At(3, 1).Of(2).Obj()
		Expect(k8s.Create(ctx, tc)).To(Succeed())
	})

	DescribeTable("is immutable after create",
		func(edit func(*v1.ToolCall), field string) { expectUpdateRejected(tc, edit, field) },
		Entry("sessionRef", func(c *v1.ToolCall) { c.Spec.SessionRef.Name = "other" }, "spec.sessionRef"),
		Entry("turn", func(c *v1.ToolCall) { c.Spec.Turn = 4 }, "spec.turn"),
		Entry("index", func(c *v1.ToolCall) { c.Spec.Index = 0 }, "spec.index"),
		Entry("callID", func(c *v1.ToolCall) { c.Spec.CallID = "call_other" }, "spec.callID"),
		Entry("turnSize", func(c *v1.ToolCall) { c.Spec.TurnSize = 3 }, "spec.turnSize"),
		Entry("tool", func(c *v1.ToolCall) { c.Spec.Tool = "write_file" }, "spec.tool"),
		Entry("arguments", func(c *v1.ToolCall) { c.Spec.Arguments = `{"text":"bye"}` }, "spec.arguments"),
		Entry("requester", func(c *v1.ToolCall) { c.Spec.Requester = "someone-else" }, "spec.requester"),
		Entry("parentRef added", func(c *v1.ToolCall) {
			c.Spec.ParentRef = &v1.LocalObjectReference{Name: "parent"}
		}, "spec.parentRef"),
	)

	It("keeps a parentRef once set", func() {
		child := tu.MakeToolCall(tc.Namespace, "child", "s").Parent("c").Obj()
		Expect(k8s.Create(ctx, child)).To(Succeed())
		expectUpdateRejected(child, func(c *v1.ToolCall) { c.Spec.ParentRef = nil }, "spec.parentRef")
		expectUpdateRejected(child, func(c *v1.ToolCall) { c.Spec.ParentRef.Name = "other" }, "spec.parentRef")
	})

	It("accepts a cancellation request, and never its withdrawal", func() {
		expectUpdateAccepted(tc, func(c *v1.ToolCall) { c.Spec.CancelRequested = true })
		expectUpdateRejected(tc, func(c *v1.ToolCall) { c.Spec.CancelRequested = false }, "spec.cancelRequested")
		// Repeating the request is harmless.
		expectUpdateAccepted(tc, func(c *v1.ToolCall) { c.Spec.CancelRequested = true })
	})

	It("keeps arguments byte for byte, large integers and number spellings included", func() {
		args := `{"id": 123456789012345678901234567890, "ratio": 1.10, "neg": -0, "exp": 1e400, "text": "caf\u00e9"}`
		exact := tu.MakeToolCall(tc.Namespace, "exact", "s").Tool("echo", args).Obj()
		Expect(k8s.Create(ctx, exact)).To(Succeed())
		got := &v1.ToolCall{}
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(exact), got)).To(Succeed())
		Expect(got.Spec.Arguments).To(Equal(args))
	})
})

var _ = Describe("an ApprovalRequest's decision", func() {
	var ar *v1.ApprovalRequest

	BeforeEach(func() {
		ns := newNamespace()
		ar = tu.MakeApprovalRequest(ns, "a", "c", metav1.NewTime(time.Now().Add(time.Hour).Truncate(time.Second))).Session("s").Obj()
		Expect(k8s.Create(ctx, ar)).To(Succeed())
	})

	It("can be set once and then never changed or removed", func() {
		expectUpdateAccepted(ar, func(a *v1.ApprovalRequest) {
			a.Spec.Decision = &v1.ApprovalDecision{Action: v1.DecisionApprove, DecidedBy: "alice"}
		})
		expectUpdateRejected(ar, func(a *v1.ApprovalRequest) { a.Spec.Decision.Action = v1.DecisionDeny }, "spec.decision")
		expectUpdateRejected(ar, func(a *v1.ApprovalRequest) { a.Spec.Decision.DecidedBy = "mallory" }, "spec.decision")
		expectUpdateRejected(ar, func(a *v1.ApprovalRequest) { a.Spec.Decision.Message = "changed my mind" }, "spec.decision")
		expectUpdateRejected(ar, func(a *v1.ApprovalRequest) { a.Spec.Decision = nil }, "spec.decision")
	})

	DescribeTable("leaves the question immutable",
		func(edit func(*v1.ApprovalRequest), field string) { expectUpdateRejected(ar, edit, field) },
		Entry("toolCallRef", func(a *v1.ApprovalRequest) { a.Spec.ToolCallRef.Name = "other" }, "spec.toolCallRef"),
		Entry("sessionRef changed", func(a *v1.ApprovalRequest) { a.Spec.SessionRef.Name = "other" }, "spec.sessionRef"),
		Entry("sessionRef removed", func(a *v1.ApprovalRequest) { a.Spec.SessionRef = nil }, "spec.sessionRef"),
		Entry("tool", func(a *v1.ApprovalRequest) { a.Spec.Tool = "other" }, "spec.tool"),
		Entry("argumentsPreview", func(a *v1.ApprovalRequest) { a.Spec.ArgumentsPreview = "{}" }, "spec.argumentsPreview"),
		Entry("reason", func(a *v1.ApprovalRequest) { a.Spec.Reason = "other" }, "spec.reason"),
		Entry("requester", func(a *v1.ApprovalRequest) { a.Spec.Requester = "other" }, "spec.requester"),
		Entry("deadline", func(a *v1.ApprovalRequest) {
			a.Spec.Deadline = metav1.NewMicroTime(a.Spec.Deadline.Add(time.Hour))
		}, "spec.deadline"),
	)
})

var _ = Describe("an ApprovalRequest asked without a session", func() {
	It("gets none added later (an approver cannot relabel whose transcript a call enters)", func() {
		ar := tu.MakeApprovalRequest(newNamespace(), "a", "c", metav1.NewTime(time.Now().Add(time.Hour).Truncate(time.Second))).Obj()
		Expect(k8s.Create(ctx, ar)).To(Succeed())
		expectUpdateRejected(ar, func(a *v1.ApprovalRequest) { a.Spec.SessionRef = &v1.LocalObjectReference{Name: "s"} }, "spec.sessionRef")
	})
})

var _ = Describe("an AgentSession's spec", func() {
	It("keeps its profile and workspace", func() {
		ns := newNamespace()
		s := tu.MakeAgentSession(ns, "s", "p").ExistingClaim("ws").Obj()
		Expect(k8s.Create(ctx, s)).To(Succeed())
		expectUpdateRejected(s, func(s *v1.AgentSession) { s.Spec.ProfileRef.Name = "q" }, "spec.profileRef")
		expectUpdateRejected(s, func(s *v1.AgentSession) { s.Spec.Workspace.ExistingClaim = "other" }, "spec.workspace")
		expectUpdateAccepted(s, func(s *v1.AgentSession) { s.Spec.MaxParallel = 8 })
	})

	It("gets defaults from the schema", func() {
		ns := newNamespace()
		s := tu.MakeAgentSession(ns, "s", "p").Obj()
		Expect(k8s.Create(ctx, s)).To(Succeed())
		Expect(s.Spec.MaxParallel).To(Equal(int32(4)))
		p := tu.MakeToolProfile(ns, "p").Obj()
		Expect(k8s.Create(ctx, p)).To(Succeed())
		Expect(p.Spec.PermissionPreset).To(Equal(v1.PresetRestricted))
		Expect(p.Spec.Sandbox.Mode).To(Equal(v1.SandboxReadOnly))
		Expect(p.Spec.Sandbox.WorkspaceRoot).To(Equal("/workspace"))
		Expect(p.Spec.Sandbox.Provider).To(Equal(v1.SandboxProviderPod))
		Expect(p.Spec.Approval.Provider).To(Equal(v1.ApprovalProviderAPIServer))
		Expect(p.Spec.Tools[0].TimeoutSeconds).To(Equal(int32(60)))
	})

	It("gets nested defaults from YAML that leaves whole sections out", func() {
		// The typed client always sends empty structs; kubectl apply of
		// YAML does not. Defaults must not depend on that.
		ns := newNamespace()
		u := &unstructured.Unstructured{}
		Expect(yaml.Unmarshal([]byte(`
apiVersion: toolgate.dev/v1alpha1
kind: ToolProfile
metadata: {name: bare, namespace: `+ns+`}
spec:
  tools:
  - name: echo
    description: echo the arguments
    parameters: {type: object}
    output: {schema: {type: object}, render: {format: JSON}}
    container: {image: busybox, command: [/bin/cat]}
`), &u.Object)).To(Succeed())
		Expect(k8s.Create(ctx, u)).To(Succeed())
		p := &v1.ToolProfile{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "bare"}, p)).To(Succeed())
		Expect(p.Spec.Sandbox.Mode).To(Equal(v1.SandboxReadOnly))
		Expect(p.Spec.Sandbox.WorkspaceRoot).To(Equal("/workspace"))
		Expect(p.Spec.Sandbox.Provider).To(Equal(v1.SandboxProviderPod))
		Expect(p.Spec.Approval.Provider).To(Equal(v1.ApprovalProviderAPIServer))
		Expect(p.Spec.Approval.TimeoutSeconds).To(Equal(int32(900)))
	})
})
