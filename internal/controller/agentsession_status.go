package controller

import (
	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// setSessionStatus derives the session's log head from its calls, so it is
// always consistent with them (and idempotent after a crash between a
// commit and this write).
func setSessionStatus(s *toolgatev1alpha1.AgentSession, calls []*toolgatev1alpha1.ToolCall) {
	st := &s.Status
	st.Counts = toolgatev1alpha1.OutcomeCounts{}
	st.CommittedCalls = 0
	st.NextSequence = max(nextSequence(calls), st.NextSequence)
	st.CommitCursor = nil
	st.CommittedTurn = -1
	st.CurrentTurn = 0
	var last *toolgatev1alpha1.ToolCall
	for _, c := range calls {
		if !committed(c) {
			continue
		}
		last = c
		st.CommittedCalls++
		switch c.Status.Result.Outcome {
		case toolgatev1alpha1.OutcomeSucceeded:
			st.Counts.Succeeded++
		case toolgatev1alpha1.OutcomeFailed:
			st.Counts.Failed++
		case toolgatev1alpha1.OutcomeDenied:
			st.Counts.Denied++
		case toolgatev1alpha1.OutcomeCancelled:
			st.Counts.Cancelled++
		case toolgatev1alpha1.OutcomeTimedOut:
			st.Counts.TimedOut++
		}
	}
	if last != nil {
		st.CommitCursor = &toolgatev1alpha1.CallPosition{Turn: last.Spec.Turn, Index: last.Spec.Index}
	}
	if turn := currentTurn(calls); turn != nil {
		st.CurrentTurn = turn[0].Spec.Turn
	} else if len(calls) > 0 {
		st.CurrentTurn = calls[len(calls)-1].Spec.Turn
	}
	// The last turn whose every call has committed releases its contexts.
	st.DeferredContexts = nil
	for i := len(calls) - 1; i >= 0; i-- {
		c := calls[i]
		if !committed(c) || (turnOpen(calls, c.Spec.Turn)) {
			continue
		}
		st.CommittedTurn = c.Spec.Turn
		for _, d := range calls {
			if d.Spec.Turn == c.Spec.Turn {
				for _, ctx := range d.Status.Result.Contexts {
					if len(st.DeferredContexts) < 256 {
						st.DeferredContexts = append(st.DeferredContexts, toolgatev1alpha1.SessionContext{CallID: d.Spec.CallID, AdditionalContext: ctx})
					}
				}
			}
		}
		break
	}
}

// turnOpen reports whether turn has an uncommitted call.
func turnOpen(calls []*toolgatev1alpha1.ToolCall, turn int64) bool {
	for _, c := range calls {
		if c.Spec.Turn == turn && !committed(c) {
			return true
		}
	}
	return false
}
