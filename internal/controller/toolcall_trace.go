package controller

import (
	"time"

	"go.opentelemetry.io/otel/attribute"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/tracing"
)

// callTrace is the call's trace (internal/tracing): under the agent's
// span when the call carries its traceparent.
func callTrace(tc *toolgatev1alpha1.ToolCall) tracing.Call {
	return tracing.CallOf(string(tc.UID), tc.Annotations[tracing.AnnotationTraceparent])
}

// traceBoundaries writes a span per boundary this reconcile crossed, from
// the boundary before it, and the call's root span when the boundary is
// its durable result: from the manager admitting the call (its first
// boundary; the API server keeps the creation time to the second) to the
// result. Identities and codes, never arguments or content.
func (r *ToolCallReconciler) traceBoundaries(tc *toolgatev1alpha1.ToolCall, st *pipeline.State, times []time.Time, before int) {
	recs := st.Records
	if !tracing.Active() || before >= len(recs) {
		return
	}
	c := callTrace(tc)
	for i := max(before, 1); i < len(recs); i++ {
		rec, at := recs[i], times[i]
		c.Boundary(string(rec.Stage), earlier(times[i-1], at), at,
			attribute.String("toolgate.stage", string(rec.Stage)), attribute.String("toolgate.verdict", rec.Verdict),
			attribute.String("toolgate.reason", rec.Reason))
		if rec.Stage == pipeline.StageResult {
			c.Settled(earlier(times[0], at), at, callAttributes(tc, st, rec.Verdict)...)
			r.mem.with(tc, func(m *memo) { m.resultAt = at })
		}
	}
}

// traceWrite writes the span of one status write that made boundaries
// durable: how long the API server took, named by the last boundary.
func traceWrite(tc *toolgatev1alpha1.ToolCall, st *pipeline.State, start, end time.Time) {
	if !tracing.Active() || len(st.Records) == 0 {
		return
	}
	callTrace(tc).Boundary("status write", start, end,
		attribute.String("toolgate.stage", string(st.Records[len(st.Records)-1].Stage)), attribute.String("toolgate.phase", string(tc.Status.Phase)))
}

// callAttributes are the root span's: who, what, where, how it ended.
func callAttributes(tc *toolgatev1alpha1.ToolCall, st *pipeline.State, outcome string) []attribute.KeyValue {
	code := ""
	if st.Result != nil {
		code = string(st.Result.Code)
	}
	attrs := []attribute.KeyValue{
		attribute.String("k8s.namespace.name", tc.Namespace), attribute.String("toolgate.session", tc.Spec.SessionRef.Name),
		attribute.String("toolgate.call", tc.Name), attribute.String("toolgate.call_uid", string(tc.UID)),
		attribute.String("toolgate.call_id", tc.Spec.CallID), attribute.String("toolgate.tool", toolLabel(tc)),
		attribute.Int64("toolgate.turn", tc.Spec.Turn), attribute.Int("toolgate.index", int(tc.Spec.Index)),
		attribute.String("toolgate.requester", tc.Spec.Requester), attribute.String("toolgate.outcome", outcome),
		attribute.String("toolgate.code", orNone(code)), attribute.Int("toolgate.attempts", st.Attempt),
	}
	if st.Sandbox != "" {
		attrs = append(attrs, attribute.String("toolgate.pod", st.Sandbox))
	}
	return attrs
}

func earlier(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// traceCommit writes the span of the call's commit to its session's log:
// from its durable result (as this process saw it, to the microsecond, or
// as stored, to the second) to the write that made it Committed, which
// waits for the calls before it in model order.
func (r *ToolCallReconciler) traceCommit(tc *toolgatev1alpha1.ToolCall) {
	if !tracing.Active() {
		return
	}
	start := r.Clock.Now()
	var at time.Time
	r.mem.with(tc, func(m *memo) { at, m.resultAt = m.resultAt, time.Time{} })
	if !at.IsZero() {
		start = at
	} else if res := tc.Status.Result; res != nil {
		start = res.SettledAt.Time
	}
	end := r.Clock.Now()
	attrs := []attribute.KeyValue{attribute.String("toolgate.stage", "Commit")}
	if seq := tc.Status.Schedule.CommitSequence; seq != nil {
		attrs = append(attrs, attribute.Int64("toolgate.commit_sequence", *seq))
	}
	callTrace(tc).Boundary("commit", earlier(start, end), end, attrs...)
}

// stampsOf returns the times of recs, the call's records: each as this
// process first saw it where the record holds that time cut to the
// second. The status keeps whole seconds, so a state rebuilt from it in a
// later reconcile (after the body, say) would give its spans and stage
// durations whole-second starts. The times are remembered (memo.stamps)
// for the call's next write, until its result.
func (r *ToolCallReconciler) stampsOf(tc *toolgatev1alpha1.ToolCall, recs []pipeline.Record) []time.Time {
	times := make([]time.Time, len(recs))
	r.mem.with(tc, func(m *memo) {
		for i, rec := range recs {
			times[i] = rec.Time
			if i < len(m.stamps) && rec.Time.Equal(m.stamps[i].Truncate(time.Second)) {
				times[i] = m.stamps[i]
			}
		}
		m.stamps = times
		if tc.Status.Result != nil {
			m.stamps = nil // nothing follows a result
		}
	})
	return times
}
