package toolcalls

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/lifecycle"
	"github.com/toolgate/toolgate/internal/pipeline"
	tu "github.com/toolgate/toolgate/internal/testutil"
)

// pendingApprover never answers and remembers the deadline it was told.
type pendingApprover struct{ deadlines []time.Time }

func (a *pendingApprover) Approve(_ context.Context, q pipeline.Question) (pipeline.Answer, string) {
	a.deadlines = append(a.deadlines, q.Deadline)
	return pipeline.AnswerPending, ""
}

// TestDeadlinesSurviveTheStatus: every deadline measured from an instant
// the status keeps (the question's askedAt, the retry's notBefore, the
// attempt's startTime) is as exact after the status went through the API
// (JSON, as the API server stores it) as it was in memory, when the instant
// falls late in a second: nothing fires early on a restored state.
func TestDeadlinesSurviveTheStatus(t *testing.T) {
	start := time.Date(2026, 11, 30, 12, 0, 0, 900_000_000, time.UTC) // late in a second
	clk := clocktesting.NewFakePassiveClock(start)
	scope := lifecycle.NewScope()
	defer scope.Dispose()
	reg := pipeline.NewRegistry()
	def := func(name string, edit func(*pipeline.Definition)) {
		d := pipeline.Definition{
			Name: name, Parameters: `{"type":"object"}`, Output: pipeline.Output{Schema: `{"type":"string"}`},
			Execute: func(context.Context, pipeline.Arguments, *pipeline.Exec) (any, error) { return "ran", nil },
		}
		edit(&d)
		if err := reg.Register(scope, d); err != nil {
			t.Fatal(err)
		}
	}
	def("ask", func(*pipeline.Definition) {})
	def("flaky", func(d *pipeline.Definition) {
		d.Idempotent, d.MaxAttempts, d.RetryBackoff = true, 2, 2*time.Second
		d.Execute = func(context.Context, pipeline.Arguments, *pipeline.Exec) (any, error) {
			return nil, errors.New("flaky")
		}
	})
	def("slow", func(d *pipeline.Definition) {
		// Measured by the pipeline from the attempt's persisted start.
		d.Reattach, d.Timeout = true, 5*time.Second
		d.Execute = func(ctx context.Context, _ pipeline.Arguments, _ *pipeline.Exec) (any, error) {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			return nil, pipeline.Pending
		}
	})
	if err := reg.OnPreExecute(scope, "policy", 0, func(_ context.Context, c pipeline.Call) pipeline.Decision {
		if c.Tool == "ask" {
			return pipeline.Decision{Action: pipeline.Ask, Reason: "ask"}
		}
		return pipeline.Decision{Action: pipeline.Allow, Reason: "allow"}
	}); err != nil {
		t.Fatal(err)
	}
	approver := &pendingApprover{}
	p := pipeline.New(reg, pipeline.Options{Clock: clk, Approver: approver, ApprovalTimeout: 10 * time.Second, PollInterval: time.Second})

	// restored is st after its status went through the API server.
	restored := func(tc *toolgatev1alpha1.ToolCall, st *pipeline.State) *pipeline.State {
		t.Helper()
		WriteState(tc, st, clk.Now())
		data, err := json.Marshal(tc)
		if err != nil {
			t.Fatal(err)
		}
		back := &toolgatev1alpha1.ToolCall{}
		if err := json.Unmarshal(data, back); err != nil {
			t.Fatal(err)
		}
		*tc = *back
		return StateOf(tc)
	}
	stepUntil := func(st *pipeline.State, next pipeline.Stage) {
		t.Helper()
		for i := 0; st.Next != next; i++ {
			if i > 10 || st.Done() {
				t.Fatalf("never reached %s: at %s", next, st.Next)
			}
			p.Step(context.Background(), st)
		}
	}
	call := func(tool string) *toolgatev1alpha1.ToolCall {
		return tu.MakeToolCall("ns", tool, "s").Tool(tool, `{}`).Admitted(toolgatev1alpha1.ModeExclusive).Released(0).Obj()
	}

	t.Run("the approval deadline", func(t *testing.T) {
		clk.SetTime(start)
		tc := call("ask")
		st := StateOf(tc)
		stepUntil(st, pipeline.StageApproval)
		p.Step(context.Background(), st) // asks: no answer yet
		deadline := start.Add(10 * time.Second)
		clk.SetTime(deadline.Add(-50 * time.Millisecond))
		st = restored(tc, st)
		if !st.AskDeadline.Equal(deadline) {
			t.Fatalf("the deadline asked with came back as %s, want %s", st.AskDeadline.Format(time.RFC3339Nano), deadline.Format(time.RFC3339Nano))
		}
		if p.Step(context.Background(), st); st.Next != pipeline.StageApproval {
			t.Fatalf("the question expired %s before its deadline: %s", clk.Since(deadline).Abs(), st.Failure.Code)
		}
		for _, d := range approver.deadlines {
			if !d.Equal(deadline) {
				t.Errorf("the approver was told the deadline %s, want %s", d.Format(time.RFC3339Nano), deadline.Format(time.RFC3339Nano))
			}
		}
		clk.SetTime(deadline)
		st = restored(tc, st)
		if p.Step(context.Background(), st); st.Failure == nil || st.Failure.Code != pipeline.CodeApprovalExpired {
			t.Fatalf("at its deadline the question did not expire: %s", st.Next)
		}
	})

	t.Run("the retry backoff", func(t *testing.T) {
		clk.SetTime(start)
		tc := call("flaky")
		st := StateOf(tc)
		stepUntil(st, pipeline.StageExecute)
		p.Step(context.Background(), st) // attempt 1 fails; retried after the backoff
		notBefore := start.Add(2 * time.Second)
		clk.SetTime(notBefore.Add(-50 * time.Millisecond))
		st = restored(tc, st)
		if p.Step(context.Background(), st); st.Attempt != 1 {
			t.Fatalf("attempt %d dispatched %s before its backoff ended", st.Attempt, clk.Since(notBefore).Abs())
		}
		clk.SetTime(notBefore)
		st = restored(tc, st)
		if p.Step(context.Background(), st); st.Attempt != 2 {
			t.Fatalf("attempt 2 not dispatched once the backoff ended")
		}
	})

	t.Run("the timeout from the attempt's start", func(t *testing.T) {
		clk.SetTime(start)
		tc := call("slow")
		st := StateOf(tc)
		stepUntil(st, pipeline.StageExecute)
		st = restored(tc, st)
		if !st.AttemptStartedAt.Equal(start) {
			t.Errorf("the attempt started at %s, restored as %s", start.Format(time.RFC3339Nano), st.AttemptStartedAt.Format(time.RFC3339Nano))
		}
		deadline := start.Add(5 * time.Second)
		clk.SetTime(deadline.Add(-50 * time.Millisecond))
		if p.Step(context.Background(), st); st.Next != pipeline.StageExecute {
			t.Fatalf("the body timed out %s before its deadline: %s", clk.Since(deadline).Abs(), st.Failure.Code)
		}
		clk.SetTime(deadline)
		st = restored(tc, st)
		if p.Step(context.Background(), st); st.Failure == nil || st.Failure.Code != pipeline.CodeTimeout {
			t.Fatalf("at its deadline the body did not time out: %s", st.Next)
		}
	})
}

// TestFinalCondition: Final turns True for every call whose result is
// final, whatever its outcome and whether it is in the log, so an agent
// can wait on one condition (kubectl wait --for=condition=Final); it is
// Unknown while the call is in flight.
func TestFinalCondition(t *testing.T) {
	now := time.Now()
	for _, tt := range []struct {
		name   string
		call   *tu.ToolCallWrapper
		status metav1.ConditionStatus
		reason string
	}{
		{"in flight", tu.MakeToolCall("ns", "a", "s").Admitted(toolgatev1alpha1.ModeParallel).NextStage(string(pipeline.StageExecute)), metav1.ConditionUnknown, string(toolgatev1alpha1.PhaseRunning)},
		{"committed, succeeded", tu.MakeToolCall("ns", "a", "s").Committed(0), metav1.ConditionTrue, toolgatev1alpha1.ToolCallReasonCommitted},
		{"committed, denied", tu.MakeToolCall("ns", "a", "s").Admitted(toolgatev1alpha1.ModeExclusive).Released(0).Settled(toolgatev1alpha1.OutcomeDenied, "policy_denied"), metav1.ConditionTrue, toolgatev1alpha1.ToolCallReasonCommitted},
		{"refused out of the log", tu.MakeToolCall("ns", "a", "s").Refused(string(pipeline.CodeDuplicateCall)).Settled(toolgatev1alpha1.OutcomeFailed, "duplicate_call"), metav1.ConditionTrue, toolgatev1alpha1.ToolCallReasonNotCommitted},
		{"nested", tu.MakeToolCall("ns", "a", "s").Parent("p").Admitted(toolgatev1alpha1.ModeParallel).Settled(toolgatev1alpha1.OutcomeSucceeded, ""), metav1.ConditionTrue, toolgatev1alpha1.ToolCallReasonNotCommitted},
		{"without a session", tu.MakeToolCall("ns", "a", "s").Settled(toolgatev1alpha1.OutcomeFailed, "session_gone"), metav1.ConditionTrue, toolgatev1alpha1.ToolCallReasonNotCommitted},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tc := tt.call.Obj()
			setCallConditions(tc, now)
			c := meta.FindStatusCondition(tc.Status.Conditions, toolgatev1alpha1.ToolCallConditionFinal)
			if c == nil {
				t.Fatal("no Final condition")
			}
			if c.Status != tt.status || c.Reason != tt.reason {
				t.Errorf("Final %s (%s), want %s (%s)", c.Status, c.Reason, tt.status, tt.reason)
			}
			if final := c.Status == metav1.ConditionTrue; final != tc.Final() {
				t.Errorf("Final condition %s, but ToolCall.Final() is %t", c.Status, tc.Final())
			}
		})
	}
}
