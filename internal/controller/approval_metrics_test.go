package controller

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// gauge is the value of the gathered metric name with label namespace=ns,
// and whether it is there.
func gauge(name, ns string) (float64, bool) {
	for _, m := range gathered(name, "namespace", ns) {
		return m.GetGauge().GetValue(), true
	}
	return 0, false
}

var _ = Describe("the approval metrics", func() {
	It("count the questions waiting in a namespace and how long the oldest has waited, until people answer", func() {
		ns := newNamespace()
		setup(processProfile(ns, shTool("echo", "cat").Obj()).PreRule("ask-all", toolgatev1alpha1.ActionAsk, ""))
		submit(ns, "c1", "echo", `{"text":"one"}`, 0, 0)
		ar := approvalRequest(ns, "c1")
		Eventually(func() float64 { n, _ := gauge("toolgate_approval_requests_pending", ns); return n }).Should(Equal(1.0))
		Eventually(func() float64 { s, _ := gauge("toolgate_approval_oldest_pending_seconds", ns); return s }).Should(BeNumerically(">", 0))

		decide(ar, toolgatev1alpha1.DecisionApprove)
		Eventually(func() bool { _, there := gauge("toolgate_approval_requests_pending", ns); return there }).Should(BeFalse(),
			"a namespace with nothing waiting has no series")
	})
})
