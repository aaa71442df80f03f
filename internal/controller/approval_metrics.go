package controller

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
)

var (
	pendingDesc = prometheus.NewDesc("toolgate_approval_requests_pending",
		"Approval questions waiting for people, by namespace.", []string{"namespace"}, nil)
	oldestDesc = prometheus.NewDesc("toolgate_approval_oldest_pending_seconds",
		"How long the oldest approval question waiting for people has waited, by namespace.", []string{"namespace"}, nil)
)

// approvalCollector reports the questions waiting, read from the cache at
// each scrape: a gauge nobody has to keep in step with the questions.
type approvalCollector struct {
	mu     sync.Mutex
	reader client.Reader
	clock  clock.PassiveClock
}

// approvalGauges is the registry's one approval collector; each Setup
// points it at its manager's cache (a manager set up again, as the tests
// do, must not leave the registry reading a stopped one).
var (
	approvalGauges     = &approvalCollector{}
	registerApprovals  sync.Once
	registerApprovalsE error
)

// useApprovalGauges registers the collector once and reads reader from now on.
func useApprovalGauges(reader client.Reader, clk clock.PassiveClock) error {
	approvalGauges.mu.Lock()
	approvalGauges.reader, approvalGauges.clock = reader, clk
	approvalGauges.mu.Unlock()
	registerApprovals.Do(func() { registerApprovalsE = metrics.Registry.Register(approvalGauges) })
	return registerApprovalsE
}

func (c *approvalCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- pendingDesc
	ch <- oldestDesc
}

func (c *approvalCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	reader, clk := c.reader, c.clock
	c.mu.Unlock()
	if reader == nil {
		return
	}
	// A scrape never waits long on a cache that is not synced yet.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	list := &toolgatev1alpha1.ApprovalRequestList{}
	if err := reader.List(ctx, list); err != nil {
		return
	}
	now := clk.Now()
	pending, oldest := map[string]int{}, map[string]time.Duration{}
	for i := range list.Items {
		ar := &list.Items[i]
		if !waiting(ar, now) {
			continue
		}
		pending[ar.Namespace]++
		oldest[ar.Namespace] = max(oldest[ar.Namespace], now.Sub(ar.CreationTimestamp.Time))
	}
	for ns, n := range pending {
		ch <- prometheus.MustNewConstMetric(pendingDesc, prometheus.GaugeValue, float64(n), ns)
		ch <- prometheus.MustNewConstMetric(oldestDesc, prometheus.GaugeValue, oldest[ns].Seconds(), ns)
	}
}

// waiting reports whether people still have to answer ar: not decided,
// not ended, not past its deadline.
func waiting(ar *toolgatev1alpha1.ApprovalRequest, now time.Time) bool {
	switch ar.Status.Phase {
	case "", toolgatev1alpha1.ApprovalPending:
	default:
		return false
	}
	return ar.Spec.Decision == nil && ar.DeletionTimestamp == nil && now.Before(ar.Spec.Deadline.Time)
}
