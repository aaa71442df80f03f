package controller

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
)

var _ = Describe("notifications of approval questions", func() {
	It("tell the profile's named sinks and the default ones when a question opens and when it is decided or expires, never the others", func() {
		ns := newNamespace()
		setup(processProfile(ns, shTool("echo", "cat").Obj()).PreRule("ask-all", toolgatev1alpha1.ActionAsk, "").
			Approval(func(a *toolgatev1alpha1.ApprovalSettings) { a.Notify = []string{"team"} }))
		submit(ns, "c1", "echo", `{"text":"hello"}`, 0, 0)
		ar := approvalRequest(ns, "c1")
		for _, path := range []string{"/team", "/everyone"} {
			Eventually(func() []string { return notifications.of(path, ns, "c1") }, 10*time.Second).
				Should(Equal([]string{"dev.toolgate.approval.requested"}), path)
		}
		decide(ar, toolgatev1alpha1.DecisionDeny)
		for _, path := range []string{"/team", "/everyone"} {
			Eventually(func() []string { return notifications.of(path, ns, "c1") }, 10*time.Second).
				Should(Equal([]string{"dev.toolgate.approval.requested", "dev.toolgate.approval.decided"}), path)
		}

		By("an expiry is told where the opening was, the named sinks too")
		other := newNamespace()
		setup(processProfile(other, shTool("echo", "cat").Obj()).PreRule("ask-all", toolgatev1alpha1.ActionAsk, "").
			Approval(func(a *toolgatev1alpha1.ApprovalSettings) { a.TimeoutSeconds, a.Notify = 10, []string{"team"} }))
		submit(other, "c2", "echo", `{"text":"hello"}`, 0, 0)
		Expect(committedCall(other, "c2").Status.Result.ErrorCode).To(Equal("approval_expired"))
		for _, path := range []string{"/team", "/everyone"} {
			Eventually(func() []string { return notifications.of(path, other, "c2") }, 10*time.Second).
				Should(Equal([]string{"dev.toolgate.approval.requested", "dev.toolgate.approval.expired"}), path)
		}

		By("a profile that names no sink: the default ones only")
		third := newNamespace()
		setup(processProfile(third, shTool("echo", "cat").Obj()).PreRule("ask-all", toolgatev1alpha1.ActionAsk, ""))
		submit(third, "c3", "echo", `{"text":"hello"}`, 0, 0)
		approvalRequest(third, "c3")
		Eventually(func() []string { return notifications.of("/everyone", third, "c3") }, 10*time.Second).
			Should(Equal([]string{"dev.toolgate.approval.requested"}))
		Consistently(func() []string { return notifications.of("/team", third, "c3") }, time.Second).Should(BeEmpty())
	})
})
