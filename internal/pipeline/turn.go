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
	n := len(reqs)
	out := TurnResult{Modes: make([]Mode, n)}
	states := make([]*State, n)
	view := make([]TurnCall, n)
	for i, r := range reqs {
		view[i] = TurnCall{Turn: r.Turn, Index: r.Index, Next: StageCall}
	}
	classify := func(i int) Mode { return p.Classify(reqs[i]) }
	finished := make(chan int, n)
	drive := func(st *State, until Stage) {
		for st.Next.Before(until) {
			if progress, wait := p.Step(ctx, st); progress == Waiting {
				sleep(ctx, wait)
			}
		}
	}
	inflight := 0
	for committed := 0; committed < n; {
		plan := PlanTurn(view, opts.MaxParallel, classify)
		progressed := false
		if i := plan.Admit; i >= 0 {
			st := NewState(reqs[i])
			st.Mode, out.Modes[i], view[i].Mode = plan.AdmitMode, plan.AdmitMode, plan.AdmitMode
			states[i] = st
			// Admission and pre-execute run here, in model order; approval,
			// guards and the body overlap with other calls.
			drive(st, StageApproval)
			view[i].Next = st.Next
			inflight++
			go func() {
				drive(st, StagePostExecute)
				finished <- i
			}()
			progressed = true
		}
		if i := plan.Release; i >= 0 {
			view[i].Released, progressed = true, true
		}
		for i := range view {
			if c := view[i]; c.Released && !c.Committed && c.BodyDone() {
				// Post-execute and commitment follow model order.
				drive(states[i], StageDone)
				res := *states[i].Result
				out.Results = append(out.Results, res)
				if opts.Commit != nil {
					opts.Commit(res)
				}
				view[i].Next, view[i].Committed = StageDone, true
				committed++
				progressed = true
			}
		}
		if !progressed {
			if inflight == 0 {
				panic("pipeline: turn planning stalled with nothing in flight")
			}
			i := <-finished
			inflight--
			view[i].Next = states[i].Next
		}
	}
	for _, r := range out.Results {
		out.Contexts = append(out.Contexts, r.Contexts...)
	}
	return out
}
