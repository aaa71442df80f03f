package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/codes"
	"github.com/toolgate/toolgate/internal/providers/sandbox"
	"github.com/toolgate/toolgate/internal/runner"
)

// SubCalls runs a body's sub-call (Code Mode) through the whole pipeline,
// as its own ToolCall nested under the calling one: the same session,
// requester and place, parentRef naming the caller, so the session runs it
// within the caller's slot, outside the log. Its name is derived from the
// caller's attempt and the sub-call's ID, so a sub-call asked again (the
// runner resends it to a restarted manager) is the same ToolCall, answered
// once. It waits for the nested call's result, woken by the manager's
// informer as the result arrives (settledCalls; a read every
// subCallSafetyNet in case an event was missed), read from the cache, or
// from the API server when the cache left part of it out.
func SubCalls(mgr ctrl.Manager) (sandbox.SubCalls, error) {
	settled, err := newSettledCalls(context.Background(), mgr.GetCache())
	if err != nil {
		return nil, err
	}
	c, api := mgr.GetClient(), mgr.GetAPIReader()
	return func(ctx context.Context, parent sandbox.Job, call runner.SubCall) runner.SubResult {
		failed := func(code, format string, args ...any) runner.SubResult {
			return runner.SubResult{Outcome: string(toolgatev1alpha1.OutcomeFailed), Code: code, Message: fmt.Sprintf(format, args...)}
		}
		if !mayCall(parent.Tool, call.Tool) {
			return runner.SubResult{Outcome: string(toolgatev1alpha1.OutcomeDenied), Code: codes.PolicyDenied,
				Message: fmt.Sprintf("tool %s may not call %s: its definition's subCalls does not list it", toolName(parent.Tool), call.Tool)}
		}
		p := &toolgatev1alpha1.ToolCall{}
		if err := c.Get(ctx, parent.Owner, p); err != nil {
			return failed(codes.Internal, "the calling ToolCall could not be read: %v", err)
		}
		suffix := fmt.Sprintf("a%d-s%s", parent.Attempt, call.ID)
		nested := &toolgatev1alpha1.ToolCall{
			ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: nestedName(p.Name, suffix)},
			Spec: toolgatev1alpha1.ToolCallSpec{
				SessionRef: p.Spec.SessionRef, Turn: p.Spec.Turn, Index: p.Spec.Index, TurnSize: p.Spec.TurnSize,
				CallID: nestedName(p.Spec.CallID, suffix), Tool: call.Tool, Arguments: call.Arguments,
				ParentRef: &toolgatev1alpha1.LocalObjectReference{Name: p.Name}, Requester: p.Spec.Requester,
			},
		}
		if err := c.Create(ctx, nested); err != nil && !apierrors.IsAlreadyExists(err) {
			if apierrors.IsInvalid(err) {
				return failed(codes.InvalidArguments, "the sub-call was refused: %v", err)
			}
			return failed(codes.Internal, "the sub-call could not be recorded: %v", err)
		}
		return awaitSubCall(ctx, c, api, settled, nested, subCallSafetyNet)
	}, nil
}

// awaitSubCall waits for the sub-call nested (just made) to settle and
// returns its result. The wait is woken by the informer as the result
// arrives (settled); the call is read again only then, or after safetyNet
// without a wake (one missed, or the call not in the cache yet): never a
// poll (TestASubCallIsReadOnlyWhenWoken).
func awaitSubCall(ctx context.Context, c, api client.Reader, settled *settledCalls, nested *toolgatev1alpha1.ToolCall, safetyNet time.Duration) runner.SubResult {
	key := client.ObjectKeyFromObject(nested)
	for checked := false; ; {
		woken, stop := settled.await(key)
		got := &toolgatev1alpha1.ToolCall{}
		err := c.Get(ctx, key, got)
		if err == nil && (!checked || got.Status.Result != nil) && strippedInCache(got) {
			err = api.Get(ctx, key, got) // its arguments, value or content are over 1 KiB (cachestrip.go)
		}
		if err == nil && !checked && !sameSubCall(got, nested) {
			// Its name is easy to foresee: someone else's call under
			// it is never this sub-call's result.
			stop()
			return runner.SubResult{Outcome: string(toolgatev1alpha1.OutcomeFailed), Code: codes.DuplicateCall, Message: fmt.Sprintf("another call holds the sub-call's name (%s); it was not made", key.Name)}
		}
		checked = checked || err == nil
		if err == nil && got.Status.Result != nil {
			stop()
			r := got.Status.Result
			return runner.SubResult{Outcome: string(r.Outcome), Code: r.ErrorCode, Message: r.Message, Value: r.Value, Content: r.Content}
		}
		safety := time.NewTimer(safetyNet)
		select {
		case <-ctx.Done():
			safety.Stop()
			stop()
			return runner.SubResult{Outcome: string(toolgatev1alpha1.OutcomeCancelled), Code: codes.Cancelled, Message: "the calling body was stopped before the sub-call settled"}
		case <-woken:
		case <-safety.C:
		}
		safety.Stop()
		stop()
	}
}

// subCallSafetyNet is how often a sub-call's result is read again while no
// event woke its wait (one missed, or the call not in the cache yet).
const subCallSafetyNet = 5 * time.Second

// nestedName is base-suffix, kept within 63 characters (a hash of base
// replaces its tail when it is longer), so it is a valid name and callID.
func nestedName(base, suffix string) string {
	if n := len(base) + 1 + len(suffix); n <= 63 {
		return base + "-" + suffix
	}
	sum := sha256.Sum256([]byte(base))
	keep := max(0, 63-len(suffix)-1-9)
	return base[:min(keep, len(base))] + "-" + hex.EncodeToString(sum[:])[:8] + "-" + suffix
}

// mayCall reports whether the calling tool's definition lets its body call
// tool (subCalls).
func mayCall(caller *toolgatev1alpha1.ToolDefinition, tool string) bool {
	return caller != nil && (slices.Contains(caller.SubCalls, tool) || slices.Contains(caller.SubCalls, "*"))
}

func toolName(t *toolgatev1alpha1.ToolDefinition) string {
	if t == nil {
		return "(unknown)"
	}
	return t.Name
}

// sameSubCall reports whether found, read under a sub-call's name, is that
// sub-call: nested under the same parent, in the same requester's name,
// with the same tool and arguments (found read whole, not stripped).
func sameSubCall(found, want *toolgatev1alpha1.ToolCall) bool {
	f, w := found.Spec, want.Spec
	return f.ParentRef != nil && f.ParentRef.Name == w.ParentRef.Name && f.Requester == w.Requester &&
		f.SessionRef == w.SessionRef && f.Tool == w.Tool && f.Arguments == w.Arguments
}
