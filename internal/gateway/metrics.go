package gateway

import "github.com/prometheus/client_golang/prometheus"

// toolUnlisted labels calls of tools the session does not list, so that
// names a client makes up never become label values.
const toolUnlisted = "_unlisted"

// metrics are the gateway's Prometheus metrics.
type metrics struct {
	calls    *prometheus.CounterVec
	duration *prometheus.HistogramVec
	rejected *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "toolgate_gateway_tool_calls_total",
			Help: "tools/call requests answered, by tool and outcome (a ToolCall outcome, or the gateway's own code when it answered without one).",
		}, []string{"tool", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "toolgate_gateway_tool_call_duration_seconds",
			Help:    "Time from a tools/call request to its answer, by tool and outcome.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 16),
		}, []string{"tool", "outcome"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "toolgate_gateway_requests_rejected_total",
			Help: "Requests refused before any ToolCall existed, by reason (unauthenticated; review_budget: a token to check beyond the TokenReview budget; concurrency_limit).",
		}, []string{"reason"}),
	}
	if reg != nil {
		reg.MustRegister(m.calls, m.duration, m.rejected)
	}
	return m
}
