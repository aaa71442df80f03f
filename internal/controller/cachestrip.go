package controller

import (
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// What agents put in a call (its arguments) and what tools return (the
// value, the content) is most of a ToolCall's size, up to hundreds of KiB
// each, and the manager's cache would hold it for every call it watches,
// settled or not: memory would grow with what tenants send. The cache
// holds a call without them (StripCachedCall); a reconcile that needs them,
// one of a call not settled yet, reads the call from the API server
// (fullCall). A settled call needs none of them: its result is written
// once and never again.

// annotationStripped marks a call, in the cache only, whose bulky fields
// were left out. Never written: the controllers write with merge patches
// of what they changed.
const annotationStripped = "toolgate.dev/stripped-in-cache"

// strippedAbove is the size from which a field is left out of the cache:
// a call whose fields are all smaller costs no extra read.
const strippedAbove = 1 << 10

// StripCachedCall is the cache transform of ToolCalls: managed fields, and
// the arguments, the result's value and content and the checkpoint's
// output when they are larger than strippedAbove.
func StripCachedCall(obj any) (any, error) {
	obj, err := cache.TransformStripManagedFields()(obj)
	if err != nil {
		return obj, err
	}
	tc, ok := obj.(*toolgatev1alpha1.ToolCall)
	if !ok {
		return obj, nil
	}
	// The mark is the cache's alone: whoever may write a call could set it.
	delete(tc.Annotations, annotationStripped)
	keepMetadata(tc)
	stripped := false
	cut := func(s *string) {
		if len(*s) > strippedAbove {
			*s, stripped = "", true
		}
	}
	cut(&tc.Spec.Arguments)
	if r := tc.Status.Result; r != nil {
		cut(&r.Value)
		cut(&r.Content)
	}
	if cp := tc.Status.Checkpoint; cp != nil && cp.Body != nil {
		cut(&cp.Body.Value)
		cut(&cp.Body.Content)
	}
	if stripped {
		if tc.Annotations == nil {
			tc.Annotations = map[string]string{}
		}
		tc.Annotations[annotationStripped] = "true"
	}
	return tc, nil
}

// strippedInCache reports whether tc, read from the cache, lacks fields.
func strippedInCache(tc *toolgatev1alpha1.ToolCall) bool {
	return tc.Annotations[annotationStripped] == "true"
}

// cachedMetadata are the labels and annotations of toolgate's objects the
// manager reads; the cache keeps no other, so that what tenants put in
// metadata (up to the API server's 256 KiB of annotations per object, any
// number of labels) is not held for every object the manager watches.
var cachedMetadata = map[string]bool{
	toolgatev1alpha1.AnnotationTraceparent:     true,
	toolgatev1alpha1.AnnotationArgumentsDigest: true,
	toolgatev1alpha1.AnnotationQuestionSeal:    true,
	toolgatev1alpha1.LabelSession:              true,
	toolgatev1alpha1.LabelTurn:                 true,
}

// cachedValueBytes bounds each kept value: toolgate's own are far
// smaller (a traceparent is 55 bytes, a seal 64).
const cachedValueBytes = 256

// keepMetadata drops from obj the labels and annotations toolgate does
// not read, and any value too large to be one of toolgate's.
func keepMetadata(obj client.Object) {
	keep := func(m map[string]string) map[string]string {
		if len(m) == 0 {
			return m
		}
		out := make(map[string]string, len(cachedMetadata))
		for k, v := range m {
			if cachedMetadata[k] && len(v) <= cachedValueBytes {
				out[k] = v
			}
		}
		return out
	}
	obj.SetLabels(keep(obj.GetLabels()))
	obj.SetAnnotations(keep(obj.GetAnnotations()))
}

// StripCachedMetadata is the cache transform of toolgate's kinds other
// than ToolCalls: managed fields, and the labels and annotations toolgate
// does not read.
func StripCachedMetadata(obj any) (any, error) {
	obj, err := cache.TransformStripManagedFields()(obj)
	if err != nil {
		return obj, err
	}
	if o, ok := obj.(client.Object); ok {
		keepMetadata(o)
	}
	return obj, nil
}
