package controller

import (
	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/pipeline"
)

// Prometheus metrics, served by the manager's metrics endpoint, under the
// namespace toolgate (docs/operations.md lists them with what to alert
// on). Labels are stable, bounded values only (tools of a profile,
// outcomes, codes, stages, verdicts), never arguments, content, call names
// or paths.
var (
	callsSettled = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "toolgate", Subsystem: "toolcall", Name: "settled_total",
		Help: "Calls that reached their one result, by tool, outcome and error code (none on success).",
	}, []string{"tool", "outcome", "code"})
	callDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "toolgate", Subsystem: "toolcall", Name: "duration_seconds",
		Help:    "From a call's creation to its result, by outcome.",
		Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2, 3, 5, 10, 30, 60, 300, 1800},
	}, []string{"outcome"})
	stageBoundaries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "toolgate", Subsystem: "toolcall", Name: "stage_boundaries_total",
		Help: "Pipeline boundaries crossed, by stage and verdict.",
	}, []string{"stage", "verdict"})
	stageSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "toolgate", Subsystem: "toolcall", Name: "stage_seconds",
		Help:    "From a call's previous boundary to this one, by stage: where calls spend their time.",
		Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300},
	}, []string{"stage"})
	approvalWait = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "toolgate", Subsystem: "approval", Name: "wait_seconds",
		Help:    "From the question to a person's answer (or its absence), by the approval stage's verdict.",
		Buckets: []float64{1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 14400, 86400},
	}, []string{"verdict"})
	statusWrites = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "toolgate", Subsystem: "toolcall", Name: "status_writes_total",
		Help: "ToolCall status writes, by the controller that made them (API cost per call).",
	}, []string{"controller"})
	statusWriteErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "toolgate", Subsystem: "toolcall", Name: "status_write_errors_total",
		Help: "ToolCall status writes that failed, by controller and reason: conflict (retried), refused (the API server rejected the write: validation, admission, size, permission), unavailable (anything else).",
	}, []string{"controller", "reason"})
)

// Reasons of a failed status write (statusWriteErrors).
const (
	writeConflict    = "conflict"
	writeRefused     = "refused"
	writeUnavailable = "unavailable"
)

func init() {
	metrics.Registry.MustRegister(callsSettled, callDuration, stageBoundaries, stageSeconds, approvalWait, statusWrites, statusWriteErrors)
	// Every series an alert reads exists from the start, at zero, so that
	// rate() sees the first failure.
	for _, c := range []string{"toolcall", "agentsession"} {
		statusWrites.WithLabelValues(c)
		for _, r := range []string{writeConflict, writeRefused, writeUnavailable} {
			statusWriteErrors.WithLabelValues(c, r)
		}
	}
}

// countWriteError counts a failed status write of controller by why it
// failed.
func countWriteError(controller string, err error) {
	reason := writeUnavailable
	switch {
	case apierrors.IsConflict(err):
		reason = writeConflict
	case apierrors.IsInvalid(err), apierrors.IsForbidden(err), apierrors.IsBadRequest(err), apierrors.IsRequestEntityTooLargeError(err), apierrors.IsUnauthorized(err):
		reason = writeRefused
	}
	statusWriteErrors.WithLabelValues(controller, reason).Inc()
}

// toolLabel is the tool label of a call's metrics: its tool once the
// profile knew it (a call that passed its Call stage), otherwise "unknown",
// so that an agent cannot mint label values.
func toolLabel(tc *toolgatev1alpha1.ToolCall) string {
	for _, r := range tc.Status.Stages {
		if r.Stage == string(pipeline.StageCall) {
			if r.Verdict == pipeline.VerdictAdmitted {
				return tc.Spec.Tool
			}
			break
		}
	}
	return "unknown"
}
