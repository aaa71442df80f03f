package main

import (
	"bytes"
	"context"
	"fmt"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/kubernetes"
)

// serverSide is one latency the API server reports of itself: a histogram
// and the labels that pick its series.
type serverSide struct {
	label  string
	metric string
	match  map[string]string
}

// serverSides are the writes on a warm call's path, as the API server
// times them (without the network and the client), and the storage
// requests under them: what bounds each write's hop on this machine.
var serverSides = []serverSide{
	{"ToolCall create (the agent)", "apiserver_request_sli_duration_seconds", map[string]string{"resource": "toolcalls", "subresource": "", "verb": "POST"}},
	{"ToolCall status patch (boundary, commit)", "apiserver_request_sli_duration_seconds", map[string]string{"resource": "toolcalls", "subresource": "status", "verb": "PATCH"}},
	{"pod patch (a warm pod's claim, a seal)", "apiserver_request_sli_duration_seconds", map[string]string{"resource": "pods", "subresource": "", "verb": "PATCH"}},
	{"  storage: ToolCall update", "etcd_request_duration_seconds", map[string]string{"resource": "toolcalls", "operation": "update"}},
	{"  storage: ToolCall read", "etcd_request_duration_seconds", map[string]string{"resource": "toolcalls", "operation": "get"}},
	{"  storage: pod update", "etcd_request_duration_seconds", map[string]string{"resource": "pods", "operation": "update"}},
	// The storage reads: a write reads storage only when its base (the watch
	// cache's copy) is older than the object; a deletion reads it, and so
	// does a client's read. The bench deletes each call once measured.
	{"ToolCall delete (the bench, once measured)", "apiserver_request_sli_duration_seconds", map[string]string{"resource": "toolcalls", "subresource": "", "verb": "DELETE"}},
	{"ToolCall get (clients' reads)", "apiserver_request_sli_duration_seconds", map[string]string{"resource": "toolcalls", "subresource": "", "verb": "GET"}},
	{"ToolCall event, storage to watch cache", "apiserver_watch_events_dispatch_duration_seconds", map[string]string{"resource": "toolcalls", "stage": "storage_to_cache"}},
}

// histogramTotals are a scrape's count and sum of each serverSide.
type histogramTotals map[string][2]float64

// scrapeServerSide reads the API server's /metrics; nil when it cannot
// (the figures are then left out).
func scrapeServerSide(ctx context.Context, cs kubernetes.Interface) histogramTotals {
	raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		return nil
	}
	totals := histogramTotals{}
	for _, s := range serverSides {
		f := families[s.metric]
		if f == nil {
			continue
		}
		var t [2]float64
		for _, m := range f.GetMetric() {
			if matches(m, s.match) && m.GetHistogram() != nil {
				t[0] += float64(m.GetHistogram().GetSampleCount())
				t[1] += m.GetHistogram().GetSampleSum()
			}
		}
		totals[s.label] = t
	}
	return totals
}

func matches(m *dto.Metric, want map[string]string) bool {
	seen := 0
	for _, l := range m.GetLabel() {
		if v, ok := want[l.GetName()]; ok {
			if l.GetValue() != v {
				return false
			}
			seen++
		}
	}
	return seen == len(want)
}

// printServerSide prints the mean of each serverSide between two scrapes.
func printServerSide(before, after histogramTotals) {
	if before == nil || after == nil {
		fmt.Println("the API server's own timing of the writes: not read (/metrics refused)")
		return
	}
	fmt.Println("the API server's own timing of the writes during the measured rounds (every kind; mean, from its /metrics):")
	for _, s := range serverSides {
		n, sum := after[s.label][0]-before[s.label][0], after[s.label][1]-before[s.label][1]
		if n <= 0 {
			continue
		}
		fmt.Printf("  %-40s mean %7.1f ms   n %5.0f\n", s.label, 1000*sum/n, n)
	}
}
