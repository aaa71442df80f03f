package toolcalls

import (
	"time"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/pipeline"
)

// What is true of one call, read from it alone.

// Deleting reports whether someone deleted the call.
func Deleting(tc *toolgatev1alpha1.ToolCall) bool { return !tc.DeletionTimestamp.IsZero() }

// NestedIn reports whether c is a nested call of the call named parent.
func NestedIn(c *toolgatev1alpha1.ToolCall, parent string) bool {
	return c.Spec.ParentRef != nil && c.Spec.ParentRef.Name == parent
}

// HeldExecute is when the body ended of a call whose output is held by the
// sandbox (PipelineCheckpoint.BodyHeld); zero otherwise.
func HeldExecute(tc *toolgatev1alpha1.ToolCall) time.Time {
	stages := tc.Status.Stages
	if cp := tc.Status.Checkpoint; cp == nil || !cp.BodyHeld || len(stages) == 0 || stages[len(stages)-1].Stage != string(pipeline.StageExecute) {
		return time.Time{}
	}
	return stages[len(stages)-1].Time.Time
}

// AskedApproval reports whether pre-execute asked a person about the call.
func AskedApproval(tc *toolgatev1alpha1.ToolCall) bool {
	for _, r := range tc.Status.Stages {
		if r.Stage == string(pipeline.StagePreExecute) && r.Verdict == pipeline.VerdictAsk {
			return true
		}
	}
	return false
}
