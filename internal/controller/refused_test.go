package controller

import (
	"context"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// refuseResults makes a manager's API server refuse every status write of
// a result other than result_rejected, as it refuses one too large to store
// or invalid there, and counts the refusals.
func refuseResults(refused *atomic.Int64) func(*ctrl.Options) {
	return intercepted(interceptor.Funcs{
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			if tc, ok := obj.(*toolgatev1alpha1.ToolCall); ok && sub == "status" && tc.Status.Result != nil && tc.Status.Result.ErrorCode != "result_rejected" {
				refused.Add(1)
				return apierrors.NewInvalid(schema.GroupKind{Group: "toolgate.dev", Kind: "ToolCall"}, tc.Name,
					field.ErrorList{field.TooMany(field.NewPath("status", "result", "contexts"), 17, 16)})
			}
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
	})
}

var _ = Describe("a result the API server refuses", Ordered, func() {
	BeforeAll(ownManagers)

	It("settles the call as result_rejected instead of retrying the write forever, and the turn goes on", func() {
		ns := newNamespace()
		var refused atomic.Int64
		startManager(env.Config, refuseResults(&refused))
		setup(processProfile(ns, shTool("echo", "cat").Obj()).PreRule("allow-all", toolgatev1alpha1.ActionAllow, ""))
		submit(ns, "refused", "echo", `{}`, 0, 0)
		tc := committedCall(ns, "refused", 30*time.Second)
		Expect(tc.Status.Result.Outcome).To(Equal(toolgatev1alpha1.OutcomeFailed))
		Expect(tc.Status.Result.ErrorCode).To(Equal("result_rejected"))
		Expect(tc.Status.Result.Message).To(ContainSubstring("status.result.contexts"))
		Expect(refused.Load()).To(BeNumerically(">=", 1))
		// The session is not wedged: the next turn runs and settles.
		submit(ns, "next", "echo", `{}`, 1, 0)
		Expect(committedCall(ns, "next", 30*time.Second).Status.Result.ErrorCode).To(Equal("result_rejected"))
	})
})
