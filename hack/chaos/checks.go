package main

import (
	"fmt"
	"maps"
	"slices"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/codes"
)

// observations are what a run saw, once its load is done: the promises are
// checked on them alone.
type observations struct {
	calls []*call        // every submitted call, by name
	runs  map[string]int // body runs of each call, by name (its markers)
	// podsLeft are the tool pods still holding a call once every call has
	// its result (-1: the pods could not be listed); warmPods hold none.
	podsLeft, warmPods int
}

// verdict is a promise checked on a run.
type verdict struct {
	count int      // the report's figure: breaches; any other than 0 breaks the promise
	notes []string // a line for each breach, printed before the figures
}

// kept reports whether the promise held.
func (v verdict) kept() bool { return v.count == 0 }

// promise is one thing toolgate promises of every run; name is its row in
// the report.
type promise struct {
	name  string
	check func(observations) verdict
}

// promises are checked, and their rows printed, in this order.
var promises = []promise{
	{"calls without a result (lost)", lostCalls},
	{"duplicate or missing commit positions", commitPositions},
	{"non-idempotent bodies run more than once", nonIdempotentReruns},
	{"commits out of model order", modelOrder},
	{"tool pods left after every call settled", podsLeft},
	{"timed out, of a tool that ends within its timeout", strayTimeouts},
	{"failures the workload did not ask for", unaskedFailures},
}

// lostCalls: every call has a result.
func lostCalls(o observations) verdict {
	var v verdict
	for _, c := range o.calls {
		if c.obj == nil || c.obj.Status.Result == nil {
			v.count++
		}
	}
	return v
}

// commitPositions: each session's committed calls hold the positions 0,
// 1, 2, ... of its log, each once.
func commitPositions(o observations) verdict {
	var v verdict
	for _, l := range commitLogs(o.calls) {
		for i, c := range l.calls {
			if seq := *c.obj.Status.Schedule.CommitSequence; seq != int64(i) {
				v.count++
				v.notes = append(v.notes, fmt.Sprintf("chaos: session %s: %s has sequence %d at position %d", l.session, c.name, seq, i))
			}
		}
	}
	return v
}

// nonIdempotentReruns: no body of a non-idempotent tool ran twice.
func nonIdempotentReruns(o observations) verdict {
	var v verdict
	for _, c := range o.calls {
		if n := o.runs[c.name]; n > 1 && nonIdempotent[c.tool] {
			v.count++
			v.notes = append(v.notes, fmt.Sprintf("chaos: %s (%s, not idempotent) ran %d times", c.name, c.tool, n))
		}
	}
	return v
}

// modelOrder: each session's log holds its calls in model order (turn,
// then index).
func modelOrder(o observations) verdict {
	var v verdict
	for _, l := range commitLogs(o.calls) {
		for i := 1; i < len(l.calls); i++ {
			p, c := l.calls[i-1], l.calls[i]
			if p.turn > c.turn || (p.turn == c.turn && p.index >= c.index) {
				v.count++
				v.notes = append(v.notes, fmt.Sprintf("chaos: session %s: %s committed after %s", l.session, c.name, p.name))
			}
		}
	}
	return v
}

// podsLeft: no tool pod outlives its call.
func podsLeft(o observations) verdict { return verdict{count: o.podsLeft} }

// strayTimeouts: only overtime outlives its timeout; a fault must not look
// like one.
func strayTimeouts(o observations) verdict {
	var v verdict
	for _, c := range o.calls {
		if c.obj != nil && c.obj.Status.Result != nil && c.obj.Status.Result.Outcome == toolgatev1alpha1.OutcomeTimedOut && c.tool != "overtime" {
			v.count++
		}
	}
	return v
}

// unaskedFailures: a call ends other than Succeeded only where the
// workload made it (its cancellation, a fault that deleted its pod) or its
// tool is made to (overtime's timeout, checked by strayTimeouts): a fault
// of toolgate's own (a bound judged while no manager led, a lost handover)
// must never end a call.
func unaskedFailures(o observations) verdict {
	var v verdict
	for _, c := range o.calls {
		if c.obj == nil || c.obj.Status.Result == nil {
			continue // lostCalls
		}
		r := c.obj.Status.Result
		switch {
		case r.Outcome == toolgatev1alpha1.OutcomeSucceeded, r.Outcome == toolgatev1alpha1.OutcomeTimedOut:
			continue
		case c.cancelled && r.Outcome == toolgatev1alpha1.OutcomeCancelled:
			continue
		case c.podDeleted && (r.ErrorCode == codes.SandboxLost || r.ErrorCode == codes.SandboxEvicted || r.ErrorCode == codes.Interrupted):
			continue
		case c.podRefused && r.ErrorCode == codes.SandboxUnavailable:
			continue
		}
		v.count++
		v.notes = append(v.notes, fmt.Sprintf("chaos: %s (%s) ended %s %s: %s", c.name, c.tool, r.Outcome, r.ErrorCode, r.Message))
	}
	return v
}

// commitLog is the calls a session committed, in the order of their
// commit sequences.
type commitLog struct {
	session string
	calls   []*call
}

// commitLogs are the sessions' logs, by session name.
func commitLogs(calls []*call) []commitLog {
	bySession := map[string][]*call{}
	for _, c := range calls {
		if c.obj != nil && c.obj.Status.Schedule.CommitSequence != nil {
			bySession[c.session] = append(bySession[c.session], c)
		}
	}
	var logs []commitLog
	for _, s := range slices.Sorted(maps.Keys(bySession)) {
		cs := bySession[s]
		slices.SortFunc(cs, func(a, b *call) int {
			return int(*a.obj.Status.Schedule.CommitSequence - *b.obj.Status.Schedule.CommitSequence)
		})
		logs = append(logs, commitLog{session: s, calls: cs})
	}
	return logs
}
