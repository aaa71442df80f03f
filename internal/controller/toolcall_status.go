package controller

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/log"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/textutil"
	"github.com/toolgate/toolgate/internal/toolcalls"
)

// persist writes the call's status when the state changed it, counts the
// boundaries it made durable, and wakes the calls next in line when what
// the plan reads of this call moved. A result the API server refuses to
// store (too large, or invalid there) would be refused on every retry and
// leave the call, and its turn, without a result for good: it is replaced
// by a failure (result_rejected) that says why, and written instead.
func (r *ToolCallReconciler) persist(ctx context.Context, s *callScope) error {
	tc := s.tc
	before := len(s.base.Status.Stages)
	toolcalls.WriteState(tc, s.st, r.Clock.Now())
	if equality.Semantic.DeepEqual(s.base.Status, tc.Status) {
		return nil // nothing new: no API write
	}
	started := r.Clock.Now()
	written, err := r.patchCall(ctx, tc, s.base, statusLocked)
	if err != nil && s.base.Status.Result == nil && tc.Status.Result != nil && refusedForGood(err) {
		log.FromContext(ctx).Info("result refused by the API server", "call", tc.Name, "code", pipeline.CodeResultRejected)
		s.st.FailResult(pipeline.CodeResultRejected, "the API server refused to store the result: "+textutil.OneLine(err.Error(), 512))
		// The live announcement told of the refused result; the durable
		// one is announced too.
		r.mem.with(tc, func(m *memo) { m.announced = false })
		tc.Status = *s.base.Status.DeepCopy()
		toolcalls.WriteState(tc, s.st, r.Clock.Now())
		written, err = r.patchCall(ctx, tc, s.base, statusLocked)
	}
	if err != nil {
		return fmt.Errorf("writing the call's status: %w", err)
	}
	traceWrite(written, s.st, started, r.Clock.Now())
	r.observeStages(s, before)
	if s.base.Status.Phase != toolgatev1alpha1.PhaseCommitted && written.Status.Phase == toolgatev1alpha1.PhaseCommitted {
		r.traceCommit(written)
	}
	moved, settledNow := planMoved(s.base, written), s.base.Status.Result == nil && written.Status.Result != nil
	s.base = written // read only, as toolcalls.OwnWrites keeps it
	// The runner is told before the wake when the write hands a sandbox
	// its body (a warm call's start waits for it), after it when the
	// write settles the call (ending its work, a pod's delete, is not
	// what the next call waits for).
	if !settledNow {
		s.runner.durable(ctx, written, s.st.Attempt)
	}
	if moved || settledNow {
		r.wakeNext(ctx, written, settledNow)
	}
	if settledNow {
		s.runner.durable(ctx, written, s.st.Attempt)
	}
	return nil
}

// refusedForGood reports whether the API server refused a write for what
// it holds, so that sending it again cannot succeed: too large for a
// request or for storage, or invalid.
func refusedForGood(err error) bool {
	if apierrors.IsRequestEntityTooLargeError(err) || apierrors.IsInvalid(err) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "request is too large") || strings.Contains(msg, "ResourceExhausted") ||
		strings.Contains(msg, "larger than max")
}
