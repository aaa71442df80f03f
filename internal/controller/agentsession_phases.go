package controller

import (
	"context"
	"slices"

	"sigs.k8s.io/controller-runtime/pkg/log"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/toolcalls"
)

// schedule carries out work, the session's part of its plan
// (toolcalls.SessionPlan.Work): refuse the calls that cannot have a place
// in the log or came too late, admit nested calls, and release the first
// uncommitted call of the current turn with its place in the log when it
// never starts (the calls that start admit and release themselves). Each
// call gets at most one write. It returns calls, the calls in the log in
// model order, as written.
func (r *AgentSessionReconciler) schedule(ctx context.Context, calls []*toolgatev1alpha1.ToolCall, work []toolcalls.CallWork) ([]*toolgatev1alpha1.ToolCall, error) {
	for _, w := range work {
		switch {
		case w.Refusal != "":
			log.FromContext(ctx).Info("call refused", "call", w.Call.Name, "code", w.Refusal)
		case w.Nested:
			log.FromContext(ctx).V(1).Info("nested call admitted", "call", w.Call.Name)
		}
		written, err := r.patchSchedule(ctx, w.Call, w.Edits)
		if err != nil {
			return nil, err
		}
		if i := slices.Index(calls, w.Call); i >= 0 {
			calls[i] = written // the status is derived from the calls as written
		}
	}
	return calls, nil
}

// patchSchedule changes the session's part of a call's status under
// optimistic locking: a conflict with the call's own controller is retried,
// never overwritten. It writes a copy of cached (the cache's, never
// changed) and returns it as written.
func (r *AgentSessionReconciler) patchSchedule(ctx context.Context, cached *toolgatev1alpha1.ToolCall, edits []func(*toolgatev1alpha1.CallSchedule)) (*toolgatev1alpha1.ToolCall, error) {
	c := cached.DeepCopy()
	for _, edit := range edits {
		edit(&c.Status.Schedule)
	}
	if err := patch(ctx, r.Client, c, cached, statusLocked); err != nil {
		countWriteError("agentsession", err)
		return nil, err
	}
	statusWrites.WithLabelValues("agentsession").Inc()
	return c, nil
}
