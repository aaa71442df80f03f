package toolcalls

import (
	"encoding/json"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/pipeline"
)

// SetSessionStatus derives the session's log head from its calls, so it is
// always consistent with them (and idempotent after a crash between a
// commit and this write).
func SetSessionStatus(s *toolgatev1alpha1.AgentSession, calls []*toolgatev1alpha1.ToolCall) {
	st := &s.Status
	through := CompleteThrough(s)
	st.Counts, st.CommittedCalls = toolgatev1alpha1.OutcomeCounts{}, 0
	st.NextSequence = max(nextSequence(calls), st.NextSequence)
	st.CommittedTurn = -1
	st.CurrentTurn = 0
	var last *toolgatev1alpha1.ToolCall
	for _, c := range calls {
		if !c.Committed() {
			continue
		}
		last = c
		st.CommittedCalls++
		countOutcome(&st.Counts, c.Status.Result.Outcome)
	}
	// The cursor never goes back: commits follow model order, and a
	// committed call deleted (by hand, or expired) leaves it where it was.
	if last != nil && (st.CommitCursor == nil || !before(last.Spec.Turn, last.Spec.Index, *st.CommitCursor)) {
		st.CommitCursor = &toolgatev1alpha1.CallPosition{Turn: last.Spec.Turn, Index: last.Spec.Index}
	}
	if start, _ := pipeline.CurrentTurn(planView(calls, through)); start >= 0 {
		st.CurrentTurn = calls[start].Spec.Turn
	} else if len(calls) > 0 {
		st.CurrentTurn = calls[len(calls)-1].Spec.Turn
	}
	// The last complete turn (as many calls as it declared, all committed)
	// releases its contexts. A closed turn contributes nothing. When the
	// calls of the turn recorded complete are gone (deleted, or expired:
	// ttlSecondsAfterCommit), its contexts stay as they were.
	kept, keptOmitted := st.DeferredContexts, st.DeferredContextsOmitted
	st.DeferredContexts, st.DeferredContextsOmitted = nil, 0
	closed := closedTurns(calls)
	for i := len(calls) - 1; i >= 0; i-- {
		c := calls[i]
		if !c.Committed() || closed[c.Spec.Turn] || !turnComplete(calls, c.Spec.Turn, through) {
			continue
		}
		st.CommittedTurn = c.Spec.Turn
		st.DeferredContexts, st.DeferredContextsOmitted = deferredContexts(calls, c.Spec.Turn)
		break
	}
	if st.CommittedTurn < through {
		st.DeferredContexts, st.DeferredContextsOmitted = kept, keptOmitted
	}
	st.CommittedTurn = max(st.CommittedTurn, through)
}

// The bounds of a session's deferred contexts: the status is one object,
// and every context a turn's calls defer (up to 16 KiB each, 16 per call)
// would not fit in one write.
const (
	maxDeferredContexts     = 256
	maxDeferredContextBytes = 512 << 10
)

// deferredContexts are the contexts of turn's calls, in call order, within
// the bounds, and how many were left out (each still in its call's result).
func deferredContexts(calls []*toolgatev1alpha1.ToolCall, turn int64) ([]toolgatev1alpha1.SessionContext, int32) {
	var out []toolgatev1alpha1.SessionContext
	var omitted int32
	size := 0
	for _, d := range calls {
		if d.Spec.Turn != turn {
			continue
		}
		for _, ctx := range d.Status.Result.Contexts {
			sc := toolgatev1alpha1.SessionContext{CallID: d.Spec.CallID, AdditionalContext: ctx}
			n := encodedSize(sc)
			if omitted > 0 || len(out) == maxDeferredContexts || size+n > maxDeferredContextBytes {
				// Later ones are left out too: the model reads a prefix in
				// call order, never a gap.
				omitted++
				continue
			}
			out = append(out, sc)
			size += n
		}
	}
	return out, omitted
}

// encodedSize is the size of sc as stored.
func encodedSize(sc toolgatev1alpha1.SessionContext) int {
	b, err := json.Marshal(sc)
	if err != nil {
		return maxDeferredContextBytes // never: plain strings
	}
	return len(b)
}

// before reports whether (turn, index) comes before position p in model
// order.
func before(turn int64, index int32, p toolgatev1alpha1.CallPosition) bool {
	return turn < p.Turn || (turn == p.Turn && index < p.Index)
}

// countOutcome adds one call of outcome to counts.
func countOutcome(counts *toolgatev1alpha1.OutcomeCounts, outcome toolgatev1alpha1.Outcome) {
	switch outcome {
	case toolgatev1alpha1.OutcomeSucceeded:
		counts.Succeeded++
	case toolgatev1alpha1.OutcomeFailed:
		counts.Failed++
	case toolgatev1alpha1.OutcomeDenied:
		counts.Denied++
	case toolgatev1alpha1.OutcomeCancelled:
		counts.Cancelled++
	case toolgatev1alpha1.OutcomeTimedOut:
		counts.TimedOut++
	}
}

// CompleteThrough is the last turn the session has recorded complete (-1
// before any): a turn once complete stays complete, even when its committed
// calls are deleted, all of them included.
func CompleteThrough(s *toolgatev1alpha1.AgentSession) int64 {
	if s.Status.NextSequence == 0 {
		return -1 // nothing ever released: a status never written, or nothing committed yet
	}
	return s.Status.CommittedTurn
}

// closedTurns are the turns whose calls were all refused as too late
// (turn_closed): a later turn had started, so the calls the turn declared
// and did not send can never be ordered either. Such a turn has no size to
// wait for; it is complete once its refused calls have committed.
func closedTurns(calls []*toolgatev1alpha1.ToolCall) map[int64]bool {
	closed := map[int64]bool{}
	for _, c := range calls {
		refused := c.Status.Schedule.Refusal == string(pipeline.CodeTurnClosed)
		if was, seen := closed[c.Spec.Turn]; !seen || was {
			closed[c.Spec.Turn] = refused
		}
	}
	return closed
}

// turnComplete reports whether turn has committed as many calls as it
// declared (or, once recorded complete, every call still present).
func turnComplete(calls []*toolgatev1alpha1.ToolCall, turn, through int64) bool {
	size, present, done := 0, 0, 0
	for _, c := range calls {
		if c.Spec.Turn == turn {
			size = int(c.Spec.TurnSize)
			present++
			if c.Committed() {
				done++
			}
		}
	}
	if turn <= through {
		size = 0
	}
	return pipeline.TurnComplete(size, present, done)
}
