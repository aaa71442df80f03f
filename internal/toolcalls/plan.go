package toolcalls

import (
	"context"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/pipeline"
)

// Planner is the one place a session is planned, for the session's
// reconciler (schedule) and each call's own reconcile (admitSelf,
// releaseSelf, and the watches that wake the next in line). It lists a session's calls as this process knows them,
// screens them, plans the calls in the log with pipeline.PlanTurn, and
// says which calls may move next.
type Planner struct {
	Reader client.Reader
	// index, when set, reads a session's calls in place (Index);
	// otherwise they are listed from reader.
	Index *Index
	// own, when set, stands in for the cache where it is behind this
	// process's own writes of a call (OwnWrites.current). The ToolCall
	// controller plans from its own writes; the session plans from the
	// cache alone, and its writes are optimistically locked.
	Own *OwnWrites
}

// Calls lists a session's calls from the cache without copying them (a
// session may hold thousands), in no particular order: read only. A write
// copies the call first.
func (p Planner) Calls(ctx context.Context, namespace, session string) ([]*toolgatev1alpha1.ToolCall, error) {
	var out []*toolgatev1alpha1.ToolCall
	if p.Index != nil {
		var err error
		if out, err = p.Index.Calls(namespace, session); err != nil {
			return nil, err
		}
	} else {
		list := &toolgatev1alpha1.ToolCallList{}
		if err := p.Reader.List(ctx, list, client.InNamespace(namespace), client.MatchingFields{IndexCallSession: session}, client.UnsafeDisableDeepCopy); err != nil {
			return nil, err
		}
		out = make([]*toolgatev1alpha1.ToolCall, len(list.Items))
		for i := range list.Items {
			out[i] = &list.Items[i]
		}
	}
	if p.Own != nil {
		for i := range out {
			out[i] = p.Own.Current(out[i])
		}
	}
	return out, nil
}

// InModelOrder lists a session's calls (calls), in model order.
func (p Planner) InModelOrder(ctx context.Context, namespace, session string) ([]*toolgatev1alpha1.ToolCall, error) {
	calls, err := p.Calls(ctx, namespace, session)
	if err != nil {
		return nil, err
	}
	SortModelOrder(calls)
	return calls, nil
}

// Next are the calls of a session that may move now (NextOf).
func (p Planner) Next(ctx context.Context, namespace, session string) ([]reconcile.Request, error) {
	calls, err := p.Calls(ctx, namespace, session)
	if err != nil {
		return nil, err
	}
	return NextOf(calls), nil
}

// Self is a call planning itself: its stage as its reconcile knows it
// (ahead of the cache), and how it classifies itself just before it
// starts (nil: it is not starting).
type Self struct {
	UID      types.UID
	Next     pipeline.Stage
	Classify func() pipeline.Mode
}

// Plan lists, screens and plans a session's calls (PlanSession).
func (p Planner) Plan(ctx context.Context, s *toolgatev1alpha1.AgentSession, me *Self) (*SessionPlan, error) {
	all, err := p.InModelOrder(ctx, s.Namespace, s.Name)
	if err != nil {
		return nil, err
	}
	return PlanSession(s, all, me), nil
}

// SessionPlan is one plan of a session.
type SessionPlan struct {
	session *toolgatev1alpha1.AgentSession
	// all are the session's calls in model order; logged those in its
	// log, nested the nested calls that may run, out those kept out of
	// both with their refusal (screen).
	all, logged, nested []*toolgatev1alpha1.ToolCall
	out                 map[*toolgatev1alpha1.ToolCall]string
	view                []pipeline.TurnCall
	plan                pipeline.Plan
	// me is the planning call's place in logged (-1: none, or no call
	// plans itself).
	me int
}

// Logged are the session's calls in its log, in model order (read only).
func (sp *SessionPlan) Logged() []*toolgatev1alpha1.ToolCall { return sp.logged }

// AdmitMode is how the planning call is admitted (its classification).
func (sp *SessionPlan) AdmitMode() pipeline.Mode { return sp.plan.AdmitMode }

// PlanSession screens all (in model order) and plans the calls in the log.
// Only me, when set, is classified: every other call is Exclusive to this
// plan, since it is not this plan's to start (each call admits only
// itself). A deleted session releases its calls one by one past any gap
// (DrainRelease).
func PlanSession(s *toolgatev1alpha1.AgentSession, all []*toolgatev1alpha1.ToolCall, me *Self) *SessionPlan {
	sp := &SessionPlan{session: s, all: all, me: -1}
	sp.logged, sp.nested, sp.out = screen(s, all)
	sp.view = planView(sp.logged, CompleteThrough(s))
	if me != nil {
		sp.me = slices.IndexFunc(sp.logged, func(c *toolgatev1alpha1.ToolCall) bool { return c.UID == me.UID })
		if sp.me >= 0 {
			sp.view[sp.me].Next = me.Next
		}
	}
	sp.plan = pipeline.PlanTurn(sp.view, int(s.Spec.MaxParallel), func(i int) pipeline.Mode {
		if i == sp.me && me.Classify != nil {
			return me.Classify()
		}
		return pipeline.Exclusive
	})
	if !s.DeletionTimestamp.IsZero() {
		// Every call is cancelled: none may wait for a call the model
		// will never send (a missing index, a turn short of its size).
		sp.plan.Release = DrainRelease(sp.view)
	}
	return sp
}

// Admits reports whether the plan starts the planning call now.
func (sp *SessionPlan) Admits() bool {
	return sp.me >= 0 && sp.plan.Admit == sp.me && !slices.Contains(sp.plan.Refuse, sp.me)
}

// Releases reports whether the plan lets the planning call settle now.
func (sp *SessionPlan) Releases() bool { return sp.me >= 0 && sp.plan.Release == sp.me }

// NextPlace is the place in the session's log of the next call released:
// never below what the session already handed out (a deleted call must not
// free its number).
func (sp *SessionPlan) NextPlace() int64 {
	return max(nextSequence(sp.logged), sp.session.Status.NextSequence)
}

// CallWork is what the session writes on one call: its edits, and what
// they are for the log.
type CallWork struct {
	Call    *toolgatev1alpha1.ToolCall
	Edits   []func(*toolgatev1alpha1.CallSchedule)
	Refusal string // the call is refused with this code
	Nested  bool   // a nested call is admitted
}

// Work is the session's part of the plan, in the order it is written:
// refusals of calls kept out of the log, admissions of nested calls, and,
// in the log, refusals of late calls and the release of a call that never
// starts (or of any call, in a session being deleted). The calls that
// start admit and release themselves (admitSelf, releaseSelf).
func (sp *SessionPlan) Work() []CallWork {
	var work []CallWork
	for _, c := range sp.all { // in model order
		if code := sp.out[c]; code != "" && c.Status.Schedule.Refusal != code {
			work = append(work, CallWork{Call: c, Refusal: code, Edits: []func(*toolgatev1alpha1.CallSchedule){
				func(sch *toolgatev1alpha1.CallSchedule) { sch.Refusal = code }}})
		}
	}
	// Within its parent's slot: a nested call starts (and may settle) at
	// once, at most maxParallel of one parent at a time, so that a body
	// fanning out sub-calls is bounded like a turn; the others wait for
	// one to settle.
	running := map[string]int{}
	for _, c := range sp.nested {
		if c.Status.Schedule.ExecutionMode != "" && c.Status.Result == nil {
			running[c.Spec.ParentRef.Name]++
		}
	}
	for _, c := range sp.nested {
		parent := c.Spec.ParentRef.Name
		if c.Status.Schedule.ExecutionMode == "" && running[parent] < nestedBound(sp.session) {
			running[parent]++
			work = append(work, CallWork{Call: c, Nested: true, Edits: []func(*toolgatev1alpha1.CallSchedule){
				func(sch *toolgatev1alpha1.CallSchedule) {
					sch.ExecutionMode, sch.Released = toolgatev1alpha1.ModeParallel, true
				}}})
		}
	}
	for i, c := range sp.logged { // in model order
		w := CallWork{Call: c}
		if slices.Contains(sp.plan.Refuse, i) {
			w.Refusal = string(pipeline.CodeTurnClosed)
			w.Edits = append(w.Edits, func(sch *toolgatev1alpha1.CallSchedule) { sch.Refusal = string(pipeline.CodeTurnClosed) })
		}
		if i == sp.plan.Release && (sp.plan.NeverStarts(sp.view, i) || !sp.session.DeletionTimestamp.IsZero()) {
			// A call that starts is released by itself: the first of a
			// turn with its admission (admitSelf), any other once its body
			// is done (releaseSelf), its place written with its result,
			// which saves this write and a round trip.
			seq := sp.NextPlace()
			w.Edits = append(w.Edits, func(sch *toolgatev1alpha1.CallSchedule) { sch.Released, sch.CommitSequence = true, &seq })
		}
		if len(w.Edits) > 0 {
			work = append(work, w)
		}
	}
	return work
}

// nestedBound is how many nested calls of one parent run at once: the
// session's maxParallel (at least one).
func nestedBound(s *toolgatev1alpha1.AgentSession) int {
	return int(max(1, s.Spec.MaxParallel))
}

// NextOf are the calls of a session (in any order) that may move: the
// first uncommitted one in model order (which may release itself) and the
// first that has not started (which may admit itself).
func NextOf(items []*toolgatev1alpha1.ToolCall) []reconcile.Request {
	calls := make([]*toolgatev1alpha1.ToolCall, 0, len(items))
	for _, c := range items {
		if !c.Committed() && c.Spec.ParentRef == nil && c.Status.Schedule.Refusal == "" {
			calls = append(calls, c)
		}
	}
	SortModelOrder(calls)
	var out []reconcile.Request
	if len(calls) > 0 {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(calls[0])})
	}
	for i, c := range calls {
		if v := TurnCallOf(c); !v.Started() && !v.BodyDone() {
			if i > 0 {
				out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(c)})
			}
			break
		}
	}
	return out
}

// DrainRelease is the call a deleted session releases: the first
// uncommitted call in model order, whatever turn it is in and whatever
// index is missing before it, so that every call still commits, in model
// order. It is -1 while that call is released and not yet committed.
func DrainRelease(view []pipeline.TurnCall) int {
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

// SortModelOrder sorts calls by (turn, index), then name for determinism
// (the names of a session's calls are unique: no stable sort is needed).
func SortModelOrder(calls []*toolgatev1alpha1.ToolCall) {
	slices.SortFunc(calls, func(a, b *toolgatev1alpha1.ToolCall) int {
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

// TurnCallOf is what turn planning needs to know of a call, read from its
// status.
func TurnCallOf(c *toolgatev1alpha1.ToolCall) pipeline.TurnCall {
	sch := c.Status.Schedule
	return pipeline.TurnCall{
		Turn: c.Spec.Turn, Index: int(c.Spec.Index), Size: int(c.Spec.TurnSize), Mode: pipeline.Mode(sch.ExecutionMode),
		Next: NextStage(c), Released: sch.Released, Refused: sch.Refusal != "", Committed: c.Committed(),
	}
}

// planView is what turn planning sees of the session's calls: turns already
// recorded complete, and closed turns, no longer count their declared size,
// and an unstarted call of a turn before the last complete one is late.
func planView(calls []*toolgatev1alpha1.ToolCall, through int64) []pipeline.TurnCall {
	closed := closedTurns(calls)
	view := make([]pipeline.TurnCall, len(calls))
	for i, c := range calls {
		view[i] = TurnCallOf(c)
		if c.Spec.Turn <= through || closed[c.Spec.Turn] {
			view[i].Size = 0
		}
		// A turn before the last complete one is complete by the
		// session's record, which outlives its calls: a call that has not
		// started there never will (sent again after its predecessor
		// expired, say; the last complete turn's are refused as
		// duplicates: placeTaken).
		view[i].Late = c.Spec.Turn < through && !started(c)
	}
	return view
}
