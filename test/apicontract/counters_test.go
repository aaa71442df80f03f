package apicontract

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	tu "github.com/toolgate/toolgate/internal/testutil"
)

// A merge patch drops a field whose value does not change, so a counter
// that stays at zero is never sent: the API server fills it in instead
// (a default), and every reader of a session with a status sees it.
var _ = Describe("a session's counters", func() {
	It("read as zero, not absent, once the session has a status", func() {
		ns := newNamespace()
		s := tu.MakeAgentSession(ns, "s", "p").Obj()
		Expect(k8s.Create(ctx, s)).To(Succeed())
		// The first status the controller writes for a session without
		// calls: conditions, and the counters at their zero.
		base := s.DeepCopy()
		meta.SetStatusCondition(&s.Status.Conditions, metav1.Condition{Type: toolgatev1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: toolgatev1alpha1.AgentSessionReasonActive, Message: "the session accepts calls"})
		s.Status.CommittedTurn = -1
		Expect(k8s.Status().Patch(ctx, s, client.MergeFrom(base))).To(Succeed())

		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(toolgatev1alpha1.GroupVersion.WithKind("AgentSession"))
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(s), u)).To(Succeed())
		for _, path := range [][]string{
			{"status", "currentTurn"}, {"status", "committedTurn"}, {"status", "committedCalls"}, {"status", "nextSequence"},
			{"status", "counts", "succeeded"}, {"status", "counts", "failed"}, {"status", "counts", "denied"},
			{"status", "counts", "cancelled"}, {"status", "counts", "timedOut"},
		} {
			_, found, err := unstructured.NestedFieldNoCopy(u.Object, path...)
			Expect(err).NotTo(HaveOccurred())
			Expect(found).To(BeTrue(), "%v is absent", path)
		}
		turn, _, _ := unstructured.NestedInt64(u.Object, "status", "currentTurn")
		committed, _, _ := unstructured.NestedInt64(u.Object, "status", "committedTurn")
		Expect([]int64{turn, committed}).To(Equal([]int64{0, -1}))
	})
})
