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

// RunTurn is the in-memory driver for one model turn. It follows the agent
// loop's rules:
//
//   - each call is classified immediately before it starts;
//   - an exclusive call is a barrier: it starts after every earlier call has
//     committed, and later calls start after it has committed;
//   - parallel calls share a rolling pool of MaxParallel slots;
//   - pre-execute runs in model order (calls start in model order and their
//     pre-execute listeners run before the next call starts);
//   - post-execute and commitment run in model order, whatever order bodies
//     finish in;
//   - contexts are released after the whole turn has committed.
func (p *Pipeline) RunTurn(ctx context.Context, reqs []Request, opts TurnOptions) TurnResult {
	if opts.MaxParallel < 1 {
		opts.MaxParallel = 1
	}
	t := &turn{p: p, ctx: ctx, opts: opts, states: make([]*State, len(reqs)), out: TurnResult{Modes: make([]Mode, len(reqs))}}
	for i := 0; i < len(reqs); {
		if p.Classify(reqs[i]) == Exclusive {
			t.out.Modes[i] = Exclusive
			t.states[i] = NewState(reqs[i])
			t.states[i].Mode = Exclusive
			t.drive(t.states[i], StageDone)
			t.commit(i)
			i++
			continue
		}
		i = t.parallelGroup(reqs, i)
	}
	for _, r := range t.out.Results {
		t.out.Contexts = append(t.out.Contexts, r.Contexts...)
	}
	return t.out
}

type turn struct {
	p      *Pipeline
	ctx    context.Context
	opts   TurnOptions
	states []*State
	out    TurnResult
}

// drive steps st until its next stage is until or a later one.
func (t *turn) drive(st *State, until Stage) {
	for st.Next.before(until) {
		if progress, wait := t.p.Step(t.ctx, st); progress == Waiting {
			sleep(t.ctx, wait)
		}
	}
}

func (t *turn) commit(i int) {
	t.drive(t.states[i], StageDone)
	res := *t.states[i].Result
	t.out.Results = append(t.out.Results, res)
	if t.opts.Commit != nil {
		t.opts.Commit(res)
	}
}

// parallelGroup runs calls from start while they classify as parallel, and
// returns the index of the first call it did not run (a barrier, or the end).
func (t *turn) parallelGroup(reqs []Request, start int) int {
	finished := make(chan int, len(reqs))
	bodyDone := make([]bool, len(reqs))
	next, committed, inflight := start, start, 0
	end := -1 // set once a barrier or the end of the turn is known
	for {
		for end < 0 && inflight < t.opts.MaxParallel {
			if next == len(reqs) || t.p.Classify(reqs[next]) != Parallel {
				end = next
				break
			}
			st := NewState(reqs[next])
			st.Mode, t.out.Modes[next] = Parallel, Parallel
			t.states[next] = st
			// Admission and pre-execute run here, in model order; approval,
			// guards and the body overlap with other calls.
			t.drive(st, StageApproval)
			inflight++
			go func(i int) {
				t.drive(t.states[i], StagePostExecute)
				finished <- i
			}(next)
			next++
		}
		if end >= 0 && committed == end {
			return end
		}
		if bodyDone[committed] {
			// Post-execute and commitment follow model order.
			t.commit(committed)
			committed++
			continue
		}
		i := <-finished
		bodyDone[i] = true
		inflight--
	}
}
