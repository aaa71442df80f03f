package gateway

import (
	"context"
	"slices"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/pkg/agent"
)

// TestSubmitRetriesATransientCreate: a create the API server answers with
// a transient error is sent again, and one that landed before its error is
// the gateway's own call, found at its place: the call is made once, in the
// turn the gateway picked, whether the client gave the turn or not; and it
// holds the stop-work finalizer, as every call toolgate's clients make.
func TestSubmitRetriesATransientCreate(t *testing.T) {
	for _, tt := range []struct {
		name      string
		pos       position
		landFirst bool
	}{
		{name: "the gateway picks the turn; the first create landed", pos: position{turnSize: 1, auto: true}, landFirst: true},
		{name: "the gateway picks the turn; the first create did not land", pos: position{turnSize: 1, auto: true}},
		{name: "the client gives the turn; the first create landed", pos: position{turn: 4, turnSize: 1}, landFirst: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			scheme := runtime.NewScheme()
			if err := toolgatev1alpha1.AddToScheme(scheme); err != nil {
				t.Fatal(err)
			}
			session := &toolgatev1alpha1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s"}, Spec: toolgatev1alpha1.AgentSessionSpec{Owner: "agent"}}
			inner := fake.NewClientBuilder().WithScheme(scheme).WithObjects(session).Build()
			creates := 0
			unavailable := apierrors.NewServiceUnavailable("the API server is restarting")
			c := fake.NewClientBuilder().WithScheme(scheme).WithInterceptorFuncs(interceptor.Funcs{
				Create: func(ctx context.Context, _ client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
					creates++
					if creates > 1 {
						return inner.Create(ctx, obj, opts...)
					}
					if tt.landFirst {
						if err := inner.Create(ctx, obj.DeepCopyObject().(client.Object), opts...); err != nil {
							return err
						}
					}
					return unavailable
				},
				Get: func(ctx context.Context, _ client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
					return inner.Get(ctx, key, obj, opts...)
				},
			}).Build()
			g := &Gateway{}
			tc, refused := g.submit(context.Background(), &caller{user: "agent", namespace: "ns", session: "s", client: c}, session, tt.pos, "read", `{"n":1}`, "")
			if refused != nil {
				t.Fatalf("refused: %+v", refused.Content)
			}
			calls := &toolgatev1alpha1.ToolCallList{}
			if err := inner.List(context.Background(), calls); err != nil {
				t.Fatal(err)
			}
			if len(calls.Items) == 1 && !slices.Contains(calls.Items[0].Finalizers, agent.StopWorkFinalizer) {
				t.Fatalf("the call holds no stop-work finalizer: %v", calls.Items[0].Finalizers)
			}
			if len(calls.Items) != 1 || calls.Items[0].Name != tc.Name {
				names := []string{}
				for _, c := range calls.Items {
					names = append(names, c.Name)
				}
				t.Fatalf("calls made %v, want one: %s", names, tc.Name)
			}
		})
	}
}
