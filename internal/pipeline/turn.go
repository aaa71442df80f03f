package pipeline

import (
	"context"
)

// TurnOptions configure RunTurn.
type TurnOptions struct {
	// MaxParallel bounds how many parallel calls are in flight (admitted and
	// not yet through their body). Values below 1 mean 1.
	MaxParallel int
	// Commit, if set, receives each result in model order as it commits
	// (the durable tool/result append).
	Commit func(Result)
}

// TurnResult is a committed turn.
type TurnResult struct {
	// Results are the committed results, in model order.
	Results []Result
	// Modes are the execution modes the calls ran with.
	Modes []Mode
	// Contexts are released only now that the whole turn has committed, in
	// call order (each call's tool-deferred contexts before its decision
	// contexts).
	Contexts []Context
}

// RunTurn is the in-memory driver for one model turn. PlanTurn decides, as
// for the session controller, which call starts (classified immediately
// before it starts), which may settle and in what order; this driver runs
// admission and pre-execute in model order, overlaps approval, guards and
// bodies of parallel calls, and settles each call once it is released and
// its body is done. Contexts are released after the whole turn has
// committed.
func (p *Pipeline) RunTurn(ctx context.Context, reqs []Request, opts TurnOptions) TurnResult {
	t := &turn{p: p, ctx: ctx, opts: opts, reqs: reqs, states: make([]*State, len(reqs)),
		view: make([]TurnCall, len(reqs)), finished: make(chan int, len(reqs))}
	t.out.Modes = make([]Mode, len(reqs))
	for i := range reqs {
		t.view[i] = TurnCall{Index: i, Size: len(reqs), Next: StageCall} // one turn, in the order given
	}
	classify := func(i int) Mode { return p.Classify(reqs[i]) }
	for committed := 0; committed < len(reqs); {
		plan := PlanTurn(t.view, opts.MaxParallel, classify)
		progressed := false
		if i := plan.Admit; i >= 0 {
			t.start(i, plan.AdmitMode)
			progressed = true
		}
		if i := plan.Release; i >= 0 {
			t.view[i].Released, progressed = true, true
		}
		if n := t.commitReleased(); n > 0 {
			committed += n
			progressed = true
		}
		if !progressed {
			t.awaitBody()
		}
	}
	for _, r := range t.out.Results {
		t.out.Contexts = append(t.out.Contexts, r.Contexts...)
	}
	return t.out
}

// turn is RunTurn's state: the calls' states, what planning sees of them
// (updated on the driving goroutine only), and the bodies in flight.
type turn struct {
	p        *Pipeline
	ctx      context.Context
	opts     TurnOptions
	reqs     []Request
	states   []*State
	view     []TurnCall
	finished chan int
	inflight int
	out      TurnResult
}

// drive steps st until its next stage is until or a later one.
func (t *turn) drive(st *State, until Stage) {
	for st.Next.Before(until) {
		if progress, wait := t.p.Step(t.ctx, st); progress == Waiting {
			sleep(t.ctx, wait)
		}
	}
}

// start admits call i: admission and pre-execute run here, in model order;
// approval, guards and the body overlap with other calls.
func (t *turn) start(i int, mode Mode) {
	st := NewState(t.reqs[i])
	st.Mode, t.out.Modes[i], t.view[i].Mode = mode, mode, mode
	t.states[i] = st
	t.drive(st, StageApproval)
	t.view[i].Next = st.Next
	if BodyDone(st.Next) {
		return // settled at pre-execute: nothing to overlap
	}
	t.inflight++
	go func() {
		t.drive(st, StagePostExecute)
		t.finished <- i
	}()
}

// commitReleased settles and commits the released calls whose body is
// done: post-execute and commitment follow model order, because only the
// first uncommitted call is ever released.
func (t *turn) commitReleased() int {
	n := 0
	for i, c := range t.view {
		if !c.Released || c.Committed || !c.BodyDone() {
			continue
		}
		t.drive(t.states[i], StageDone)
		res := *t.states[i].Result
		t.out.Results = append(t.out.Results, res)
		if t.opts.Commit != nil {
			t.opts.Commit(res)
		}
		t.view[i].Next, t.view[i].Committed = StageDone, true
		n++
	}
	return n
}

// awaitBody waits for a body in flight to finish.
func (t *turn) awaitBody() {
	if t.inflight == 0 {
		panic("pipeline: turn planning stalled with nothing in flight")
	}
	i := <-t.finished
	t.inflight--
	t.view[i].Next = t.states[i].Next
}
