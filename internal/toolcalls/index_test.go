package toolcalls

import (
	"context"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// The Planner reads a session's calls in place from the index, and finds
// what it found by listing: the session's calls in its namespace only,
// with this process's own writes where the cache is behind them.
func TestTheCallIndexFindsWhatTheListFinds(t *testing.T) {
	call := func(ns, name, session string) *toolgatev1alpha1.ToolCall {
		return &toolgatev1alpha1.ToolCall{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(ns + "-" + name), ResourceVersion: "1"},
			Spec:       toolgatev1alpha1.ToolCallSpec{SessionRef: toolgatev1alpha1.LocalObjectReference{Name: session}},
		}
	}
	calls := []*toolgatev1alpha1.ToolCall{
		call("a", "c1", "s"), call("a", "c2", "s"), call("a", "c3", "other"),
		call("b", "c1", "s"), call("b", "c4", "s"),
	}
	scheme := runtime.NewScheme()
	if err := toolgatev1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	builder := fake.NewClientBuilder().WithScheme(scheme).WithIndex(&toolgatev1alpha1.ToolCall{}, IndexCallSession, func(o client.Object) []string {
		return []string{o.(*toolgatev1alpha1.ToolCall).Spec.SessionRef.Name}
	})
	indexer := toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, toolscache.Indexers{callIndexName: callIndexKeys})
	for _, c := range calls {
		builder = builder.WithObjects(c.DeepCopy())
		if err := indexer.Add(c); err != nil {
			t.Fatal(err)
		}
	}
	reader := builder.Build()
	var own OwnWrites
	written := calls[1].DeepCopy()
	written.ResourceVersion, written.Status.Phase = "2", toolgatev1alpha1.PhaseRunning
	own.WroteCall("1", written)

	names := func(cs []*toolgatev1alpha1.ToolCall) []string {
		var out []string
		for _, c := range cs {
			out = append(out, c.Namespace+"/"+c.Name+"/"+string(c.Status.Phase))
		}
		slices.Sort(out)
		return out
	}
	for _, tt := range []struct{ ns, session string }{{"a", "s"}, {"b", "s"}, {"a", "other"}, {"a", "none"}} {
		listed, err := Planner{Reader: reader, Own: &own}.Calls(context.Background(), tt.ns, tt.session)
		if err != nil {
			t.Fatal(err)
		}
		read, err := Planner{Reader: reader, Index: &Index{indexer: indexer}, Own: &own}.Calls(context.Background(), tt.ns, tt.session)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(names(read), names(listed)) {
			t.Errorf("session %s/%s: the index read %v, the list %v", tt.ns, tt.session, names(read), names(listed))
		}
	}
	read, _ := Planner{Reader: reader, Index: &Index{indexer: indexer}, Own: &own}.Calls(context.Background(), "a", "s")
	if want := []string{"a/c1/", "a/c2/Running"}; !slices.Equal(names(read), want) {
		t.Errorf("session a/s: read %v, want %v (c2 as this process wrote it)", names(read), want)
	}
}
