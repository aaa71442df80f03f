package pipeline

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
)

// tc builds a TurnCall: turn t, index i, then options.
func tc(t int64, i int, opts ...func(*TurnCall)) TurnCall {
	c := TurnCall{Turn: t, Index: i, Next: StageCall}
	for _, o := range opts {
		o(&c)
	}
	return c
}

func admitted(m Mode, next Stage) func(*TurnCall) {
	return func(c *TurnCall) { c.Mode, c.Next = m, next }
}
func released(c *TurnCall) { c.Released = true }
func committedCall(c *TurnCall) {
	c.Committed, c.Released, c.Next = true, true, StageDone
	if c.Mode == "" {
		c.Mode = Exclusive
	}
}
func refusedCall(c *TurnCall)  { c.Refused = true }
func of(n int) func(*TurnCall) { return func(c *TurnCall) { c.Size = n } }

func TestPlanTurn(t *testing.T) {
	par := func(int) Mode { return Parallel }
	exc := func(int) Mode { return Exclusive }
	for _, tt := range []struct {
		name     string
		calls    []TurnCall
		max      int
		classify func(int) Mode
		want     Plan
		asked    []int // calls classified
	}{
		{name: "empty", classify: par, want: Plan{Release: -1, Admit: -1}},
		{
			name: "first call starts and is released with its admission", max: 2, classify: par,
			calls: []TurnCall{tc(0, 0), tc(0, 1)},
			want:  Plan{Release: 0, Admit: 0, AdmitMode: Parallel}, asked: []int{0},
		},
		{
			name: "next parallel call waits for the previous pre-execute decision", max: 4, classify: par,
			calls: []TurnCall{tc(0, 0, admitted(Parallel, StagePreExecute), released), tc(0, 1)},
			want:  Plan{Release: -1, Admit: -1},
		},
		{
			name: "next parallel call starts once the previous decided", max: 4, classify: par,
			calls: []TurnCall{tc(0, 0, admitted(Parallel, StageExecute), released), tc(0, 1)},
			want:  Plan{Release: -1, Admit: 1, AdmitMode: Parallel}, asked: []int{1},
		},
		{
			name: "pool bound: a full pool admits nothing", max: 2, classify: par,
			calls: []TurnCall{tc(0, 0, admitted(Parallel, StageExecute), released), tc(0, 1, admitted(Parallel, StageExecute)), tc(0, 2)},
			want:  Plan{Release: -1, Admit: -1}, asked: []int{2},
		},
		{
			name: "pool is rolling: a body done frees its slot before commit", max: 2, classify: par,
			calls: []TurnCall{tc(0, 0, admitted(Parallel, StageExecute), released), tc(0, 1, admitted(Parallel, StagePostExecute)), tc(0, 2)},
			want:  Plan{Release: -1, Admit: 2, AdmitMode: Parallel}, asked: []int{2},
		},
		{
			name: "barrier: an exclusive call waits for earlier calls to commit", max: 4, classify: exc,
			calls: []TurnCall{tc(0, 0, admitted(Parallel, StageExecute), released), tc(0, 1)},
			want:  Plan{Release: -1, Admit: -1}, asked: []int{1},
		},
		{
			name: "barrier: an exclusive call starts first in line", max: 4, classify: exc,
			calls: []TurnCall{tc(0, 0, committedCall), tc(0, 1)},
			want:  Plan{Release: 1, Admit: 1, AdmitMode: Exclusive}, asked: []int{1},
		},
		{
			name: "barrier: nothing starts after a running exclusive call", max: 4, classify: par,
			calls: []TurnCall{tc(0, 0, admitted(Exclusive, StageExecute), released), tc(0, 1)},
			want:  Plan{Release: -1, Admit: -1},
		},
		{
			name: "reclassification: the answer given at start is the one acted on", max: 4,
			classify: func(i int) Mode { return map[int]Mode{1: Parallel}[i] },
			calls:    []TurnCall{tc(0, 0, admitted(Parallel, StageExecute), released), tc(0, 1)},
			want:     Plan{Release: -1, Admit: 1, AdmitMode: Parallel}, asked: []int{1},
		},
		{
			name: "anything but parallel is exclusive", max: 4, classify: func(int) Mode { return "" },
			calls: []TurnCall{tc(0, 0)},
			want:  Plan{Release: 0, Admit: 0, AdmitMode: Exclusive}, asked: []int{0},
		},
		{
			name: "release follows model order: the first uncommitted call", max: 4, classify: par,
			calls: []TurnCall{tc(0, 0, committedCall), tc(0, 1, admitted(Parallel, StagePostExecute)), tc(0, 2, admitted(Parallel, StagePostExecute))},
			want:  Plan{Release: 1, Admit: -1},
		},
		{
			name: "next turn waits for the current one to commit", max: 4, classify: par,
			calls: []TurnCall{tc(0, 0, admitted(Parallel, StageExecute), released), tc(1, 0)},
			want:  Plan{Release: -1, Admit: -1},
		},
		{
			name: "next turn starts once the previous one committed", max: 4, classify: par,
			calls: []TurnCall{tc(0, 0, committedCall), tc(1, 0)},
			want:  Plan{Release: 1, Admit: 1, AdmitMode: Parallel}, asked: []int{1},
		},
		{
			name: "refusal: a call of an earlier turn arriving after a later call started", max: 4, classify: par,
			calls: []TurnCall{tc(0, 0, committedCall), tc(0, 1), tc(1, 0, admitted(Parallel, StageExecute))},
			want:  Plan{Refuse: []int{1}, Release: 1, Admit: -1},
		},
		{
			name: "refusal: a lower index arriving after a higher one started", max: 4, classify: par,
			calls: []TurnCall{tc(0, 0), tc(0, 1, admitted(Parallel, StageExecute), released)},
			want:  Plan{Refuse: []int{0}, Release: 0, Admit: -1},
		},
		{
			name: "refusal: a refused call is released, never admitted, and is not a barrier", max: 4, classify: par,
			calls: []TurnCall{tc(0, 0, refusedCall), tc(0, 1)},
			want:  Plan{Release: 0, Admit: 1, AdmitMode: Parallel}, asked: []int{1},
		},
		{
			name: "refusal: a settled call is never refused, and is released first in line", max: 4, classify: par,
			calls: []TurnCall{tc(0, 0, func(c *TurnCall) { c.Next = StageFinalize }), tc(0, 1, admitted(Parallel, StageExecute))},
			want:  Plan{Release: 0, Admit: -1},
		},
		{
			name: "declared size: a missing lower index holds the turn back, and nothing is refused", max: 4, classify: par,
			calls: []TurnCall{tc(0, 1, of(2))},
			want:  Plan{Release: -1, Admit: -1},
		},
		{
			name: "declared size: a missing index in the middle holds back the calls after it", max: 4, classify: par,
			calls: []TurnCall{tc(0, 0, of(3), admitted(Parallel, StageExecute), released), tc(0, 2, of(3))},
			want:  Plan{Release: -1, Admit: -1},
		},
		{
			name: "declared size: a turn missing a call is not complete, so the next turn waits", max: 4, classify: par,
			calls: []TurnCall{tc(0, 0, of(2), committedCall), tc(1, 0, of(1))},
			want:  Plan{Release: -1, Admit: -1},
		},
		{
			name: "declared size: a complete turn lets the next one start", max: 4, classify: par,
			calls: []TurnCall{tc(0, 0, of(2), committedCall), tc(0, 1, of(2), committedCall), tc(1, 0, of(1))},
			want:  Plan{Release: 2, Admit: 2, AdmitMode: Parallel}, asked: []int{2},
		},
		{
			name: "all committed", max: 4, classify: par,
			calls: []TurnCall{tc(0, 0, committedCall), tc(1, 0, committedCall)},
			want:  Plan{Release: -1, Admit: -1},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var asked []int
			got := PlanTurn(tt.calls, tt.max, func(i int) Mode { asked = append(asked, i); return tt.classify(i) })
			if !slices.Equal(got.Refuse, tt.want.Refuse) || got.Release != tt.want.Release || got.Admit != tt.want.Admit || got.AdmitMode != tt.want.AdmitMode {
				t.Errorf("plan %+v, want %+v", got, tt.want)
			}
			if !slices.Equal(asked, tt.asked) {
				t.Errorf("classified %v, want %v (once, the call about to start)", asked, tt.asked)
			}
		})
	}
}

func TestTurnComplete(t *testing.T) {
	for _, tt := range []struct {
		size, present, committed int
		want                     bool
	}{
		{size: 2, present: 1, committed: 1, want: false}, // a declared call is still to come
		{size: 2, present: 2, committed: 1, want: false},
		{size: 2, present: 2, committed: 2, want: true},
		{size: 0, present: 2, committed: 2, want: true}, // undeclared: what is present
		{size: 0, present: 2, committed: 1, want: false},
	} {
		if got := TurnComplete(tt.size, tt.present, tt.committed); got != tt.want {
			t.Errorf("TurnComplete(%d, %d, %d) = %v", tt.size, tt.present, tt.committed, got)
		}
	}
}

// TestTurnWithAFlappingClassifier: a classifier whose answer changes on
// every evaluation still lets the whole turn commit, in order.
func TestTurnWithAFlappingClassifier(t *testing.T) {
	h := newHarness(t)
	var n atomic.Int64
	must(t, h.reg.Register(h.scope, Definition{
		Name: "flap", Parameters: `{"type":"object"}`, Output: Output{Schema: `{"type":"string"}`},
		IsConcurrencySafe: func(Arguments) any { return n.Add(1)%2 == 0 },
		Execute:           func(context.Context, Arguments, *Exec) (any, error) { return "ok", nil },
	}))
	h.allowAll()
	var reqs []Request
	for _, id := range []string{"1", "2", "3", "4", "5", "6", "7", "8"} {
		reqs = append(reqs, call(id, "flap", `{}`))
	}
	for i := range reqs {
		reqs[i].Index = i
	}
	res := h.pipeline(Options{}).RunTurn(context.Background(), reqs, TurnOptions{MaxParallel: 3})
	if got := ids(res.Results); !slices.Equal(got, []string{"1", "2", "3", "4", "5", "6", "7", "8"}) {
		t.Fatalf("committed %v", got)
	}
	if evals := n.Load(); evals > 100 {
		t.Errorf("%d classifier evaluations for 8 calls", evals)
	}
}
