package controller

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/log"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/toolcalls"
)

// A call schedules itself, from the session's plan (toolcalls.Planner): it admits
// itself when the plan starts it and releases itself when the plan lets it
// settle, each written with the call's own next boundary. The session
// writes the rest of the schedule (patch.go lists who writes what).

// admitSelf starts a call the session's plan admits now: it is the next in
// model order, every call before it has its pre-execute decision behind
// it (durable: seen in the cache), and the pool or a barrier does not hold
// it back. It classifies itself just before it starts (the seed's
// reclassification) and its admission is written with its first boundary,
// which saves the session a write on the call and a round trip per call.
// Each call admits only itself, and only once the writes of every call
// before it are seen, so two calls never take one place; a stale cache only
// delays. The first call of a turn is released with its admission, as the
// session's plan says. It reports whether the call was admitted.
func (r *ToolCallReconciler) admitSelf(ctx context.Context, s *callScope) (bool, error) {
	tc := s.tc
	sch := &tc.Status.Schedule
	if sch.ExecutionMode != "" || s.session == nil || s.pipe == nil || tc.Spec.ParentRef != nil || sch.Refusal != "" || pipeline.PastPreExecute(s.st.Next) {
		return false, nil
	}
	sp, err := r.plans().Plan(ctx, s.session, &toolcalls.Self{UID: tc.UID, Next: s.st.Next, Classify: func() pipeline.Mode {
		return s.pipe.Classify(toolcalls.RequestOf(tc))
	}})
	if err != nil {
		return false, fmt.Errorf("listing the session's calls: %w", err)
	}
	if !sp.Admits() {
		return false, nil
	}
	log.FromContext(ctx).V(1).Info("call admitted", "call", tc.Name, "mode", sp.AdmitMode())
	sch.ExecutionMode = toolgatev1alpha1.ExecutionMode(sp.AdmitMode())
	if sp.Releases() {
		seq := sp.NextPlace()
		sch.Released, sch.CommitSequence = true, &seq
	}
	return true, nil
}

// releaseSelf releases a call whose body is done when the session's plan
// would: it is the first uncommitted call of the current turn, every call
// before it committed (as the cache shows them, after their writes). Its
// place in the log is set here and written with its result, which saves
// the session a write and a round trip per call. It reports whether the
// call was released.
func (r *ToolCallReconciler) releaseSelf(ctx context.Context, s *callScope) (bool, error) {
	tc := s.tc
	sch := &tc.Status.Schedule
	if sch.Released || s.session == nil || tc.Spec.ParentRef != nil || sch.Refusal != "" || !pipeline.BodyDone(s.st.Next) {
		return false, nil
	}
	sp, err := r.plans().Plan(ctx, s.session, &toolcalls.Self{UID: tc.UID, Next: s.st.Next})
	if err != nil {
		return false, fmt.Errorf("listing the session's calls: %w", err)
	}
	if !sp.Releases() {
		return false, nil
	}
	seq := sp.NextPlace()
	sch.Released, sch.CommitSequence = true, &seq
	return true, nil
}

// gateOpen applies the session's schedule: a call starts only once the
// session admitted it (or it is cancelled, deleted or refused, which
// settles it at once), and settles only once the session released it. A
// call kept out of the session's log, or without a session, settles at
// once: it has no place to wait for.
func gateOpen(s *callScope) bool {
	tc, st := s.tc, s.st
	sch := tc.Status.Schedule
	switch {
	case toolcalls.OutOfLog(sch.Refusal) || s.session == nil:
		return true
	case !pipeline.PastPreExecute(st.Next):
		return sch.ExecutionMode != "" || tc.Spec.CancelRequested || toolcalls.Deleting(tc) || sch.Refusal != ""
	case pipeline.BodyDone(st.Next):
		return sch.Released
	}
	return true
}
