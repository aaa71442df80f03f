package controller

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// fieldOwner names toolgate's manager in the managedFields of what it
// writes.
const fieldOwner = client.FieldOwner("toolgate-manager")

// Every write the controllers make on their own kinds goes through patch:
// a merge patch of what changed from base (obj is base edited), as
// fieldOwner.
//
// locked adds base's resourceVersion: a write that would overwrite
// another writer's change fails with a conflict and is retried from a
// fresh read. It is set wherever the object has another writer:
//
//   - a ToolCall's status has two writers. The ToolCall controller writes
//     every field but status.schedule.refusal, and writes
//     schedule.executionMode, released and commitSequence when the call
//     admits or releases itself (admitSelf, releaseSelf). The AgentSession
//     controller writes only status.schedule: refusal, the admission of a
//     nested call (executionMode, released), and released and
//     commitSequence of a call that never starts or of any call of a
//     session being deleted (toolcalls.SessionPlan.Work). scheduleWriters, in
//     patch_test.go, holds the two lists to this.
//   - a ToolCall's metadata and spec: the caller (cancelRequested) and
//     the API server (deletion) beside the finalizer toolgate sets and
//     removes; the session sets cancelRequested when it is deleted.
//   - an AgentSession's finalizer, set beside the agent's own spec.
//
// An AgentSession's status and a ToolProfile's have one writer each, their
// controller, and are written unlocked, once per reconcile, in a defer.
func patch(ctx context.Context, c client.Client, obj, base client.Object, mode patchMode) error {
	p := client.MergeFrom(base)
	if mode.locked {
		p = client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})
	}
	if mode.status {
		return c.Status().Patch(ctx, obj, p, fieldOwner)
	}
	return c.Patch(ctx, obj, p, fieldOwner)
}

// patchMode is what a patch writes (the object's metadata and spec, or
// its status) and whether it is optimistic-locked (the version it
// replaces must still be current).
type patchMode struct{ status, locked bool }

var (
	objectLocked   = patchMode{locked: true}
	objectUnlocked = patchMode{}
	statusLocked   = patchMode{status: true, locked: true}
	statusUnlocked = patchMode{status: true}
)

// patchCall is patch for the ToolCall controller's own writes on a call,
// always locked: it records the version the write replaced, so that a
// reconcile from a cache behind it waits for the watch (toolcalls.OwnWrites), and,
// for a status write, keeps the call as written for the plans of the calls
// after it (toolcalls.OwnWrites.Current). It returns the call as written, which may
// not be changed.
func (r *ToolCallReconciler) patchCall(ctx context.Context, tc, base *toolgatev1alpha1.ToolCall, mode patchMode) (*toolgatev1alpha1.ToolCall, error) {
	mode.locked = true
	status := mode.status
	if err := patch(ctx, r.Client, tc, base, mode); err != nil {
		if status {
			countWriteError("toolcall", err)
		}
		return nil, err
	}
	written := tc.DeepCopy()
	if status {
		r.own.WroteCall(base.ResourceVersion, written)
		statusWrites.WithLabelValues("toolcall").Inc()
	} else {
		r.own.Wrote(client.ObjectKeyFromObject(tc), base.ResourceVersion)
	}
	return written, nil
}

// conflictRetry is how soon a reconcile whose locked write met a conflict
// runs again; the watch event of the write that won usually comes first.
const conflictRetry = 200 * time.Millisecond

// conflictsRetried answers a locked write's conflict (another writer came
// first: routine wherever two write one object) by reconciling again from
// a fresh read, logged as what it is, never as a Reconciler error with a
// stack trace. Every other error goes to the controller as it is.
func conflictsRetried(r reconcile.Reconciler) reconcile.Reconciler {
	return reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		res, err := r.Reconcile(ctx, req)
		if err == nil || !apierrors.IsConflict(err) {
			return res, err
		}
		log.FromContext(ctx).V(1).Info("write conflict: reconciling again from a fresh read")
		if res.RequeueAfter <= 0 || res.RequeueAfter > conflictRetry {
			res.RequeueAfter = conflictRetry
		}
		return res, nil
	})
}
