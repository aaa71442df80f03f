package pod

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// The Pod sandbox's metrics (docs/operations.md), under toolgate_sandbox.
var (
	podsCreated = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "toolgate", Subsystem: "sandbox", Name: "pods_created_total",
		Help: "Tool pods created: cold (for a call, at dispatch) or warm (for a session's pool, ahead of need).",
	}, []string{"kind"})
	warmClaims = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "toolgate", Subsystem: "sandbox", Name: "warm_claims_total",
		Help: "Dispatches of calls whose session keeps warm pods: hit (a warm pod took the call) or miss (the call took the cold path).",
	}, []string{"result"})
	warmPods = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "toolgate", Subsystem: "sandbox", Name: "warm_pods",
		Help: "Warm pods waiting for a call, across every pool, as of the last sweep.",
	})
	warmReserved = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "toolgate", Subsystem: "sandbox", Name: "warm_pods_requests",
		Help: "What the warm pods waiting for a call hold of their nodes and namespaces' quotas, by namespace and resource (cpu in cores, memory in bytes: their containers' requests), as of the last sweep.",
	}, []string{"namespace", "resource"})
)

func init() {
	metrics.Registry.MustRegister(podsCreated, warmClaims, warmPods, warmReserved)
}
