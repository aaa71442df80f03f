package controller

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/lifecycle"
	"github.com/toolgate/toolgate/internal/pipeline"
	tu "github.com/toolgate/toolgate/internal/testutil"
	"github.com/toolgate/toolgate/internal/toolcalls"
)

// TestTheFrozenFailureIsDurable: a failure's frozen outcome, written to
// the status before it is announced, is not yet the durable result, and a
// state restored from it reaches the same result by rerunning only
// finalize and observe (never the body); when that rerun now ends
// otherwise (the finalizer fails this time), the result repeats the frozen
// failure (keepAnnounced). No Event is read for any of it.
func TestTheFrozenFailureIsDurable(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC))
	scope := lifecycle.NewScope()
	defer scope.Dispose()
	reg := pipeline.NewRegistry()
	runs, finalizerFails := 0, false
	if err := reg.Register(scope, pipeline.Definition{
		Name: "fails", Parameters: `{"type":"object"}`, Output: pipeline.Output{Schema: `{"type":"string"}`},
		Execute: func(context.Context, pipeline.Arguments, *pipeline.Exec) (any, error) {
			runs++
			return nil, errors.New("the disk is full")
		},
		FinalizeContent: func(content string, _ pipeline.ResultView) string {
			if finalizerFails {
				panic("the finalizer changed")
			}
			return content
		},
	}); err != nil {
		t.Fatal(err)
	}
	if err := reg.OnPreExecute(scope, "policy", 0, func(context.Context, pipeline.Call) pipeline.Decision {
		return pipeline.Decision{Action: pipeline.Allow, Reason: "allow"}
	}); err != nil {
		t.Fatal(err)
	}
	p := pipeline.New(reg, pipeline.Options{Clock: clk, PollInterval: time.Second})
	stepTo := func(st *pipeline.State, next pipeline.Stage) {
		t.Helper()
		for i := 0; st.Next != next; i++ {
			if i > 12 || st.Done() {
				t.Fatalf("never reached %s: at %s", next, st.Next)
			}
			p.Step(context.Background(), st)
		}
	}
	tc := tu.MakeToolCall("ns", "c", "s").Tool("fails", `{}`).Admitted(toolgatev1alpha1.ModeExclusive).Released(0).Obj()
	st := toolcalls.StateOf(tc)
	stepTo(st, pipeline.StageResult)
	frozen := *st.Result
	records := len(st.Records)

	toolcalls.WriteState(tc, st, clk.Now())
	data, err := json.Marshal(tc)
	if err != nil {
		t.Fatal(err)
	}
	back := &toolgatev1alpha1.ToolCall{}
	if err := json.Unmarshal(data, back); err != nil {
		t.Fatal(err)
	}
	if back.Status.Result != nil || back.Status.Phase == toolgatev1alpha1.PhaseCommitted || back.Final() {
		t.Fatalf("the frozen failure was written as the durable result (phase %s)", back.Status.Phase)
	}
	f := toolcalls.FrozenOf(back)
	if f == nil || f.Code != frozen.Code || f.Message != frozen.Message {
		t.Fatalf("the status froze %+v, want %s: %s", f, frozen.Code, frozen.Message)
	}
	if toolcalls.FrozenOf(tu.MakeToolCall("ns", "d", "s").Admitted(toolgatev1alpha1.ModeExclusive).NextStage(string(pipeline.StageFinalize)).Obj()) != nil {
		t.Error("a call waiting at finalize that never observed its outcome reads as frozen")
	}

	for _, tt := range []struct {
		name     string
		finFails bool
	}{{"the rerun agrees", false}, {"the finalizer now fails", true}} {
		t.Run(tt.name, func(t *testing.T) {
			finalizerFails = tt.finFails
			in := back.DeepCopy()
			s := &callScope{tc: in, st: toolcalls.StateOf(in), frozen: toolcalls.FrozenOf(in)}
			if s.st.Next != pipeline.StageFinalize {
				t.Fatalf("restored at %s, want %s", s.st.Next, pipeline.StageFinalize)
			}
			stepTo(s.st, pipeline.StageResult)
			keepAnnounced(context.Background(), s)
			if runs != 1 {
				t.Errorf("the body ran %d times", runs)
			}
			if got := s.st.Result; got.Code != frozen.Code || got.Outcome != frozen.Outcome || !strings.Contains(got.Message, "the disk is full") {
				t.Errorf("the result is %s (%s: %s), want the frozen %s (%s)", got.Outcome, got.Code, got.Message, frozen.Outcome, frozen.Code)
			}
			if len(s.st.Records) != records {
				t.Errorf("%d stage records after the rerun, want %d (finalize and observe once each)", len(s.st.Records), records)
			}
		})
	}
}
