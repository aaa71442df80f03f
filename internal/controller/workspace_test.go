package controller

import (
	"strings"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	tu "github.com/toolgate/toolgate/internal/testutil"
)

// TestPendingProblem: the checks of a Pending workspace claim, in order.
func TestPendingProblem(t *testing.T) {
	wffc, immediate := storagev1.VolumeBindingWaitForFirstConsumer, storagev1.VolumeBindingImmediate
	classes := map[string]*storagev1.StorageClass{
		"local": {ObjectMeta: metav1.ObjectMeta{Name: "local"}, Provisioner: "example.com/local", VolumeBindingMode: &wffc},
		"fast":  {ObjectMeta: metav1.ObjectMeta{Name: "fast"}, Provisioner: "example.com/fast", VolumeBindingMode: &immediate},
	}
	for _, tc := range []struct {
		name    string
		class   string
		classes map[string]*storagev1.StorageClass
		waited  time.Duration
		want    string // a part of the problem; "" for none
		recheck bool
	}{
		{name: "a class that does not exist never binds", class: "missing", classes: classes, want: "names StorageClass missing, which does not exist"},
		{name: "a class binding on first consumer waits for its pod", class: "local", classes: classes, waited: time.Hour},
		{name: "an immediate class has the grace period", class: "fast", classes: classes, waited: time.Second, recheck: true},
		{name: "an immediate class past it", class: "fast", classes: classes, waited: time.Minute, want: "StorageClass fast (provisioner example.com/fast) has not provisioned it"},
		{name: "no class and no default past it", classes: classes, waited: time.Minute, want: "names no StorageClass and the cluster has no default"},
		{name: "classes unreadable: never called a problem", class: "fast", waited: time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, recheck := pendingProblem("s-workspace", tc.class, tc.classes, tc.waited)
			if (tc.want == "") != (got == "") || (tc.want != "" && !strings.Contains(got, tc.want)) {
				t.Fatalf("problem %q, want %q", got, tc.want)
			}
			if tc.recheck != (recheck > 0) {
				t.Fatalf("recheck %s, want one: %v", recheck, tc.recheck)
			}
		})
	}
}

var _ = Describe("a workspace that cannot be mounted", func() {
	It("makes the session not Ready with the cause, and its calls fail at once with workspace_unavailable, in order", func() {
		ns := newNamespace()
		Expect(k8s.Create(ctx, processProfile(ns, loggingTool("fast", "0", true)).Obj())).To(Succeed())
		s := tu.MakeAgentSession(ns, "s", "p").ClaimTemplate("1Gi").Obj()
		s.Spec.Workspace.VolumeClaimTemplate.StorageClassName = ptr.To("no-such-class")
		Expect(k8s.Create(ctx, s)).To(Succeed())
		sessionReady(s, metav1.ConditionFalse, toolgatev1alpha1.AgentSessionReasonWorkspaceUnavailable)
		Eventually(func() string {
			Expect(k8s.Get(ctx, client.ObjectKeyFromObject(s), s)).To(Succeed())
			return meta.FindStatusCondition(s.Status.Conditions, toolgatev1alpha1.ConditionReady).Message
		}, 30*time.Second).Should(ContainSubstring("StorageClass no-such-class, which does not exist"))

		submit(ns, "a", "fast", `{"id":"A"}`, 0, 0, 2)
		submit(ns, "b", "fast", `{"id":"B"}`, 0, 1, 2)
		for i, name := range []string{"a", "b"} {
			c := committedCall(ns, name)
			Expect(c.Status.Result.ErrorCode).To(Equal("workspace_unavailable"))
			Expect(c.Status.Result.Message).To(ContainSubstring("no-such-class"))
			Expect(c.Status.Schedule.CommitSequence).To(HaveValue(BeEquivalentTo(i)), "model order")
		}
		Expect(logIndex(ns, "start A")).To(Equal(-1), "no body ran")
	})
})

var _ = Describe("a workspace claim template beyond its profile's bounds", func() {
	It("creates no claim and keeps the session not Ready, naming the bound", func() {
		ns := newNamespace()
		p := processProfile(ns, loggingTool("fast", "0", true)).Obj()
		p.Spec.Sandbox.Workspace = &toolgatev1alpha1.WorkspaceBounds{StorageClassNames: []string{"standard"}, MaxSize: ptr.To(resource.MustParse("10Gi"))}
		Expect(k8s.Create(ctx, p)).To(Succeed())
		for name, tmpl := range map[string]toolgatev1alpha1.WorkspaceClaimTemplate{
			"premium": {StorageClassName: ptr.To("premium-ultra-ssd"), Size: resource.MustParse("1Gi")},
			"huge":    {StorageClassName: ptr.To("standard"), Size: resource.MustParse("500Ti")},
			"default": {Size: resource.MustParse("1Gi")},
		} {
			s := tu.MakeAgentSession(ns, name, "p").Obj()
			s.Spec.Workspace = &toolgatev1alpha1.WorkspaceSpec{VolumeClaimTemplate: &tmpl}
			Expect(k8s.Create(ctx, s)).To(Succeed())
			sessionReady(s, metav1.ConditionFalse, toolgatev1alpha1.AgentSessionReasonWorkspaceRefused)
			Expect(k8s.Get(ctx, client.ObjectKeyFromObject(s), s)).To(Succeed())
			Expect(meta.FindStatusCondition(s.Status.Conditions, toolgatev1alpha1.ConditionReady).Message).To(ContainSubstring("sandbox.workspace"))
			Consistently(func() bool {
				return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name + "-workspace"}, &corev1.PersistentVolumeClaim{}))
			}, time.Second).Should(BeTrue(), "no claim was created for %s", name)
		}
		within := tu.MakeAgentSession(ns, "within", "p").Obj()
		within.Spec.Workspace = &toolgatev1alpha1.WorkspaceSpec{VolumeClaimTemplate: &toolgatev1alpha1.WorkspaceClaimTemplate{
			StorageClassName: ptr.To("standard"), Size: resource.MustParse("10Gi")}}
		Expect(k8s.Create(ctx, within)).To(Succeed())
		Eventually(func() error {
			return k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "within-workspace"}, &corev1.PersistentVolumeClaim{})
		}, 20*time.Second).Should(Succeed(), "a template within the bounds gets its claim")
	})

	It("keeps the session not Ready while its claim waits to bind, and lets its calls go on", func() {
		ns := newNamespace()
		immediate := storagev1.VolumeBindingImmediate
		class := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: ns + "-immediate"}, Provisioner: "example.com/none", VolumeBindingMode: &immediate}
		Expect(k8s.Create(ctx, class)).To(Succeed())
		DeferCleanup(func() { _ = k8s.Delete(ctx, class) })
		Expect(k8s.Create(ctx, processProfile(ns, loggingTool("fast", "0", true)).Preset(toolgatev1alpha1.PresetTrusted).Obj())).To(Succeed())
		s := tu.MakeAgentSession(ns, "s", "p").ClaimTemplate("1Gi").Obj()
		s.Spec.Workspace.VolumeClaimTemplate.StorageClassName = ptr.To(class.Name)
		Expect(k8s.Create(ctx, s)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(s), s)).To(Succeed())
			ready := meta.FindStatusCondition(s.Status.Conditions, toolgatev1alpha1.ConditionReady)
			g.Expect(ready).NotTo(BeNil())
			g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(ready.Reason).To(Equal(toolgatev1alpha1.AgentSessionReasonWorkspacePending))
			g.Expect(ready.Message).To(ContainSubstring("PersistentVolumeClaim s-workspace is Pending"))
		}, 20*time.Second).Should(Succeed())
		submit(ns, "a", "fast", `{"id":"A"}`, 0, 0, 1)
		Expect(committedCall(ns, "a").Status.Result.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded))
	})

	It("settles a built-in tool's call in a session without a workspace at once, asking nobody", func() {
		ns := newNamespace()
		read := tu.MakeTool("read").Obj()
		read.Container, read.Builtin = nil, &toolgatev1alpha1.BuiltinRuntime{Name: "fs.read"}
		// Finalization runs on every settlement, this one too.
		read.Output.FinalizeContent = &toolgatev1alpha1.FinalizeContentSpec{Template: "[{{.Outcome}}] {{.Content}}"}
		Expect(k8s.Create(ctx, processProfile(ns, read).PreRule("ask", toolgatev1alpha1.ActionAsk, "", "read").Obj())).To(Succeed())
		Expect(k8s.Create(ctx, tu.MakeAgentSession(ns, "s", "p").Obj())).To(Succeed())
		submit(ns, "a", "read", `{"text":"notes.txt"}`, 0, 0, 1)
		c := committedCall(ns, "a")
		Expect(c.Status.Result.ErrorCode).To(Equal("workspace_unavailable"))
		Expect(c.Status.Result.Message).To(ContainSubstring("tool read is built in and works on the session's workspace; AgentSession s declares none"))
		Expect(c.Status.Result.Content).To(HavePrefix("[Failed] error: workspace_unavailable:"), "the tool's finalizeContent ran")
		Expect(apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "a"}, &toolgatev1alpha1.ApprovalRequest{}))).To(BeTrue(), "nobody was asked")
	})
})
