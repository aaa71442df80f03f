package controller

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	tu "github.com/toolgate/toolgate/internal/testutil"
)

// TestNewGenerationLeavesThePreviousIntact: a reconcile that resolved
// generation 1 keeps stepping on it while another resolves generation 2;
// generation 1's registry must not be emptied under it (a narrow unit test:
// the fake client only serves Gets).
func TestNewGenerationLeavesThePreviousIntact(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := toolgatev1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	p := tu.MakeToolProfile("ns", "p").PreRule("allow", toolgatev1alpha1.ActionAllow, "").Obj()
	p.Generation = 1
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(p).Build()
	profiles := NewProfiles(c)
	key := types.NamespacedName{Namespace: "ns", Name: "p"}
	ctx := context.Background()

	first, _, _, err := profiles.Resolve(ctx, key)
	if err != nil || first == nil {
		t.Fatalf("generation 1: %v", err)
	}
	p.Generation = 2
	p.Spec.Tools = append(p.Spec.Tools, tu.MakeTool("other").Obj())
	if err := c.Update(ctx, p); err != nil {
		t.Fatal(err)
	}
	second, _, _, err := profiles.Resolve(ctx, key)
	if err != nil || second == nil || second == first {
		t.Fatalf("generation 2: %v", err)
	}
	if tools, listeners := first.Registry.Counts(); tools != 1 || listeners != 1 {
		t.Fatalf("generation 1 was emptied under its user: %d tools, %d listeners", tools, listeners)
	}
	if tools, _ := second.Registry.Counts(); tools != 2 {
		t.Fatalf("generation 2 has %d tools", tools)
	}
}
