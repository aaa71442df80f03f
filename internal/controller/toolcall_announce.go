package controller

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/providers/approval"
)

// What a call tells people: its outcome in the metrics and, when it did
// not succeed, a Settled Event; the boundaries it crossed and how long
// each took; and what an approval provider is asked about it.

// announceWindow is how long after settling a call's outcome is still
// announced by a manager that did not see it settle: long enough to cover a
// crash right after the final write, short enough that a restart does not
// re-announce old calls.
const announceWindow = 10 * time.Minute

// settlement is what announce says of a call's outcome.
type settlement struct {
	outcome toolgatev1alpha1.Outcome
	code    string
	at      time.Time
}

// durableSettlement is the settlement of a call's written result.
func durableSettlement(res *toolgatev1alpha1.ToolCallResult) settlement {
	return settlement{outcome: res.Outcome, code: res.ErrorCode, at: res.SettledAt.Time}
}

// announceLive is the live tools/result of the seed: once the observe stage
// has run, the frozen outcome is announced before the durable result is
// written. A crash between the two repeats the stages from the last
// boundary, and a failure's Event, named after the call, is not created
// twice.
func (r *ToolCallReconciler) announceLive(ctx context.Context, s *callScope) {
	if s.st.Next != pipeline.StageResult || s.st.Result == nil {
		return
	}
	res := s.st.Result
	r.announce(ctx, s.tc, settlement{outcome: toolgatev1alpha1.Outcome(res.Outcome), code: string(res.Code), at: r.Clock.Now()})
}

// announce counts the call's outcome in the metrics and, for an outcome
// other than success, emits its Settled Event (Warning): someone may act
// on a failure, nobody on a success, which would cost a write per call.
// A failure is counted once per outcome: the Event's name is derived from
// the call and the outcome, so a second manager (or this one after a
// restart) finds it already exists and counts nothing. A success is
// counted once per process; only a crash between the live and the durable
// result lets the next process count it again. Only when such a crash
// loses the body's work (the process sandbox, a pod deleted by someone
// else) can the durable outcome differ from the live one; it is then
// announced too.
// Events are for people and the result does not depend on one: a failure
// to create one is logged, and the metrics still count the call.
func (r *ToolCallReconciler) announce(ctx context.Context, tc *toolgatev1alpha1.ToolCall, res settlement) {
	key := client.ObjectKeyFromObject(tc)
	if uid, done := r.announced.Load(key); done && uid == tc.UID {
		return
	}
	if r.Clock.Since(res.at) > announceWindow {
		r.announced.Store(key, tc.UID)
		return
	}
	if res.outcome == toolgatev1alpha1.OutcomeSucceeded || emit(ctx, r.Client, r.Clock.Now(), regardingCall(tc), eventName(tc, strings.ToLower(string(res.outcome))),
		corev1.EventTypeWarning, EventSettled, "Settle", fmt.Sprintf("outcome %s, code %s", res.outcome, orNone(res.code))) {
		callsSettled.WithLabelValues(toolLabel(tc), string(res.outcome), orNone(res.code)).Inc()
		callDuration.WithLabelValues(string(res.outcome)).Observe(res.at.Sub(tc.CreationTimestamp.Time).Seconds())
	}
	r.announced.Store(key, tc.UID)
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// subjectOf is what an approval provider is asked about: the call, named
// with its session.
func subjectOf(tc *toolgatev1alpha1.ToolCall) approval.Subject {
	return approval.Subject{Owner: tc, Session: tc.Spec.SessionRef.Name}
}

// askedApproval reports whether pre-execute asked a person about the call.
func askedApproval(tc *toolgatev1alpha1.ToolCall) bool {
	for _, r := range tc.Status.Stages {
		if r.Stage == string(pipeline.StagePreExecute) && r.Verdict == pipeline.VerdictAsk {
			return true
		}
	}
	return false
}

// observeStages counts the boundaries a write made durable, from the
// state's records (precise times; the status keeps whole seconds).
func (r *ToolCallReconciler) observeStages(s *callScope, before int) {
	recs := s.st.Records
	for i := min(before, len(recs)); i < len(recs); i++ {
		rec := recs[i]
		stageBoundaries.WithLabelValues(string(rec.Stage), rec.Verdict).Inc()
		if i > 0 && !rec.Time.Before(recs[i-1].Time) {
			stageSeconds.WithLabelValues(string(rec.Stage)).Observe(rec.Time.Sub(recs[i-1].Time).Seconds())
		}
		if rec.Stage == pipeline.StageApproval && !s.st.AskedAt.IsZero() {
			approvalWait.WithLabelValues(rec.Verdict).Observe(rec.Time.Sub(s.st.AskedAt).Seconds())
		}
	}
}
