package compose

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// The manager's cache holds no managed fields: on a busy cluster they are
// a large share of every cached call.
func TestCacheStripsManagedFields(t *testing.T) {
	transform := Cache(Options{}).DefaultTransform
	if transform == nil {
		t.Fatal("the cache keeps managed fields: no default transform")
	}
	tc := &toolgatev1alpha1.ToolCall{}
	tc.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationUpdate}}
	out, err := transform(tc)
	if err != nil {
		t.Fatal(err)
	}
	if got := out.(*toolgatev1alpha1.ToolCall).ManagedFields; got != nil {
		t.Fatalf("managed fields kept in the cache: %v", got)
	}
}
