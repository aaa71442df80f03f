package main

import (
	"fmt"
	"slices"
	"testing"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/codes"
)

// committed is a call of tool at turn/index in session, committed at
// position seq of its log with outcome.
func committed(session string, turn int64, index int32, tool string, seq int64, outcome toolgatev1alpha1.Outcome) *call {
	return &call{
		session: session, name: fmt.Sprintf("%s-t%d-i%d", session, turn, index), tool: tool, turn: turn, index: index,
		obj: &toolgatev1alpha1.ToolCall{Status: toolgatev1alpha1.ToolCallStatus{
			Phase:    toolgatev1alpha1.PhaseCommitted,
			Schedule: toolgatev1alpha1.CallSchedule{CommitSequence: &seq},
			Result:   &toolgatev1alpha1.ToolCallResult{Outcome: outcome},
		}},
	}
}

// keptRun is a run that keeps every promise, with what a promise allows:
// an idempotent body run twice, overtime timed out, warm pods left.
func keptRun() observations {
	ok, timedOut := toolgatev1alpha1.OutcomeSucceeded, toolgatev1alpha1.OutcomeTimedOut
	o := observations{calls: []*call{
		committed("s0", 0, 0, "exclusive", 0, ok),
		committed("s0", 0, 1, "parallel", 1, ok),
		committed("s0", 1, 0, "idempotent", 2, ok),
		committed("s1", 0, 0, "overtime", 0, timedOut),
		committed("s1", 1, 0, "asked", 1, ok),
	}, runs: map[string]int{}, warmPods: 2}
	for _, c := range o.calls {
		o.runs[c.name] = 1
	}
	o.runs["s0-t1-i0"] = 2
	return o
}

// find is the call named name.
func find(o observations, name string) *call {
	i := slices.IndexFunc(o.calls, func(c *call) bool { return c.name == name })
	return o.calls[i]
}

// TestPromises feeds each check a run that keeps every promise, and runs
// that break one: the broken promise's verdict is its breaches and their
// notes, and every other promise holds.
func TestPromises(t *testing.T) {
	for _, tt := range []struct {
		name   string
		change func(o *observations)
		want   map[string]verdict // by promise; an absent one holds
	}{
		{name: "every promise kept", change: func(*observations) {}},
		{
			name: "calls without a result",
			change: func(o *observations) {
				o.calls = append(o.calls,
					&call{session: "s1", name: "s1-t2-i0", tool: "asked", turn: 2},                                              // never seen
					&call{session: "s1", name: "s1-t2-i1", tool: "asked", turn: 2, index: 1, obj: &toolgatev1alpha1.ToolCall{}}) // seen, no result
			},
			want: map[string]verdict{"calls without a result (lost)": {count: 2}},
		},
		{
			name:   "a commit position missing",
			change: func(o *observations) { *find(*o, "s0-t1-i0").obj.Status.Schedule.CommitSequence = 3 },
			want: map[string]verdict{"duplicate or missing commit positions": {count: 1, notes: []string{
				"chaos: session s0: s0-t1-i0 has sequence 3 at position 2",
			}}},
		},
		{
			name: "a non-idempotent body run twice",
			change: func(o *observations) {
				o.runs["s0-t0-i0"] = 2
				o.runs["s1-t1-i0"] = 3
			},
			want: map[string]verdict{"non-idempotent bodies run more than once": {count: 2, notes: []string{
				"chaos: s0-t0-i0 (exclusive, not idempotent) ran 2 times",
				"chaos: s1-t1-i0 (asked, not idempotent) ran 3 times",
			}}},
		},
		{
			name: "a turn's calls committed out of index order",
			change: func(o *observations) {
				*find(*o, "s0-t0-i0").obj.Status.Schedule.CommitSequence = 1
				*find(*o, "s0-t0-i1").obj.Status.Schedule.CommitSequence = 0
			},
			want: map[string]verdict{"commits out of model order": {count: 1, notes: []string{
				"chaos: session s0: s0-t0-i0 committed after s0-t0-i1",
			}}},
		},
		{
			name: "a later turn committed first",
			change: func(o *observations) {
				*find(*o, "s1-t1-i0").obj.Status.Schedule.CommitSequence = 0
				*find(*o, "s1-t0-i0").obj.Status.Schedule.CommitSequence = 1
			},
			want: map[string]verdict{"commits out of model order": {count: 1, notes: []string{
				"chaos: session s1: s1-t0-i0 committed after s1-t1-i0",
			}}},
		},
		{
			name:   "a tool pod left",
			change: func(o *observations) { o.podsLeft = 1 },
			want:   map[string]verdict{"tool pods left after every call settled": {count: 1}},
		},
		{
			name:   "the tool pods never listed",
			change: func(o *observations) { o.podsLeft = -1 },
			want:   map[string]verdict{"tool pods left after every call settled": {count: -1}},
		},
		{
			name: "a tool that ends within its timeout timed out",
			change: func(o *observations) {
				find(*o, "s0-t0-i1").obj.Status.Result.Outcome = toolgatev1alpha1.OutcomeTimedOut
			},
			want: map[string]verdict{"timed out, of a tool that ends within its timeout": {count: 1}},
		},
		{
			name: "failures the workload asked for",
			change: func(o *observations) {
				cancelled := find(*o, "s0-t0-i1")
				cancelled.cancelled, cancelled.obj.Status.Result.Outcome = true, toolgatev1alpha1.OutcomeCancelled
				lost := find(*o, "s0-t0-i0")
				lost.podDeleted = true
				lost.obj.Status.Result.Outcome, lost.obj.Status.Result.ErrorCode = toolgatev1alpha1.OutcomeFailed, codes.SandboxLost
				refused := find(*o, "s1-t0-i0") // its kubelet refused its pod
				refused.podDeleted, refused.podRefused = true, true
				refused.obj.Status.Result.Outcome, refused.obj.Status.Result.ErrorCode = toolgatev1alpha1.OutcomeFailed, codes.SandboxUnavailable
			},
		},
		{
			name: "a pod deleted never explains sandbox_unavailable",
			change: func(o *observations) {
				lost := find(*o, "s0-t0-i0")
				lost.podDeleted = true
				lost.obj.Status.Result.Outcome, lost.obj.Status.Result.ErrorCode = toolgatev1alpha1.OutcomeFailed, codes.SandboxUnavailable
			},
			want: map[string]verdict{"failures the workload did not ask for": {count: 1, notes: []string{
				"chaos: s0-t0-i0 (exclusive) ended Failed sandbox_unavailable: ",
			}}},
		},
		{
			name: "failures of toolgate's own",
			change: func(o *observations) {
				r := find(*o, "s0-t1-i0").obj.Status.Result
				r.Outcome, r.ErrorCode, r.Message = toolgatev1alpha1.OutcomeFailed, codes.SandboxNotReady, "not ready"
				lost := find(*o, "s0-t0-i0") // its pod was never deleted
				lost.obj.Status.Result.Outcome, lost.obj.Status.Result.ErrorCode = toolgatev1alpha1.OutcomeFailed, codes.SandboxLost
				cancelled := find(*o, "s1-t1-i0") // never cancelled
				cancelled.obj.Status.Result.Outcome = toolgatev1alpha1.OutcomeCancelled
			},
			want: map[string]verdict{"failures the workload did not ask for": {count: 3, notes: []string{
				"chaos: s0-t0-i0 (exclusive) ended Failed sandbox_lost: ",
				"chaos: s0-t1-i0 (idempotent) ended Failed sandbox_not_ready: not ready",
				"chaos: s1-t1-i0 (asked) ended Cancelled : ",
			}}},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o := keptRun()
			tt.change(&o)
			for _, p := range promises {
				got, want := p.check(o), tt.want[p.name]
				if got.count != want.count || !slices.Equal(got.notes, want.notes) {
					t.Errorf("%s: got %d breaches %q, want %d %q", p.name, got.count, got.notes, want.count, want.notes)
				}
				if got.kept() != (want.count == 0) {
					t.Errorf("%s: kept %v with %d breaches", p.name, got.kept(), got.count)
				}
			}
		})
	}
}

// TestPromiseRows: the report's rows, in their order and wording.
func TestPromiseRows(t *testing.T) {
	var got []string
	for _, p := range promises {
		got = append(got, p.name)
	}
	want := []string{
		"calls without a result (lost)",
		"duplicate or missing commit positions",
		"non-idempotent bodies run more than once",
		"commits out of model order",
		"tool pods left after every call settled",
		"timed out, of a tool that ends within its timeout",
		"failures the workload did not ask for",
	}
	if !slices.Equal(got, want) {
		t.Errorf("promises %q, want %q", got, want)
	}
}
