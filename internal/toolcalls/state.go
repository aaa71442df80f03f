package toolcalls

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/providers/approval"
)

// The pipeline's State lives in ToolCall.status: the visible part in
// token, executionMode, stages, attempt, startTime and result; the rest in
// checkpoint. StateOf and WriteState translate a whole state both ways;
// the Planner reads only a call's place from the status (NextStage here,
// TurnCallOf in Planner.go).

// RequestOf is the pipeline request of a call: its immutable identity.
func RequestOf(tc *toolgatev1alpha1.ToolCall) pipeline.Request {
	r := pipeline.Request{
		CallID: tc.Spec.CallID, Tool: tc.Spec.Tool, Arguments: tc.Spec.Arguments,
		Requester: tc.Spec.Requester, Session: tc.Spec.SessionRef.Name,
		Turn: tc.Spec.Turn, Index: int(tc.Spec.Index),
	}
	if tc.Spec.ParentRef != nil {
		r.Parent = tc.Spec.ParentRef.Name
	}
	return r
}

// StateOf rebuilds the pipeline state from a call's status.
func StateOf(tc *toolgatev1alpha1.ToolCall) *pipeline.State {
	st := pipeline.NewState(RequestOf(tc))
	s := &tc.Status
	st.Token = s.Token
	st.Mode = pipeline.Mode(s.Schedule.ExecutionMode)
	st.Attempt = int(s.Attempt)
	st.Sandbox = s.Sandbox
	st.AttemptStartedAt = microTimeOf(s.StartTime)
	for _, r := range s.Stages {
		st.Records = append(st.Records, pipeline.Record{Stage: pipeline.Stage(r.Stage), Verdict: r.Verdict, Reason: r.Reason, Time: r.Time.Time})
	}
	if cp := s.Checkpoint; cp != nil {
		if cp.Next != "" {
			st.Next = pipeline.Stage(cp.Next)
		}
		st.AskedAt, st.AskDeadline = microTimeOf(cp.AskedAt), microTimeOf(cp.AskDeadline)
		st.AskReason, st.AskText = cp.AskReason, cp.AskMessage
		st.AskQuorum = approval.QuorumOf(cp.AskApprovers)
		st.NotBefore = microTimeOf(cp.NotBefore)
		if f := cp.Retried; f != nil {
			st.Retried = &pipeline.Failure{Code: pipeline.Code(f.Code), Message: f.Message}
		}
		if b := cp.Body; b != nil {
			st.Body = &pipeline.Body{Value: b.Value, Content: b.Content, Contexts: contextsIn(b.Contexts), Truncated: b.Truncated}
		}
		if cp.BodyHeld {
			// The output is with the sandbox (see WriteState): the execute
			// stage runs again to collect it. The attempt re-attaches, so
			// nothing runs twice; its record is written again when it has.
			st.Next = pipeline.StageExecute
			st.Records = trimTrailing(st.Records, pipeline.StageExecute)
		}
		if f := cp.Failure; f != nil {
			st.Failure = &pipeline.Failure{Code: pipeline.Code(f.Code), Message: f.Message}
		}
		st.Decisions = contextsIn(cp.Decisions)
		if FrozenOf(tc) != nil {
			// The frozen failure (see WriteState): finalize and observe run
			// again on it, so their records are written again when they
			// have.
			st.Records = trimTrailing(st.Records, pipeline.StageObserve, pipeline.StageFinalize)
		}
	}
	if res := s.Result; res != nil {
		st.Result = &pipeline.Result{
			Token: s.Token, CallID: tc.Spec.CallID, Tool: tc.Spec.Tool,
			Outcome: pipeline.Outcome(res.Outcome), Code: pipeline.Code(res.ErrorCode), Message: res.Message,
			Value: res.Value, Content: res.Content, Contexts: contextsIn(res.Contexts), Truncated: res.Truncated,
		}
	}
	return st
}

// WriteState stores st in the call's status. The result, once written, is
// never rewritten. Every time is stored at the precision the API keeps
// (microTime, wholeTime), so a status that did not change compares equal
// to the one read back and costs no write.
func WriteState(tc *toolgatev1alpha1.ToolCall, st *pipeline.State, now time.Time) {
	s := &tc.Status
	s.Token = st.Token
	s.Attempt = int32(st.Attempt)
	s.Sandbox = st.Sandbox
	if !st.AttemptStartedAt.IsZero() {
		s.StartTime = microTime(st.AttemptStartedAt)
	}
	s.Stages = s.Stages[:0]
	for _, r := range st.Records {
		s.Stages = append(s.Stages, toolgatev1alpha1.StageRecord{Stage: string(r.Stage), Verdict: r.Verdict, Reason: r.Reason, Time: wholeTime(r.Time)})
	}
	cp := &toolgatev1alpha1.PipelineCheckpoint{
		Next: string(st.Next), AskReason: st.AskReason, AskMessage: st.AskText, AskApprovers: approval.ApproversOf(st.AskQuorum),
		AskedAt: microTime(st.AskedAt), AskDeadline: microTime(st.AskDeadline), NotBefore: microTime(st.NotBefore), Decisions: contextsOut(st.Decisions),
	}
	switch b := st.Body; {
	case b != nil && st.Next == pipeline.StagePostExecute:
		// No post-execute rule has passed this output yet: it never goes
		// where the agent (or any reader of the call) could see it before
		// a Block rule withholds it. The sandbox keeps it until the call
		// settles, and it is collected again once the call is released.
		cp.BodyHeld = true
	case b != nil:
		cp.Body = &toolgatev1alpha1.CheckpointBody{Value: b.Value, Content: b.Content, Contexts: contextsOut(b.Contexts), Truncated: b.Truncated}
	}
	if f := st.Failure; f != nil {
		cp.Failure = &toolgatev1alpha1.CheckpointFailure{Code: string(f.Code), Message: f.Message}
	}
	if f := st.Retried; f != nil {
		cp.Retried = &toolgatev1alpha1.CheckpointFailure{Code: string(f.Code), Message: f.Message}
	}
	if r := st.Result; r != nil && !st.Done() && r.Outcome != pipeline.Succeeded {
		// The frozen failure, written before it is announced live: a
		// settled failure before finalization (a failure has no body), its
		// finalize and observe records after it. A successor reruns
		// finalize and observe from it, never the body, and its result
		// repeats it (FrozenOf, keepAnnounced).
		cp.Next, cp.Body, cp.BodyHeld = string(pipeline.StageFinalize), nil, false
		cp.Failure = &toolgatev1alpha1.CheckpointFailure{Code: string(r.Code), Message: r.Message}
	}
	s.Checkpoint = cp
	if st.Done() && s.Result == nil {
		r := st.Result
		s.Result = &toolgatev1alpha1.ToolCallResult{
			Outcome: toolgatev1alpha1.Outcome(r.Outcome), ErrorCode: string(r.Code), Message: r.Message,
			Value: r.Value, Content: r.Content, Contexts: contextsOut(r.Contexts), Truncated: r.Truncated, SettledAt: wholeTime(now),
		}
	}
	if st.Done() {
		// The result holds everything; the checkpoint is no longer needed.
		s.Checkpoint = nil
	}
	// Only a call with a place in the log commits (a nested call has none).
	s.Phase = phaseOf(st, s.Schedule.Released && s.Schedule.CommitSequence != nil)
	setCallConditions(tc, now)
}

// setCallConditions derives the call's conditions from its phase and
// result, so they change only when those do (no extra write).
func setCallConditions(tc *toolgatev1alpha1.ToolCall, now time.Time) {
	s := &tc.Status
	committed := metav1.Condition{Type: toolgatev1alpha1.ToolCallConditionCommitted, Status: metav1.ConditionUnknown, Reason: string(s.Phase)}
	succeeded := metav1.Condition{Type: toolgatev1alpha1.ToolCallConditionSucceeded, Status: metav1.ConditionUnknown, Reason: string(s.Phase)}
	final := metav1.Condition{Type: toolgatev1alpha1.ToolCallConditionFinal, Status: metav1.ConditionUnknown, Reason: string(s.Phase)}
	if res := s.Result; res != nil {
		switch {
		case s.Phase == toolgatev1alpha1.PhaseCommitted:
			committed.Status, committed.Reason = metav1.ConditionTrue, toolgatev1alpha1.ToolCallReasonCommitted
			if seq := s.Schedule.CommitSequence; seq != nil {
				committed.Message = fmt.Sprintf("committed at sequence %d", *seq)
			}
		case tc.Spec.ParentRef != nil && !OutOfLog(s.Schedule.Refusal):
			committed.Status, committed.Reason = metav1.ConditionFalse, toolgatev1alpha1.ToolCallReasonNotCommitted
			committed.Message = "a nested call has no place in the session's log; its parent's result does"
		case OutOfLog(s.Schedule.Refusal):
			committed.Status, committed.Reason = metav1.ConditionFalse, toolgatev1alpha1.ToolCallReasonNotCommitted
			committed.Message = "the session kept the call out of its log (" + s.Schedule.Refusal + ")"
		default:
			committed.Status, committed.Reason = metav1.ConditionFalse, toolgatev1alpha1.ToolCallReasonNotCommitted
			committed.Message = "the call settled without a session to commit to"
		}
		// A result is final once written: a call in the log is released
		// (and so committed) before it settles.
		final.Status, final.Reason, final.Message = metav1.ConditionTrue, committed.Reason, committed.Message
		succeeded.Status, succeeded.Reason = metav1.ConditionFalse, string(res.Outcome)
		succeeded.Message = res.ErrorCode
		if res.Outcome == toolgatev1alpha1.OutcomeSucceeded {
			succeeded.Status = metav1.ConditionTrue
		}
	}
	for _, c := range []metav1.Condition{final, committed, succeeded} {
		c.ObservedGeneration = tc.Generation
		c.LastTransitionTime = metav1.NewTime(now)
		meta.SetStatusCondition(&s.Conditions, c)
	}
}

// phaseOf summarizes a state for people. A released call's result is
// committed as it is written: the session released it because every
// earlier call had committed, and gave it its place in the log.
func phaseOf(st *pipeline.State, released bool) toolgatev1alpha1.ToolCallPhase {
	switch {
	case st.Done() && released:
		return toolgatev1alpha1.PhaseCommitted
	case st.Done():
		return toolgatev1alpha1.PhaseSettled
	case st.Next == pipeline.StageApproval:
		return toolgatev1alpha1.PhaseAwaitingApproval
	case st.Next == pipeline.StageCall || st.Next == pipeline.StagePreExecute:
		return toolgatev1alpha1.PhasePending
	default:
		return toolgatev1alpha1.PhaseRunning
	}
}

// FrozenOf is the failure a call's status holds as frozen: written before
// it was announced live (WriteState), not yet as the durable result. A
// settled failure waiting at finalize whose last record is observe is
// one; nil otherwise.
func FrozenOf(tc *toolgatev1alpha1.ToolCall) *pipeline.Failure {
	cp, stages := tc.Status.Checkpoint, tc.Status.Stages
	if tc.Status.Result != nil || cp == nil || cp.Failure == nil || cp.Next != string(pipeline.StageFinalize) ||
		len(stages) == 0 || stages[len(stages)-1].Stage != string(pipeline.StageObserve) {
		return nil
	}
	return &pipeline.Failure{Code: pipeline.Code(cp.Failure.Code), Message: cp.Failure.Message}
}

// trimTrailing drops the records of stages at the end of recs, in the
// order given from the last.
func trimTrailing(recs []pipeline.Record, stages ...pipeline.Stage) []pipeline.Record {
	for _, stage := range stages {
		if n := len(recs); n > 0 && recs[n-1].Stage == stage {
			recs = recs[:n-1]
		}
	}
	return recs
}

// NextStage is where a call stands in the pipeline, from its status.
func NextStage(c *toolgatev1alpha1.ToolCall) pipeline.Stage {
	switch {
	case c.Status.Checkpoint != nil && c.Status.Checkpoint.Next != "":
		return pipeline.Stage(c.Status.Checkpoint.Next)
	case c.Status.Result != nil:
		return pipeline.StageDone
	}
	return pipeline.StageCall
}

// Deadlines are measured from microTime instants (askedAt, notBefore,
// startTime): a whole-second metav1.Time would make them fire up to a
// second early once read back. Records and settledAt are for people and
// stay whole seconds.

func microTimeOf(t *metav1.MicroTime) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.Time
}

// microTime is t as the API keeps a MicroTime (nil when zero).
func microTime(t time.Time) *metav1.MicroTime {
	if t.IsZero() {
		return nil
	}
	m := metav1.NewMicroTime(t.Truncate(time.Microsecond))
	return &m
}

// wholeTime is t as the API keeps a metav1.Time.
func wholeTime(t time.Time) metav1.Time { return metav1.NewTime(t.Truncate(time.Second)) }

func contextsIn(in []toolgatev1alpha1.AdditionalContext) []pipeline.Context {
	if len(in) == 0 {
		return nil
	}
	out := make([]pipeline.Context, len(in))
	for i, c := range in {
		out[i] = pipeline.Context{Source: c.Source, Rule: c.Rule, Message: c.Message}
	}
	return out
}

func contextsOut(in []pipeline.Context) []toolgatev1alpha1.AdditionalContext {
	if len(in) == 0 {
		return nil
	}
	out := make([]toolgatev1alpha1.AdditionalContext, len(in))
	for i, c := range in {
		out[i] = toolgatev1alpha1.AdditionalContext{Source: c.Source, Rule: c.Rule, Message: c.Message}
	}
	return out
}
