package agent

import (
	"context"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// A submitted call is created holding toolgate's finalizer: the manager
// then has no metadata write to make, with or without the admission policy
// that adds it.
func TestSubmittedCallsHoldTheFinalizerFromCreation(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := toolgatev1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).Build()
	s := &Session{c: NewForClient(c, "agent"), Namespace: "ns", Name: "s"}
	if _, err := s.create(context.Background(), 0, 0, []Call{{Tool: "echo"}}, false); err != nil {
		t.Fatal(err)
	}
	tc := &toolgatev1alpha1.ToolCall{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: CallName("s", 0, 0)}, tc); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(tc.Finalizers, StopWorkFinalizer) {
		t.Fatalf("finalizers %v, want %s", tc.Finalizers, StopWorkFinalizer)
	}
}
