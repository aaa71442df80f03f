package controller

import (
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// TestStripCachedCall: a call's large arguments, result and checkpointed
// output stay out of the cache (marked so), small ones stay in, and so
// does everything the controllers plan from.
func TestStripCachedCall(t *testing.T) {
	big := strings.Repeat("x", strippedAbove+1)
	tc := &toolgatev1alpha1.ToolCall{
		ObjectMeta: metav1.ObjectMeta{Name: "c", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "agent"}}},
		Spec:       toolgatev1alpha1.ToolCallSpec{Tool: "t", Arguments: `{"a":"` + big + `"}`, Turn: 3},
		Status: toolgatev1alpha1.ToolCallStatus{
			Result: &toolgatev1alpha1.ToolCallResult{Outcome: toolgatev1alpha1.OutcomeSucceeded, Value: `"` + big + `"`, Content: big,
				Contexts: []toolgatev1alpha1.AdditionalContext{{Message: "kept"}}},
			Checkpoint: &toolgatev1alpha1.PipelineCheckpoint{Next: "Finalize", Body: &toolgatev1alpha1.CheckpointBody{Value: `"` + big + `"`, Content: big}},
		},
	}
	out, err := StripCachedCall(tc)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*toolgatev1alpha1.ToolCall)
	if got.Spec.Arguments != "" || got.Status.Result.Value != "" || got.Status.Result.Content != "" ||
		got.Status.Checkpoint.Body.Value != "" || got.Status.Checkpoint.Body.Content != "" {
		t.Fatalf("bulk left in the cache: %d %d %d bytes", len(got.Spec.Arguments), len(got.Status.Result.Content), len(got.Status.Checkpoint.Body.Content))
	}
	if !strippedInCache(got) || got.ManagedFields != nil {
		t.Fatalf("not marked stripped, or managed fields kept: %v %v", got.Annotations, got.ManagedFields)
	}
	if got.Spec.Tool != "t" || got.Spec.Turn != 3 || got.Status.Result.Outcome != toolgatev1alpha1.OutcomeSucceeded || len(got.Status.Result.Contexts) != 1 {
		t.Fatalf("what the controllers plan from was lost: %+v", got)
	}

	small := &toolgatev1alpha1.ToolCall{Spec: toolgatev1alpha1.ToolCallSpec{Arguments: `{"a":1}`}}
	out, err = StripCachedCall(small)
	if err != nil {
		t.Fatal(err)
	}
	if got := out.(*toolgatev1alpha1.ToolCall); got.Spec.Arguments != `{"a":1}` || strippedInCache(got) {
		t.Fatalf("a small call was changed: %+v", got)
	}

	// The mark is the cache's own: a call that arrives with it (anyone
	// who may write the call can set it) is not taken as stripped.
	forged := &toolgatev1alpha1.ToolCall{
		ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{annotationStripped: "true", toolgatev1alpha1.AnnotationTraceparent: "00-1-2-01"}},
		Spec:       toolgatev1alpha1.ToolCallSpec{Arguments: `{"a":2}`},
	}
	out, err = StripCachedCall(forged)
	if err != nil {
		t.Fatal(err)
	}
	if got := out.(*toolgatev1alpha1.ToolCall); strippedInCache(got) || got.Annotations[toolgatev1alpha1.AnnotationTraceparent] != "00-1-2-01" {
		t.Fatalf("an arriving mark was kept, or another annotation lost: %v", got.Annotations)
	}
}

// TestSameSubCallComparesArguments: a call found under a sub-call's name
// is that sub-call only with the same arguments, whatever its annotations
// say (the caller reads a stripped one whole before comparing).
func TestSameSubCallComparesArguments(t *testing.T) {
	want := &toolgatev1alpha1.ToolCall{Spec: toolgatev1alpha1.ToolCallSpec{
		SessionRef: toolgatev1alpha1.LocalObjectReference{Name: "s"}, Tool: "t", Arguments: `{"cmd":"ls"}`, Requester: "agent",
		ParentRef: &toolgatev1alpha1.LocalObjectReference{Name: "p"},
	}}
	found := want.DeepCopy()
	if !sameSubCall(found, want) {
		t.Fatal("the sub-call itself is not the same")
	}
	found.Spec.Arguments = `{"cmd":"rm -rf /"}`
	found.Annotations = map[string]string{annotationStripped: "true"}
	if sameSubCall(found, want) {
		t.Fatal("a call with other arguments, marked stripped, was taken for the sub-call")
	}
}

// TestTheCacheKeepsOnlyTheMetadataToolgateReads: whatever labels and
// annotations a tenant puts on a call, a session or a question (up to the
// API server's bounds), the cache holds only those toolgate reads, each
// small; memory follows the number of objects, not what they carry.
func TestTheCacheKeepsOnlyTheMetadataToolgateReads(t *testing.T) {
	hostile := func() metav1.ObjectMeta {
		m := metav1.ObjectMeta{Name: "x", Labels: map[string]string{toolgatev1alpha1.LabelSession: "s", toolgatev1alpha1.LabelTurn: "3"},
			Annotations: map[string]string{
				toolgatev1alpha1.AnnotationTraceparent:             "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
				toolgatev1alpha1.AnnotationQuestionSeal:            strings.Repeat("a", 64),
				"kubectl.kubernetes.io/last-applied-configuration": strings.Repeat("{}", 100<<10),
				toolgatev1alpha1.AnnotationArgumentsDigest:         strings.Repeat("z", 200<<10), // no digest of toolgate's is this long
			}}
		for i := range 1000 {
			m.Labels[fmt.Sprintf("tenant.example/l%d", i)] = strings.Repeat("v", 63)
			m.Labels[fmt.Sprintf("toolgate.dev/l%d", i)] = "v"
		}
		return m
	}
	for _, obj := range []client.Object{
		&toolgatev1alpha1.ToolCall{ObjectMeta: hostile()},
		&toolgatev1alpha1.AgentSession{ObjectMeta: hostile()},
		&toolgatev1alpha1.ApprovalRequest{ObjectMeta: hostile()},
	} {
		transform := StripCachedMetadata
		if _, ok := obj.(*toolgatev1alpha1.ToolCall); ok {
			transform = StripCachedCall
		}
		out, err := transform(obj)
		if err != nil {
			t.Fatal(err)
		}
		got := out.(client.Object)
		size := 0
		for k, v := range got.GetLabels() {
			size += len(k) + len(v)
		}
		for k, v := range got.GetAnnotations() {
			size += len(k) + len(v)
		}
		if size > 1024 || len(got.GetLabels()) != 2 || len(got.GetAnnotations()) != 2 ||
			got.GetAnnotations()[toolgatev1alpha1.AnnotationTraceparent] == "" || got.GetAnnotations()[toolgatev1alpha1.AnnotationQuestionSeal] == "" {
			t.Fatalf("%T: %d bytes of metadata cached, labels %d, annotations %v", obj, size, len(got.GetLabels()), keysOf(got.GetAnnotations()))
		}
	}
}

func keysOf(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
