package toolcalls

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/pipeline"
	tu "github.com/toolgate/toolgate/internal/testutil"
)

// TestSessionPlanFromStatus: the session plans from what calls' statuses
// say (no API server): each status, as the controllers write it, reads as
// the planning input that leads to the right next step.
func TestSessionPlanFromStatus(t *testing.T) {
	call := func(name string, turn int64, index int32) *tu.ToolCallWrapper {
		return tu.MakeToolCall("ns", name, "s").At(turn, index)
	}
	par := toolgatev1alpha1.ModeParallel
	for _, tt := range []struct {
		name  string
		calls []*tu.ToolCallWrapper
		max   int
		want  pipeline.Plan
	}{
		{
			name:  "a new session admits and releases its first call",
			calls: []*tu.ToolCallWrapper{call("a", 0, 0), call("b", 0, 1)},
			max:   2, want: pipeline.Plan{Admit: 0, AdmitMode: pipeline.Parallel, Release: 0},
		},
		{
			name: "a call still before its pre-execute decision holds the next one back",
			calls: []*tu.ToolCallWrapper{
				call("a", 0, 0).Admitted(par).Released(0),
				call("b", 0, 1),
			},
			max: 2, want: pipeline.Plan{Admit: -1, Release: -1},
		},
		{
			name: "a running body lets the next parallel call start",
			calls: []*tu.ToolCallWrapper{
				call("a", 0, 0).Admitted(par).Released(0).NextStage(string(pipeline.StageExecute)),
				call("b", 0, 1),
			},
			max: 2, want: pipeline.Plan{Admit: 1, AdmitMode: pipeline.Parallel, Release: -1},
		},
		{
			name: "a committed call hands the release to the next one",
			calls: []*tu.ToolCallWrapper{
				call("a", 0, 0).Admitted(par).Committed(0),
				call("b", 0, 1).Admitted(par).NextStage(string(pipeline.StagePostExecute)),
			},
			max: 2, want: pipeline.Plan{Admit: -1, Release: 1},
		},
		{
			name: "a refused call settles and is released in its turn",
			calls: []*tu.ToolCallWrapper{
				call("a", 0, 0).Committed(0),
				call("late", 0, 1).Refused(string(pipeline.CodeTurnClosed)).NextStage(string(pipeline.StageFinalize)),
				call("c", 1, 0).Admitted(par).NextStage(string(pipeline.StageExecute)),
			},
			max: 2, want: pipeline.Plan{Admit: -1, Release: 1},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			calls := make([]*toolgatev1alpha1.ToolCall, len(tt.calls))
			for i, w := range tt.calls {
				calls[len(calls)-1-i] = w.Obj() // listed out of order
			}
			SortModelOrder(calls)
			view := make([]pipeline.TurnCall, len(calls))
			for i, c := range calls {
				view[i] = TurnCallOf(c)
			}
			got := pipeline.PlanTurn(view, tt.max, func(int) pipeline.Mode { return pipeline.Parallel })
			if !slices.Equal(got.Refuse, tt.want.Refuse) || got.Admit != tt.want.Admit || got.AdmitMode != tt.want.AdmitMode || got.Release != tt.want.Release {
				t.Errorf("plan %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestDrainRelease: a deleted session releases its calls one by one in
// model order, past a missing index and a turn short of its size.
func TestDrainRelease(t *testing.T) {
	for _, tt := range []struct {
		name string
		view []pipeline.TurnCall
		want int
	}{
		{"past a missing index", []pipeline.TurnCall{
			{Turn: 0, Index: 0, Size: 3, Committed: true},
			{Turn: 0, Index: 2, Size: 3},
			{Turn: 1, Index: 0, Size: 1},
		}, 1},
		{"past a turn short of its size", []pipeline.TurnCall{
			{Turn: 0, Index: 0, Size: 2, Committed: true},
			{Turn: 1, Index: 0, Size: 1},
		}, 1},
		{"one released call at a time", []pipeline.TurnCall{
			{Turn: 0, Index: 0, Size: 3, Released: true},
			{Turn: 0, Index: 2, Size: 3},
		}, -1},
		{"nothing left", []pipeline.TurnCall{{Turn: 0, Index: 0, Size: 1, Committed: true}}, -1},
	} {
		if got := DrainRelease(tt.view); got != tt.want {
			t.Errorf("%s: release %d, want %d", tt.name, got, tt.want)
		}
	}
}

// TestClosedTurnHasNoSize: a turn whose calls were all refused as too late
// waits for none of the calls it declared; the turn after it goes on, and
// it does not count as the last complete turn.
func TestClosedTurnHasNoSize(t *testing.T) {
	excl := toolgatev1alpha1.ModeExclusive
	calls := []*toolgatev1alpha1.ToolCall{
		tu.MakeToolCall("ns", "t0", "s").At(0, 0).Committed(0).Obj(),
		tu.MakeToolCall("ns", "late", "s").At(1, 0).Of(2).Refused(string(pipeline.CodeTurnClosed)).Released(2).Settled(toolgatev1alpha1.OutcomeFailed, string(pipeline.CodeTurnClosed)).Obj(),
		tu.MakeToolCall("ns", "t2a", "s").At(2, 0).Of(2).Admitted(excl).Committed(1).Obj(),
		tu.MakeToolCall("ns", "t2b", "s").At(2, 1).Of(2).Obj(),
	}
	plan := pipeline.PlanTurn(planView(calls, 0), 1, func(int) pipeline.Mode { return pipeline.Exclusive })
	if plan.Admit != 3 || plan.Release != 3 {
		t.Errorf("plan %+v, want t2b admitted and released", plan)
	}
	s := tu.MakeAgentSession("ns", "s", "p").Obj()
	s.Status.CommittedCalls, s.Status.CommittedTurn = 1, 0
	SetSessionStatus(s, calls)
	if s.Status.CurrentTurn != 2 || s.Status.CommittedTurn != 0 {
		t.Errorf("current turn %d, committed turn %d; want 2 and 0", s.Status.CurrentTurn, s.Status.CommittedTurn)
	}
}

// TestSessionLogHead: the session's status is derived from its calls.
func TestSessionLogHead(t *testing.T) {
	calls := []*toolgatev1alpha1.ToolCall{
		tu.MakeToolCall("ns", "a", "s").At(0, 0).Committed(0).Obj(),
		tu.MakeToolCall("ns", "b", "s").At(0, 1).Admitted(toolgatev1alpha1.ModeParallel).Released(1).Settled(toolgatev1alpha1.OutcomeDenied, "policy_denied").Obj(),
		tu.MakeToolCall("ns", "c", "s").At(1, 0).Admitted(toolgatev1alpha1.ModeExclusive).Released(2).NextStage(string(pipeline.StageExecute)).Obj(),
	}
	s := tu.MakeAgentSession("ns", "s", "p").Obj()
	SetSessionStatus(s, calls)
	st := s.Status
	if st.Counts.Succeeded != 1 || st.Counts.Denied != 1 || st.CommittedTurn != 0 || st.CurrentTurn != 1 || st.NextSequence != 3 {
		t.Errorf("log head %+v", st)
	}
	if st.CommitCursor == nil || st.CommitCursor.Turn != 0 || st.CommitCursor.Index != 1 {
		t.Errorf("commit cursor %+v", st.CommitCursor)
	}
}

// TestCompleteTurnOutlivesItsCalls: a turn recorded complete stays
// complete once every committed call of the session is deleted (by hand,
// or expired by ttlSecondsAfterCommit), and the cursor stays where it was,
// however many times the status is derived again.
func TestCompleteTurnOutlivesItsCalls(t *testing.T) {
	s := tu.MakeAgentSession("ns", "s", "p").Obj()
	SetSessionStatus(s, []*toolgatev1alpha1.ToolCall{tu.MakeToolCall("ns", "a", "s").At(0, 0).Committed(0).Obj()})
	for range 2 {
		SetSessionStatus(s, nil)
		st := s.Status
		if st.CommittedTurn != 0 || st.NextSequence != 1 || st.CommittedCalls != 0 {
			t.Fatalf("committed turn %d, next sequence %d, committed calls %d; want 0, 1, 0", st.CommittedTurn, st.NextSequence, st.CommittedCalls)
		}
		if st.CommitCursor == nil || *st.CommitCursor != (toolgatev1alpha1.CallPosition{Turn: 0, Index: 0}) {
			t.Fatalf("commit cursor %+v, want turn 0 index 0", st.CommitCursor)
		}
	}
}

// TestScreen: one call per (turn, index), one per callID, one size per
// turn; the call already started keeps its place, else the first created.
func TestScreen(t *testing.T) {
	at := func(name string, turn int64, index, size int32, created int) *tu.ToolCallWrapper {
		w := tu.MakeToolCall("ns", name, "s").At(turn, index).Of(size)
		w.CreationTimestamp = metav1.NewTime(time.Unix(int64(created), 0))
		return w
	}
	for _, tt := range []struct {
		name  string
		calls []*tu.ToolCallWrapper
		out   map[string]string
	}{
		{
			name:  "distinct calls all stay",
			calls: []*tu.ToolCallWrapper{at("a", 0, 0, 2, 1), at("b", 0, 1, 2, 2), at("c", 1, 0, 1, 3)},
			out:   map[string]string{},
		},
		{
			name:  "the later of two at one place is refused",
			calls: []*tu.ToolCallWrapper{at("a", 0, 0, 1, 1), at("twin", 0, 0, 1, 2)},
			out:   map[string]string{"twin": "duplicate_call"},
		},
		{
			name:  "a started call keeps its place even if created later",
			calls: []*tu.ToolCallWrapper{at("early", 0, 0, 1, 1), at("running", 0, 0, 1, 2).Admitted(toolgatev1alpha1.ModeParallel)},
			out:   map[string]string{"early": "duplicate_call"},
		},
		{
			name: "a second call with the same callID is refused wherever it is",
			calls: []*tu.ToolCallWrapper{at("a", 0, 0, 2, 1), func() *tu.ToolCallWrapper {
				w := at("same", 0, 1, 2, 2)
				w.Spec.CallID = "call_a"
				return w
			}()},
			out: map[string]string{"same": "duplicate_call"},
		},
		{
			name:  "a size that disagrees with the turn's is refused",
			calls: []*tu.ToolCallWrapper{at("a", 0, 0, 2, 1), at("odd", 0, 1, 3, 2)},
			out:   map[string]string{"odd": "turn_size_mismatch"},
		},
		{
			name:  "a call refused before stays out",
			calls: []*tu.ToolCallWrapper{at("a", 0, 0, 1, 2), at("old", 0, 0, 1, 1).Refused("duplicate_call")},
			out:   map[string]string{"old": "duplicate_call"},
		},
		{
			name: "a nested call runs only within a parent of the session that executes",
			calls: []*tu.ToolCallWrapper{
				at("a", 0, 0, 2, 1).Admitted(toolgatev1alpha1.ModeParallel).NextStage("Execute"), at("b", 0, 1, 2, 2),
				at("sub", 0, 0, 0, 3).Parent("a"), at("early", 0, 0, 0, 4).Parent("b"), at("orphan", 0, 0, 0, 5).Parent("missing"),
				at("started", 0, 0, 0, 6).Parent("b").Admitted(toolgatev1alpha1.ModeParallel),
			},
			out: map[string]string{"early": "invalid_parent", "orphan": "invalid_parent"},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			calls := make([]*toolgatev1alpha1.ToolCall, len(tt.calls))
			for i, w := range tt.calls {
				calls[i] = w.Obj()
			}
			SortModelOrder(calls)
			logged, nested, out := screen(tu.MakeAgentSession("ns", "s", "p").Obj(), calls)
			got := map[string]string{}
			for c, code := range out {
				got[c.Name] = code
			}
			if !maps.Equal(got, tt.out) {
				t.Errorf("kept out %v, want %v", got, tt.out)
			}
			if len(logged)+len(nested)+len(out) != len(calls) {
				t.Errorf("%d logged + %d nested + %d out != %d calls", len(logged), len(nested), len(out), len(calls))
			}
		})
	}
}

// TestDeferredContextsFitTheSessionStatus: however many and however large
// the contexts a turn's calls defer, the session holds a prefix in call
// order within its bounds (count and bytes as stored, far below what one
// object write takes), and says how many it left out.
func TestDeferredContextsFitTheSessionStatus(t *testing.T) {
	for _, tt := range []struct {
		name           string
		calls, per, sz int
	}{
		{"a few small", 3, 2, 10},
		{"many small", 40, 16, 10},
		{"many large (16 KiB each, the API's bound)", 20, 16, 16 << 10},
		{"one call of large ones", 1, 16, 16 << 10},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var calls []*toolgatev1alpha1.ToolCall
			for i := range tt.calls {
				c := tu.MakeToolCall("ns", fmt.Sprintf("c%d", i), "s").At(0, int32(i)).Of(int32(tt.calls)).Committed(int64(i)).Obj()
				c.Spec.CallID = fmt.Sprintf("call-%d", i)
				for j := range tt.per {
					msg := fmt.Sprintf("%d/%d ", i, j) + strings.Repeat("\x01", tt.sz) // escaped when stored: 6 bytes each
					c.Status.Result.Contexts = append(c.Status.Result.Contexts, toolgatev1alpha1.AdditionalContext{Source: toolgatev1alpha1.ContextSourceTool, Message: msg})
				}
				calls = append(calls, c)
			}
			s := tu.MakeAgentSession("ns", "s", "p").Obj()
			SetSessionStatus(s, calls)
			st := s.Status
			stored, err := json.Marshal(st.DeferredContexts)
			if err != nil {
				t.Fatal(err)
			}
			total := tt.calls * tt.per
			if len(st.DeferredContexts) > maxDeferredContexts || len(stored) > maxDeferredContextBytes+2 {
				t.Fatalf("%d contexts, %d bytes stored: beyond the bounds", len(st.DeferredContexts), len(stored))
			}
			if len(st.DeferredContexts)+int(st.DeferredContextsOmitted) != total || (total > 0 && len(st.DeferredContexts) == 0) {
				t.Fatalf("%d kept + %d omitted, want %d in all", len(st.DeferredContexts), st.DeferredContextsOmitted, total)
			}
			for k, c := range st.DeferredContexts {
				if want := fmt.Sprintf("%d/%d ", k/tt.per, k%tt.per); !strings.HasPrefix(c.Message, want) || c.CallID != fmt.Sprintf("call-%d", k/tt.per) {
					t.Fatalf("context %d is %q of %s: not the prefix in call order", k, c.Message[:8], c.CallID)
				}
			}
		})
	}
}

// TestACallSentToAnOldTurnAfterItsCallsExpiredIsRefused: found by the
// model-based test (schedule 1007). Retention deleted every call of a
// session whose turns 0 to 2 committed; a client sends a call of turn 0
// again (index 1: its index 0 is gone too). Planning once waited for the
// turn's missing index for good: the call never had a result. Its turn is
// complete by the session's record, so it is refused as too late and
// released in its place, after the log's last.
func TestACallSentToAnOldTurnAfterItsCallsExpiredIsRefused(t *testing.T) {
	s := tu.MakeAgentSession("ns", "s", "p").Obj()
	s.Status.CommittedTurn, s.Status.NextSequence, s.Status.CommittedCalls = 2, 8, 8
	s.Status.CommitCursor = &toolgatev1alpha1.CallPosition{Turn: 2, Index: 1}
	again := tu.MakeToolCall("ns", "t0-i1", "s").At(0, 1).Of(3).Obj()
	sp := PlanSession(s, []*toolgatev1alpha1.ToolCall{again}, nil)
	work := sp.Work()
	if len(work) != 1 || work[0].Refusal != string(pipeline.CodeTurnClosed) {
		t.Fatalf("work %+v, want the call refused turn_closed", work)
	}
	sch := toolgatev1alpha1.CallSchedule{}
	for _, edit := range work[0].Edits {
		edit(&sch)
	}
	if !sch.Released || sch.CommitSequence == nil || *sch.CommitSequence != 8 {
		t.Errorf("schedule %+v, want released at the log's next place (8)", sch)
	}
}

// TestALateCallAfterAGapIsReleased: a call of turn 1 at index 1 arrives
// after turn 2 started, and its index 0 never comes: it is refused
// (turn_closed) and released in its place; the missing index held it back
// for good before.
func TestALateCallAfterAGapIsReleased(t *testing.T) {
	excl := toolgatev1alpha1.ModeExclusive
	calls := []*toolgatev1alpha1.ToolCall{
		tu.MakeToolCall("ns", "t0", "s").At(0, 0).Committed(0).Obj(),
		tu.MakeToolCall("ns", "late", "s").At(1, 1).Of(2).Obj(),
		tu.MakeToolCall("ns", "t2", "s").At(2, 0).Admitted(excl).Released(1).NextStage(string(pipeline.StageExecute)).Obj(),
	}
	plan := pipeline.PlanTurn(planView(calls, 0), 1, func(int) pipeline.Mode { return pipeline.Exclusive })
	if !slices.Contains(plan.Refuse, 1) || plan.Release != 1 {
		t.Errorf("plan %+v, want the late call refused and released", plan)
	}
}
