package controller

import (
	"slices"
	"strings"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/pipeline"
)

// Screening: before planning, the session keeps out of its log every call
// that cannot have a place in it. Model order and call ids are unique: one
// call per (turn, index) and one result per callID; and a turn has one
// declared size. The call that keeps the place is the one already started,
// else the first created; the others are refused, settle at once without
// running, and are never committed.

// outOfLog reports whether a refusal keeps a call out of the session's log
// (a turn_closed call still commits in its place).
func outOfLog(refusal string) bool {
	return refusal == string(pipeline.CodeDuplicateCall) || refusal == string(pipeline.CodeTurnSizeMismatch)
}

// screen splits calls (in model order) into those in the log, still in
// model order, and those kept out of it, with the refusal each gets.
func screen(calls []*toolgatev1alpha1.ToolCall) (logged []*toolgatev1alpha1.ToolCall, out map[*toolgatev1alpha1.ToolCall]string) {
	out = map[*toolgatev1alpha1.ToolCall]string{}
	type position struct {
		turn  int64
		index int32
	}
	byPosition := map[position]*toolgatev1alpha1.ToolCall{}
	byCallID := map[string]*toolgatev1alpha1.ToolCall{}
	turnSize := map[int64]*toolgatev1alpha1.ToolCall{}
	// Holders are chosen in precedence order, so that a later call never
	// displaces one that keeps its place.
	for _, c := range byPrecedence(calls) {
		if r := c.Status.Schedule.Refusal; outOfLog(r) {
			out[c] = r
			continue
		}
		pos := position{c.Spec.Turn, c.Spec.Index}
		switch held, sized := turnSize[c.Spec.Turn]; {
		case byPosition[pos] != nil || byCallID[c.Spec.CallID] != nil:
			out[c] = string(pipeline.CodeDuplicateCall)
		case sized && held.Spec.TurnSize != c.Spec.TurnSize:
			out[c] = string(pipeline.CodeTurnSizeMismatch)
		default:
			byPosition[pos], byCallID[c.Spec.CallID] = c, c
			if !sized {
				turnSize[c.Spec.Turn] = c
			}
		}
	}
	for _, c := range calls {
		if _, gone := out[c]; !gone {
			logged = append(logged, c)
		}
	}
	return logged, out
}

// byPrecedence orders calls for screening: started calls first, then by
// creation (name breaks ties).
func byPrecedence(calls []*toolgatev1alpha1.ToolCall) []*toolgatev1alpha1.ToolCall {
	out := append([]*toolgatev1alpha1.ToolCall(nil), calls...)
	started := func(c *toolgatev1alpha1.ToolCall) bool {
		return c.Status.Schedule.ExecutionMode != "" || c.Status.Schedule.Released
	}
	slices.SortStableFunc(out, func(a, b *toolgatev1alpha1.ToolCall) int {
		if sa, sb := started(a), started(b); sa != sb {
			if sa {
				return -1
			}
			return 1
		}
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out
}
