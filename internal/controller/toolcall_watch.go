package controller

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/toolcalls"
)

// What wakes a call besides its own events: the calls before it in its
// session (nextInLine, and wakeNext, which does not wait for the watch),
// and its session (deletedCallsOf). The toolcalls.Planner says whom (toolcalls.NextOf).

// turnRecorded reports whether a session update may let a deleted call go:
// a turn was recorded complete, or the session is being deleted.
func turnRecorded(before, after client.Object) bool {
	o, n := before.(*toolgatev1alpha1.AgentSession), after.(*toolgatev1alpha1.AgentSession)
	return o.Status.CommittedTurn != n.Status.CommittedTurn || o.DeletionTimestamp.IsZero() != n.DeletionTimestamp.IsZero()
}

// deletedCallsOf lists the session's calls that are being deleted and still
// hold their finalizer, and the calls next in line (a turn recorded
// complete may let the next one start).
func (r *ToolCallReconciler) deletedCallsOf(ctx context.Context, o client.Object) []reconcile.Request {
	calls, err := r.plans().Calls(ctx, o.GetNamespace(), o.GetName())
	if err != nil {
		return nil
	}
	out := toolcalls.NextOf(calls)
	for _, c := range calls {
		if toolcalls.Deleting(c) && controllerutil.ContainsFinalizer(c, callFinalizer) {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(c)})
		}
	}
	return out
}

// nextInLine maps a call whose place in its session's plan changed to the
// calls that may now move (toolcalls.NextOf).
func (r *ToolCallReconciler) nextInLine(ctx context.Context, o client.Object) []reconcile.Request {
	tc := o.(*toolgatev1alpha1.ToolCall)
	next, err := r.plans().Next(ctx, tc.Namespace, tc.Spec.SessionRef.Name)
	if err != nil {
		return nil
	}
	return next
}

// planMoved reports whether a call's update may let another call of its
// session start or settle: what the plan reads of it changed.
func planMoved(before, after client.Object) bool {
	return toolcalls.TurnCallOf(before.(*toolgatev1alpha1.ToolCall)) != toolcalls.TurnCallOf(after.(*toolgatev1alpha1.ToolCall))
}

// wakeNext wakes the calls of tc's session that may move now that tc's
// write is durable (toolcalls.NextOf, planning from it: toolcalls.OwnWrites.Current), without
// waiting for the write's watch event (nextInLine, which follows); once
// tc's body has ended, tc's nested calls, which then stop (callContext);
// and, when a nested call settles, its parent, which settles only after
// its nested calls (childrenSettled). One list of the session serves all.
func (r *ToolCallReconciler) wakeNext(ctx context.Context, tc *toolgatev1alpha1.ToolCall, settled bool) {
	if ref := tc.Spec.ParentRef; ref != nil {
		if settled {
			r.Wake.Notify(client.ObjectKey{Namespace: tc.Namespace, Name: ref.Name})
		}
		return
	}
	calls, err := r.plans().Calls(ctx, tc.Namespace, tc.Spec.SessionRef.Name)
	if err != nil {
		return
	}
	for _, req := range toolcalls.NextOf(calls) {
		if req.Name != tc.Name {
			r.Wake.Notify(req.NamespacedName)
		}
	}
	if !settled && !pipeline.BodyDone(toolcalls.NextStage(tc)) {
		return
	}
	for _, c := range calls {
		if toolcalls.NestedIn(c, tc.Name) && !c.Settled() {
			r.Wake.Notify(client.ObjectKeyFromObject(c))
		}
	}
}
