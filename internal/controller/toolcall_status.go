package controller

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
)

// persist writes the call's status when the state changed it, counts the
// boundaries it made durable, and wakes the calls next in line when what
// the plan reads of this call moved.
func (r *ToolCallReconciler) persist(ctx context.Context, s *callScope) error {
	tc := s.tc
	before := len(s.base.Status.Stages)
	writeState(tc, s.st, r.Clock.Now())
	if equality.Semantic.DeepEqual(s.base.Status, tc.Status) {
		return nil // nothing new: no API write
	}
	written, err := r.patchCall(ctx, tc, s.base, true)
	if err != nil {
		return fmt.Errorf("writing the call's status: %w", err)
	}
	r.observeStages(s, before)
	moved := planMoved(s.base, written)
	s.base = written // read only, as ownWrites keeps it
	if moved {
		r.wakeNext(ctx, written)
	}
	return nil
}
