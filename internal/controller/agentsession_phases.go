package controller

import (
	"context"
	"slices"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/pipeline"
)

// sortModelOrder sorts calls by (turn, index), then name for determinism.
func sortModelOrder(calls []*toolgatev1alpha1.ToolCall) {
	slices.SortStableFunc(calls, func(a, b *toolgatev1alpha1.ToolCall) int {
		switch {
		case a.Spec.Turn != b.Spec.Turn:
			return cmpInt(a.Spec.Turn, b.Spec.Turn)
		case a.Spec.Index != b.Spec.Index:
			return cmpInt(int64(a.Spec.Index), int64(b.Spec.Index))
		}
		return strings.Compare(a.Name, b.Name)
	})
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func committed(c *toolgatev1alpha1.ToolCall) bool {
	return c.Status.Phase == toolgatev1alpha1.PhaseCommitted
}

// turnCallOf is what turn planning needs to know of a call, read from its
// status.
func turnCallOf(c *toolgatev1alpha1.ToolCall) pipeline.TurnCall {
	sch := c.Status.Schedule
	return pipeline.TurnCall{
		Turn: c.Spec.Turn, Index: int(c.Spec.Index), Size: int(c.Spec.TurnSize), Mode: pipeline.Mode(sch.ExecutionMode),
		Next: nextStage(c), Released: sch.Released, Refused: sch.Refusal != "", Committed: committed(c),
	}
}

// schedule screens the session's calls (keeping duplicates and mismatched
// turn sizes out of the log), then carries out the plan of the calls in the
// log (pipeline.PlanTurn): refuse late calls, and release the first
// uncommitted call of the current turn with its place in the log when it
// never started (the calls that start admit and release themselves). It
// admits nested calls. Each call gets at most one write. It returns the
// calls in the log, in model order.
func (r *AgentSessionReconciler) schedule(ctx context.Context, s *toolgatev1alpha1.AgentSession, all []*toolgatev1alpha1.ToolCall) ([]*toolgatev1alpha1.ToolCall, error) {
	calls, work := scheduleWork(s, all)
	for _, w := range work {
		switch {
		case w.refusal != "":
			log.FromContext(ctx).Info("call refused", "call", w.call.Name, "code", w.refusal)
		case w.nested:
			log.FromContext(ctx).V(1).Info("nested call admitted", "call", w.call.Name)
		}
		written, err := r.patchSchedule(ctx, w.call, w.edits)
		if err != nil {
			return nil, err
		}
		if i := slices.Index(calls, w.call); i >= 0 {
			calls[i] = written // the status is derived from the calls as written
		}
	}
	return calls, nil
}

// callWork is what the session writes on one call: its edits, and what
// they are for the log.
type callWork struct {
	call    *toolgatev1alpha1.ToolCall
	edits   []func(*toolgatev1alpha1.CallSchedule)
	refusal string // the call is refused with this code
	nested  bool   // a nested call is admitted
}

// scheduleWork is schedule's decision, without writing it: the calls in
// the log in model order, and the writes on calls, in the order they are
// made.
func scheduleWork(s *toolgatev1alpha1.AgentSession, all []*toolgatev1alpha1.ToolCall) ([]*toolgatev1alpha1.ToolCall, []callWork) {
	calls, nested, out := screen(s.Spec.Owner, all)
	var work []callWork
	for _, c := range all { // in model order
		if code := out[c]; code != "" && c.Status.Schedule.Refusal != code {
			work = append(work, callWork{call: c, refusal: code, edits: []func(*toolgatev1alpha1.CallSchedule){
				func(sch *toolgatev1alpha1.CallSchedule) { sch.Refusal = code }}})
		}
	}
	for _, c := range nested {
		if c.Status.Schedule.ExecutionMode == "" {
			// Within its parent's slot: it starts and may settle at once.
			work = append(work, callWork{call: c, nested: true, edits: []func(*toolgatev1alpha1.CallSchedule){
				func(sch *toolgatev1alpha1.CallSchedule) {
					sch.ExecutionMode, sch.Released = toolgatev1alpha1.ModeParallel, true
				}}})
		}
	}
	// Calls admit themselves (admitSelf), each classified just before it
	// starts; the plan is asked here for refusals and releases only.
	view := planView(calls, completeThrough(s))
	plan := planOf(s, view, func(int) pipeline.Mode { return pipeline.Exclusive })
	for i := range calls { // in model order
		w := callWork{call: calls[i]}
		if slices.Contains(plan.Refuse, i) {
			w.refusal = string(pipeline.CodeTurnClosed)
			w.edits = append(w.edits, func(sch *toolgatev1alpha1.CallSchedule) { sch.Refusal = string(pipeline.CodeTurnClosed) })
		}
		if i == plan.Release && (plan.NeverStarts(view, i) || !s.DeletionTimestamp.IsZero()) {
			// A call that starts is released by itself: the first of a
			// turn with its admission (admitSelf), any other once its body
			// is done (releaseSelf), its place written with its result,
			// which saves this write and a round trip. The session
			// releases the calls that never start, and every call of a
			// session being deleted.
			seq := nextPlace(s, calls)
			w.edits = append(w.edits, func(sch *toolgatev1alpha1.CallSchedule) { sch.Released, sch.CommitSequence = true, &seq })
		}
		if len(w.edits) > 0 {
			work = append(work, w)
		}
	}
	return calls, work
}

// planOf is the plan of the calls in the session's log (in model order,
// as planView sees them): what schedule carries out, and what a call whose
// body is done reads to release itself.
func planOf(s *toolgatev1alpha1.AgentSession, view []pipeline.TurnCall, classify func(int) pipeline.Mode) pipeline.Plan {
	plan := pipeline.PlanTurn(view, int(s.Spec.MaxParallel), classify)
	if !s.DeletionTimestamp.IsZero() {
		// Every call is cancelled: none may wait for a call the model
		// will never send (a missing index, a turn short of its size).
		plan.Release = drainRelease(view)
	}
	return plan
}

// nextPlace is the place in the session's log of the next call released:
// never below what the session already handed out (a deleted call must not
// free its number).
func nextPlace(s *toolgatev1alpha1.AgentSession, calls []*toolgatev1alpha1.ToolCall) int64 {
	return max(nextSequence(calls), s.Status.NextSequence)
}

// drainRelease is the call a deleted session releases: the first
// uncommitted call in model order, whatever turn it is in and whatever
// index is missing before it, so that every call still commits, in model
// order. It is -1 while that call is released and not yet committed.
func drainRelease(view []pipeline.TurnCall) int {
	for i, c := range view {
		switch {
		case c.Committed:
			continue
		case c.Released:
			return -1
		}
		return i
	}
	return -1
}

// nextSequence is the next free place in the session's log.
func nextSequence(calls []*toolgatev1alpha1.ToolCall) int64 {
	var next int64
	for _, c := range calls {
		if seq := c.Status.Schedule.CommitSequence; seq != nil && *seq >= next {
			next = *seq + 1
		}
	}
	return next
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
	if err := r.Client.Status().Patch(ctx, c, client.MergeFromWithOptions(cached, client.MergeFromWithOptimisticLock{})); err != nil {
		return nil, err
	}
	statusWrites.WithLabelValues("agentsession").Inc()
	return c, nil
}
