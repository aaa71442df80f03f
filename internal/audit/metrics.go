package audit

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	recordsWritten = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "toolgate_audit_records_total",
		Help: "Audit records written, by type (decision, call).",
	}, []string{"type"})
	recordsLost = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "toolgate_audit_records_lost_total",
		Help: "Audit records that could not be written to their sink.",
	})
)

func init() {
	metrics.Registry.MustRegister(recordsWritten, recordsLost)
}
