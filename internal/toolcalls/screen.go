package toolcalls

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
//
// A nested call (spec.parentRef) is not a model call: it has no place in
// the log. It runs within its parent's slot, started and released at once,
// if its parent is a call of the same session whose body is executing;
// otherwise it is refused (invalid_parent).

// OutOfLog reports whether a refusal keeps a call out of the session's log
// (a turn_closed call still commits in its place).
func OutOfLog(refusal string) bool {
	switch pipeline.Code(refusal) {
	case pipeline.CodeDuplicateCall, pipeline.CodeTurnSizeMismatch, pipeline.CodeInvalidParent, pipeline.CodeNotSessionOwner:
		return true
	}
	return false
}

// screen splits calls (in model order) into those in the log, still in
// model order, the nested calls that may run, and those kept out of both,
// with the refusal each gets.
func screen(s *toolgatev1alpha1.AgentSession, all []*toolgatev1alpha1.ToolCall) (logged, nested []*toolgatev1alpha1.ToolCall, out map[*toolgatev1alpha1.ToolCall]string) {
	owner := s.Spec.Owner
	out = map[*toolgatev1alpha1.ToolCall]string{}
	calls := make([]*toolgatev1alpha1.ToolCall, 0, len(all))
	// Only a nested call asks for its parent by name: the map is made for
	// the first one (a session is screened on every plan, and most have
	// none).
	var byName map[string]*toolgatev1alpha1.ToolCall
	parent := func(name string) *toolgatev1alpha1.ToolCall {
		if byName == nil {
			byName = make(map[string]*toolgatev1alpha1.ToolCall, len(all))
			for _, c := range all {
				byName[c.Name] = c
			}
		}
		return byName[name]
	}
	for _, c := range all {
		switch {
		case OutOfLog(c.Status.Schedule.Refusal):
			out[c] = c.Status.Schedule.Refusal
		case c.Spec.Requester != owner && c.Status.Schedule.ExecutionMode == "":
			out[c] = string(pipeline.CodeNotSessionOwner) // never recorded in someone else's session
		case c.Spec.ParentRef == nil && !started(c) && placeTaken(s, c):
			// Its place was committed before: the call sent again after its
			// predecessor expired (or was deleted) is not run again.
			out[c] = string(pipeline.CodeDuplicateCall)
		case c.Spec.ParentRef == nil:
			calls = append(calls, c)
		case c.Status.Schedule.ExecutionMode != "" || parentExecuting(parent(c.Spec.ParentRef.Name)):
			nested = append(nested, c) // once started, it runs to its end
		default:
			out[c] = string(pipeline.CodeInvalidParent)
		}
	}
	type position struct {
		turn  int64
		index int32
	}
	byPosition := make(map[position]*toolgatev1alpha1.ToolCall, len(calls))
	byCallID := make(map[string]*toolgatev1alpha1.ToolCall, len(calls))
	turnSize := map[int64]*toolgatev1alpha1.ToolCall{}
	// Holders are chosen in precedence order, so that a later call never
	// displaces one that keeps its place.
	for _, c := range byPrecedence(calls) {
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
	return logged, nested, out
}

// placeTaken reports whether c's place in the log was committed, as the
// session's status records it (which outlives the calls): a place of the
// last turn recorded complete (every place of it committed), or at or
// before the last committed call of its turn (commits follow model
// order). A call created there now is a duplicate. An earlier turn's place
// may have been committed or never filled (its turn closed); a call there
// is refused as too late (turn_closed), which runs nothing either.
func placeTaken(s *toolgatev1alpha1.AgentSession, c *toolgatev1alpha1.ToolCall) bool {
	if through := CompleteThrough(s); through >= 0 && c.Spec.Turn == through {
		return true
	}
	cur := s.Status.CommitCursor
	return cur != nil && s.Status.NextSequence > 0 && c.Spec.Turn == cur.Turn && c.Spec.Index <= cur.Index
}

// started reports whether the session started (admitted or released) c.
func started(c *toolgatev1alpha1.ToolCall) bool {
	return c.Status.Schedule.ExecutionMode != "" || c.Status.Schedule.Released
}

// parentExecuting reports whether parent (nil when it is not a call of the
// session) is running its body: the only time its body can ask for a
// nested call.
func parentExecuting(parent *toolgatev1alpha1.ToolCall) bool {
	return parent != nil && parent.Spec.ParentRef == nil && NextStage(parent) == pipeline.StageExecute
}

// byPrecedence orders calls for screening: started calls first, then by
// creation (name breaks ties: a total order, no stable sort is needed).
func byPrecedence(calls []*toolgatev1alpha1.ToolCall) []*toolgatev1alpha1.ToolCall {
	out := append([]*toolgatev1alpha1.ToolCall(nil), calls...)
	slices.SortFunc(out, func(a, b *toolgatev1alpha1.ToolCall) int {
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
