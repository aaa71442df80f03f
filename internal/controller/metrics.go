package controller

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Prometheus metrics, served by the manager's metrics endpoint. Labels are
// stable, bounded values only (outcomes, codes, stages, verdicts), never
// arguments, content, names or paths.
var (
	callsSettled = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "toolgate_calls_settled_total",
		Help: "Calls that reached their one result, by outcome and error code.",
	}, []string{"outcome", "code"})
	callDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "toolgate_call_duration_seconds",
		Help:    "From a call's creation to its result, by outcome.",
		Buckets: []float64{0.25, 0.5, 1, 2, 3, 5, 10, 30, 60, 300, 1800},
	}, []string{"outcome"})
	stageBoundaries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "toolgate_stage_boundaries_total",
		Help: "Pipeline boundaries crossed, by stage and verdict.",
	}, []string{"stage", "verdict"})
	statusWrites = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "toolgate_toolcall_status_writes_total",
		Help: "ToolCall status writes, by the controller that made them (API cost per call).",
	}, []string{"controller"})
)

func init() {
	metrics.Registry.MustRegister(callsSettled, callDuration, stageBoundaries, statusWrites)
}
