package egress

import "github.com/prometheus/client_golang/prometheus"

// Metrics count what the proxy did with each request.
type Metrics struct {
	requests *prometheus.CounterVec
}

// NewMetrics registers the proxy's metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{requests: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "toolgate_egress_requests_total",
		Help: "Requests of tools' bodies to the egress proxy, by tool (empty when no grant was believed) and verdict (tunnelled, forwarded, injected, or why it was refused).",
	}, []string{"tool", "verdict"})}
	reg.MustRegister(m.requests)
	return m
}

func (m *Metrics) inc(tool, verdict string) {
	if m != nil {
		m.requests.WithLabelValues(tool, verdict).Inc()
	}
}
