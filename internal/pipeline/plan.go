package pipeline

import "slices"

// Turn planning: the agent loop's scheduling rules in one pure function,
// used by the in-memory RunTurn and by the session controller alike. A
// driver gathers what it knows of a session's calls (TurnCall), asks
// PlanTurn what may happen next, does it, and asks again.

// TurnCall is what planning needs to know of one call.
type TurnCall struct {
	// Turn and Index place the call in model order.
	Turn  int64
	Index int
	// Size is the number of calls its turn declared; 0 when unknown (the
	// turn is then complete once every call present has committed).
	Size int
	// Mode is the execution mode it was admitted with; empty until then.
	Mode Mode
	// Next is the call's next stage: StageCall before it starts, StageDone
	// once it has its result.
	Next Stage
	// Released: the call may settle (post-execute onwards).
	Released bool
	// Refused: the call arrived too late to be ordered; it settles
	// without running and is never admitted.
	Refused bool
	// Late: the call's turn is complete by the driver's durable record
	// (its calls may be gone, expired): it can no longer be ordered, and
	// is refused like a call that arrived after a later one started.
	Late bool
	// Committed: the call's result is appended to the session's log.
	Committed bool
}

// Started reports whether the call has started (it was admitted) or is
// past starting (committed).
func (c TurnCall) Started() bool { return c.Mode != "" || c.Committed }

// Decided reports whether the call's pre-execute decision is behind it.
func (c TurnCall) Decided() bool { return PastPreExecute(c.Next) }

// BodyDone reports whether nothing is left to run before post-execute.
func (c TurnCall) BodyDone() bool { return BodyDone(c.Next) }

// PastPreExecute reports whether a call whose next stage is s has its
// pre-execute decision behind it.
func PastPreExecute(s Stage) bool { return StagePreExecute.Before(s) }

// BodyDone reports whether a call whose next stage is s has nothing left to
// run before post-execute.
func BodyDone(s Stage) bool { return !s.Before(StagePostExecute) }

// Plan is what may happen next in a session. Indexes refer to the calls
// given to PlanTurn; -1 means none.
type Plan struct {
	// Refuse are calls that arrived after a call later in model order had
	// started: they can no longer be ordered (turn_closed).
	Refuse []int
	// Release is the first uncommitted call of the current turn, not yet
	// released: every call before it has committed, so it may settle.
	Release int
	// Admit is the call that may start now, with AdmitMode, the mode it was
	// classified as just now.
	Admit     int
	AdmitMode Mode
}

// PlanTurn decides, for calls in model order (sorted by turn, then index),
// what may happen next:
//
//   - a call that arrived after a later call started, or late (its turn
//     complete by the record), is refused;
//   - the current turn is the first that is not complete (a turn is
//     complete once as many of its calls as it declared have committed); a
//     turn starts only when every earlier turn is complete;
//   - a turn's calls start in index order: a missing index holds back the
//     calls after it until it arrives (a call too late to be ordered is
//     held back by nothing: its turn can have no earlier call either);
//   - the first uncommitted call of the current turn may settle (it is
//     released); post-execute and commitment thus follow model order;
//   - calls start in model order, each once the previous one's pre-execute
//     decision is behind it; an exclusive call starts only as the first
//     uncommitted call, and nothing starts after it until it has committed;
//     parallel calls start while fewer than maxParallel of them have their
//     body ahead (a rolling pool).
//
// classify is asked once, for the call about to start only: the call is
// classified immediately before start, and the answer is acted on.
func PlanTurn(calls []TurnCall, maxParallel int, classify func(i int) Mode) Plan {
	plan := Plan{Release: -1, Admit: -1, Refuse: refused(calls)}
	start, end := CurrentTurn(calls)
	if start < 0 {
		return plan
	}
	first := start
	for first < end && calls[first].Committed {
		first++
	}
	if first == end || (calls[first].Index != first-start && !plan.tooLate(calls, first)) {
		return plan // waiting for a call of the turn that has not arrived
	}
	idle := func(i int) bool { return plan.NeverStarts(calls, i) }
	if c := calls[first]; !c.Released && (c.Started() || idle(first)) {
		plan.Release = first
	}
	plan.Admit, plan.AdmitMode = admission(calls, first, end, maxParallel, idle, classify)
	if plan.Admit == first {
		// Releasing the first call together with its admission saves a
		// step (and, for a controller, a write).
		plan.Release = first
	}
	return plan
}

// NeverStarts reports whether call i of calls (as given to PlanTurn) never
// starts: refused (now or before), or settled without starting. It needs
// no admission: it is released when first in line, and it is no barrier
// for the calls after it.
func (p Plan) NeverStarts(calls []TurnCall, i int) bool {
	c := calls[i]
	return c.Mode == "" && (c.Refused || c.BodyDone() || slices.Contains(p.Refuse, i))
}

// tooLate reports whether call i can no longer be ordered (refused now or
// before, or late): the calls missing before it in its turn would be too,
// so they hold it back no more.
func (p Plan) tooLate(calls []TurnCall, i int) bool {
	return calls[i].Refused || calls[i].Late || slices.Contains(p.Refuse, i)
}

// refused lists the calls that have not started and never will: before
// the latest started call in model order, or late (their turn complete by
// the record).
func refused(calls []TurnCall) []int {
	latest := -1
	for i, c := range calls {
		if c.Started() {
			latest = i
		}
	}
	var out []int
	for i, c := range calls {
		if (i < latest || c.Late) && !c.Started() && !c.Refused && !c.BodyDone() {
			out = append(out, i)
		}
	}
	return out
}

// CurrentTurn returns the bounds of the first turn that is not complete,
// or -1 when every turn is.
func CurrentTurn(calls []TurnCall) (start, end int) {
	for start = 0; start < len(calls); start = end {
		end = start
		committed := 0
		for end < len(calls) && calls[end].Turn == calls[start].Turn {
			if calls[end].Committed {
				committed++
			}
			end++
		}
		if !TurnComplete(calls[start].Size, end-start, committed) {
			return start, end
		}
	}
	return -1, -1
}

// TurnComplete reports whether a turn that declared size calls (0: not
// declared), of which present are known and committed have committed, is
// complete: its deferred contexts may be released and the next turn start.
func TurnComplete(size, present, committed int) bool {
	if size > 0 {
		return committed >= size
	}
	return committed == present
}

// admission walks the current turn [first, end) from its first uncommitted
// call and returns the call that may start, or -1.
func admission(calls []TurnCall, first, end, maxParallel int, idle func(int) bool, classify func(int) Mode) (int, Mode) {
	inflight := 0
	for _, c := range calls[first:end] {
		if c.Mode != "" && !c.Committed && !c.BodyDone() {
			inflight++
		}
	}
	for i := first; i < end; i++ {
		c := calls[i]
		switch {
		case c.Index != i-(first-calls[first].Index):
			return -1, "" // a call of the turn has not arrived yet
		case c.Committed || idle(i):
			continue
		case c.Mode == Exclusive:
			return -1, "" // a barrier
		case c.Mode != "":
			if !c.Decided() {
				return -1, "" // pre-execute follows model order
			}
			continue
		}
		mode := classify(i)
		switch {
		case mode != Parallel && i != first:
			return -1, "" // waits for every earlier call to commit
		case mode == Parallel && inflight >= max(maxParallel, 1):
			return -1, "" // the pool is full
		case mode != Parallel:
			mode = Exclusive
		}
		return i, mode
	}
	return -1, ""
}
