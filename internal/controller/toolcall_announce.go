package controller

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

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

// announceLive is the live tools/result of the seed: once the observe
// stage has run, a failure's frozen outcome is written to the call's
// status (toolcalls.WriteState keeps it as a settled failure before finalization)
// and then announced (its Settled Event), before the durable result is
// written. The durable result repeats what the status froze: a process
// that finds a frozen failure left by a predecessor that stopped before
// writing the result reruns only finalize and observe from it, and the
// result keeps the frozen code (keepAnnounced). No Event is ever read to
// decide anything: Events are best effort and expire.
// A success is counted once its result is durable (announceDurable): its
// only observer is a counter, and a count made before a crash that then
// loses the body's work would tell of an outcome the call never commits.
func (r *ToolCallReconciler) announceLive(ctx context.Context, s *callScope) error {
	if s.st.Next != pipeline.StageResult || s.st.Result == nil {
		return nil
	}
	keepAnnounced(ctx, s)
	res := s.st.Result
	if res.Outcome == pipeline.Succeeded {
		return nil
	}
	if s.frozen == nil {
		if err := r.persist(ctx, s); err != nil {
			return err
		}
		s.frozen = &pipeline.Failure{Code: res.Code, Message: res.Message}
	}
	r.announce(ctx, s.tc, settlement{outcome: toolgatev1alpha1.Outcome(res.Outcome), code: string(res.Code), at: r.Clock.Now()})
	return nil
}

// announceDurable counts a success once its result is written. A crash
// between the write and the count loses the count, never the result.
func (r *ToolCallReconciler) announceDurable(ctx context.Context, tc *toolgatev1alpha1.ToolCall) {
	if res := tc.Status.Result; res != nil && res.Outcome == toolgatev1alpha1.OutcomeSucceeded {
		r.announce(ctx, tc, durableSettlement(res))
	}
}

// codeAnnotation carries a Settled Event's code, for people and tools
// that read Events; toolgate never reads it back.
const codeAnnotation = "toolgate.dev/code"

// keepAnnounced makes the result the failure the call's status froze
// before it was announced. The rerun from it (finalize and observe) reaches
// the same code unless the tool's finalizer now fails, or its profile
// changed it; the announcement is what the durable result repeats.
func keepAnnounced(ctx context.Context, s *callScope) {
	f := s.frozen
	if f == nil || f.Code == s.st.Result.Code {
		return
	}
	log.FromContext(ctx).Info("announced outcome kept", "call", s.tc.Name, "code", f.Code, "rerun", orNone(string(s.st.Result.Code)))
	s.st.FailResult(f.Code, f.Message)
}

// announce counts the call's outcome in the metrics and, for an outcome
// other than success, emits its Settled Event (Warning), which carries the
// code in an annotation (for people and tools that read Events): someone
// may act on a failure,
// nobody on a success, which would cost a write per call.
// A failure is counted once per outcome: the Event's name is derived from
// the call and the outcome, so a second manager (or this one after a
// restart) finds it already exists and counts nothing. A success is
// counted once per process, after its result is durable. Only a result
// the API server refused (result_rejected) differs from a failure
// announced live; it is then announced too.
// Events are for people, and no result depends on one: a failure to
// create one is logged, and the metrics still count the call.
func (r *ToolCallReconciler) announce(ctx context.Context, tc *toolgatev1alpha1.ToolCall, res settlement) {
	first := false
	r.mem.with(tc, func(m *memo) { first, m.announced = !m.announced, true })
	if !first || r.Clock.Since(res.at) > announceWindow {
		return
	}
	if res.outcome == toolgatev1alpha1.OutcomeSucceeded || emit(ctx, r.Client, r.Clock.Now(), regardingCall(tc), eventName(tc, strings.ToLower(string(res.outcome))),
		corev1.EventTypeWarning, EventSettled, "Settle", fmt.Sprintf("outcome %s, code %s", res.outcome, orNone(res.code)), map[string]string{codeAnnotation: res.code}) {
		callsSettled.WithLabelValues(toolLabel(tc), string(res.outcome), orNone(res.code)).Inc()
		callDuration.WithLabelValues(string(res.outcome)).Observe(res.at.Sub(tc.CreationTimestamp.Time).Seconds())
	}
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

// observeStages counts the boundaries a write made durable, from the
// state's records (precise times; the status keeps whole seconds).
func (r *ToolCallReconciler) observeStages(s *callScope, before int) {
	recs := s.st.Records
	times := r.stampsOf(s.tc, recs)
	r.traceBoundaries(s.tc, s.st, times, before)
	for i := min(before, len(recs)); i < len(recs); i++ {
		rec := recs[i]
		stageBoundaries.WithLabelValues(string(rec.Stage), rec.Verdict).Inc()
		if i > 0 && !times[i].Before(times[i-1]) {
			stageSeconds.WithLabelValues(string(rec.Stage)).Observe(times[i].Sub(times[i-1]).Seconds())
		}
		if rec.Stage == pipeline.StageApproval && !s.st.AskedAt.IsZero() {
			approvalWait.WithLabelValues(rec.Verdict).Observe(rec.Time.Sub(s.st.AskedAt).Seconds())
		}
	}
}
