package controller

import (
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	tu "github.com/toolgate/toolgate/internal/testutil"
)

var _ = Describe("admission of tool pods", Ordered, func() {
	const label = "tool-pods-spec"
	var ns string

	BeforeAll(func() {
		installAdmission(label)
		n := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "tool-pods-", Labels: map[string]string{label: "true"}}}
		Expect(k8s.Create(ctx, n)).To(Succeed())
		ns = n.Name
	})

	// A forged result through adoption: someone with the built-in edit role
	// pre-creates the pod a call will run in (its name is deterministic),
	// owned by the call, during the approval wait.
	It("lets only toolgate create a pod owned by a ToolCall, or make a pod one", func() {
		review := &authenticationv1.SelfSubjectReview{}
		Expect(k8s.Create(ctx, review)).To(Succeed())
		call := tu.MakeToolCall(ns, "target", "s").Requester(review.Status.UserInfo.Username).Obj()
		Expect(k8s.Create(ctx, call)).To(Succeed())
		// As the built-in edit role allows (envtest has no bootstrap roles).
		editor := &rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: label + "-pod-editor"},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "create", "update", "patch", "delete"}}},
		}
		Expect(k8s.Create(ctx, editor)).To(Succeed())
		bind(ns, "mallory", editor.Name)
		owned := func(name string) *corev1.Pod {
			p := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "tool", Image: "forger:1"}}},
			}
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: toolgatev1alpha1.GroupVersion.String(), Kind: "ToolCall", Name: call.Name, UID: call.UID, Controller: ptr.To(true)}}
			return p
		}
		// The policy is live once the API server has loaded it: a pod that got
		// in before that is removed and the attempt repeated.
		Eventually(func(g Gomega) {
			forged := owned("forged")
			err := as("mallory").Create(ctx, forged)
			if err == nil {
				Expect(k8s.Delete(ctx, forged, client.GracePeriodSeconds(0))).To(Succeed())
			}
			g.Expect(err).To(HaveOccurred())
			g.Expect(err.Error()).To(ContainSubstring("only toolgate may create a pod owned by a ToolCall"))
		}, 30*time.Second, 200*time.Millisecond).Should(Succeed())

		plain := owned("adopted-later")
		plain.OwnerReferences = nil
		Expect(as("mallory").Create(ctx, plain)).To(Succeed(), "pods owned by nothing of toolgate's are not toolgate's business")
		base := plain.DeepCopy()
		plain.OwnerReferences = owned("x").OwnerReferences
		err := as("mallory").Patch(ctx, plain, client.MergeFrom(base))
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring("only toolgate may create a pod owned by a ToolCall"))

		// A warm pod is the session's: planting one is refused the same way.
		session := tu.MakeAgentSession(ns, "s", "p").Obj()
		session.Spec.Owner = review.Status.UserInfo.Username
		Expect(k8s.Create(ctx, session)).To(Succeed())
		planted := owned("planted-warm")
		planted.OwnerReferences = []metav1.OwnerReference{{APIVersion: toolgatev1alpha1.GroupVersion.String(), Kind: "AgentSession", Name: session.Name, UID: session.UID, Controller: ptr.To(true)}}
		err = as("mallory").Create(ctx, planted)
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring("only toolgate may create a pod owned by a ToolCall or an AgentSession"))

		// The same references under the bare group, or any other kind of
		// the group, are refused too (the provider matches the exact
		// reference and the seal; admission refuses the rest early).
		for i, ref := range []metav1.OwnerReference{
			{APIVersion: "toolgate.dev", Kind: "ToolCall", Name: call.Name, UID: call.UID, Controller: ptr.To(true)},
			{APIVersion: "toolgate.dev/v9", Kind: "Anything", Name: call.Name, UID: call.UID},
		} {
			variant := owned(fmt.Sprintf("variant-%d", i))
			variant.OwnerReferences = []metav1.OwnerReference{ref}
			err = as("mallory").Create(ctx, variant)
			Expect(err).To(HaveOccurred(), "owner %s %s", ref.APIVersion, ref.Kind)
			Expect(err.Error()).To(ContainSubstring("only toolgate may create a pod owned by"))
		}

		Expect(k8s.Create(ctx, owned("by-toolgate"))).To(Succeed(), "toolgate itself (here the cluster admin, who holds every verb) may")

		// A seal is toolgate's to write: stripped from a pod that served a
		// call, the pod would pass for one toolgate never sealed, which a
		// resumed attempt makes again (a non-idempotent body would run
		// twice). Nobody else may add, change or remove it; other
		// annotations stay the editor's.
		sealed := owned("sealed")
		sealed.Annotations = map[string]string{toolgatev1alpha1.AnnotationSeal: "c0ffee"}
		Expect(k8s.Create(ctx, sealed)).To(Succeed())
		for _, change := range []func(p *corev1.Pod){
			func(p *corev1.Pod) { delete(p.Annotations, toolgatev1alpha1.AnnotationSeal) },
			func(p *corev1.Pod) { p.Annotations[toolgatev1alpha1.AnnotationSeal] = "beef" },
		} {
			got := &corev1.Pod{}
			Expect(k8s.Get(ctx, client.ObjectKeyFromObject(sealed), got)).To(Succeed())
			change(got)
			err := as("mallory").Update(ctx, got)
			Expect(err).To(HaveOccurred(), "the seal was changed by an editor")
			Expect(err.Error()).To(ContainSubstring("or change such a pod's owners or seal"))
		}
		unsealed := owned("unsealed")
		Expect(k8s.Create(ctx, unsealed)).To(Succeed())
		got := &corev1.Pod{}
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(unsealed), got)).To(Succeed())
		got.Annotations = map[string]string{toolgatev1alpha1.AnnotationSeal: "c0ffee"}
		err = as("mallory").Update(ctx, got)
		Expect(err).To(HaveOccurred(), "a seal was added by an editor")
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(sealed), got)).To(Succeed())
		got.Annotations["note"] = "editors keep their own annotations"
		Expect(as("mallory").Update(ctx, got)).To(Succeed())
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(sealed), got)).To(Succeed())
		Expect(got.Annotations).To(HaveKeyWithValue(toolgatev1alpha1.AnnotationSeal, "c0ffee"))
	})

	// A deleted call keeps toolgate's finalizer until its work has stopped
	// and its result committed; its requester could otherwise drop it (an
	// object being deleted may lose the garbage collector's finalizers).
	It("lets nobody but toolgate drop a deleted call's stop-work finalizer", func() {
		review := &authenticationv1.SelfSubjectReview{}
		Expect(k8s.Create(ctx, review)).To(Succeed())
		me := review.Status.UserInfo.Username
		Expect(k8s.Create(ctx, processProfile(ns, shTool("echo", "cat").Obj()).PreRule("allow", toolgatev1alpha1.ActionAllow, "").Obj())).To(Succeed())
		session := tu.MakeAgentSession(ns, "held", "p").Obj()
		session.Spec.Owner = me
		Expect(k8s.Create(ctx, session)).To(Succeed())
		caller := &rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: label + "-caller"},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"toolgate.dev"}, Resources: []string{"toolcalls"}, Verbs: []string{"get", "update", "patch"}}},
		}
		Expect(k8s.Create(ctx, caller)).To(Succeed())
		bind(ns, "agent-x", caller.Name)
		// Index 1 of a turn of two whose index 0 never comes: once deleted,
		// it is held until its place in the log can commit.
		call := tu.MakeToolCall(ns, "waiting", "held").Tool("echo", `{}`).At(0, 1).Of(2).Requester(me).Obj()
		Expect(k8s.Create(ctx, call)).To(Succeed())
		const stopWork = "toolgate.dev/stop-work"
		got := &toolgatev1alpha1.ToolCall{}
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(call), got)).To(Succeed())
			g.Expect(got.Finalizers).To(ContainElement(stopWork))
		}, 20*time.Second, 50*time.Millisecond).Should(Succeed())
		Expect(k8s.Delete(ctx, got)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(call), got)).To(Succeed())
			g.Expect(got.DeletionTimestamp).NotTo(BeNil())
		}, 20*time.Second, 50*time.Millisecond).Should(Succeed())
		Expect(got.Finalizers).To(ContainElement(stopWork), "held: its place in the log cannot commit yet")
		base := got.DeepCopy()
		got.Finalizers = nil
		// The policy is live once the API server has loaded it (this spec
		// may run first): a dry run, which admission judges as the real
		// patch but which drops nothing, until it is refused.
		Eventually(func(g Gomega) {
			err := as("agent-x").Patch(ctx, got.DeepCopy(), client.MergeFrom(base), client.DryRunAll)
			g.Expect(err).To(HaveOccurred())
			g.Expect(err.Error()).To(ContainSubstring("only toolgate may change"))
		}, 30*time.Second, 200*time.Millisecond).Should(Succeed())
		err := as("agent-x").Patch(ctx, got, client.MergeFrom(base))
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring("only toolgate may change"))
		Expect(k8s.Patch(ctx, got, client.MergeFrom(base))).To(Succeed(), "toolgate (here the cluster admin) may")
	})
})
