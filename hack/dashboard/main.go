// Command dashboard writes toolgate's Grafana dashboard,
// charts/toolgate/files/dashboard.json, built in code from the metrics
// docs/operations.md lists (make manifests runs it; make verify fails on
// drift). The chart ships it in a ConfigMap (metrics.dashboard.enabled).
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

// ds is the dashboard's Prometheus, chosen by the variable datasource.
var ds = common.DataSourceRef{Type: cog.ToPtr("prometheus"), Uid: cog.ToPtr("${datasource}")}

func query(expr, legend string) *prometheus.DataqueryBuilder {
	return prometheus.NewDataqueryBuilder().Datasource(ds).Expr(expr).LegendFormat(legend)
}

// series is a time series panel of one or more queries.
func series(title, description, unit string, queries ...*prometheus.DataqueryBuilder) *timeseries.PanelBuilder {
	p := timeseries.NewPanelBuilder().Title(title).Description(description).Unit(unit).Min(0).Datasource(ds).Height(8).Span(8)
	for _, q := range queries {
		p = p.WithTarget(q)
	}
	return p
}

// single is a stat panel of one query.
func single(title, description, unit string, q *prometheus.DataqueryBuilder) *stat.PanelBuilder {
	return stat.NewPanelBuilder().Title(title).Description(description).Unit(unit).Datasource(ds).Height(4).Span(4).WithTarget(q)
}

// build is the dashboard in Grafana's classic JSON model, which every
// Grafana imports and its provisioning sidecar reads (the v2 schema needs
// Grafana 12 with its feature flag).
func build() (dashboard.Dashboard, error) { //nolint:staticcheck // the classic model, on purpose (above)
	newDashboard := dashboard.NewDashboardBuilder //nolint:staticcheck // the classic model, on purpose (above)
	b := newDashboard("toolgate").
		Uid("toolgate").
		Tags([]string{"toolgate"}).
		Description("Tool calls through toolgate's pipeline: outcomes, where time goes, approvals, tool pods, the manager. Metrics: docs/operations.md.").
		Refresh("30s").
		Time("now-3h", "now").
		Timezone(common.TimeZoneBrowser).
		WithVariable(dashboard.NewDatasourceVariableBuilder("datasource").Label("Prometheus").Type("prometheus")).
		WithRow(dashboard.NewRowBuilder("Overview")).
		WithPanel(single("Leader", "Replicas holding the lease; 1 is healthy.", "none",
			query(`sum(leader_election_master_status{name="toolgate-manager.toolgate.dev"})`, "leaders"))).
		WithPanel(single("Calls settled /s", "Calls that reached their one result.", "reqps",
			query(`sum(rate(toolgate_toolcall_settled_total[$__rate_interval]))`, "calls/s"))).
		WithPanel(single("Failed", "Share of settled calls that failed (denials are not failures).", "percentunit",
			query(`sum(rate(toolgate_toolcall_settled_total{outcome="Failed"}[$__rate_interval])) / sum(rate(toolgate_toolcall_settled_total[$__rate_interval]))`, "failed"))).
		WithPanel(single("Questions waiting", "Approval questions waiting for people.", "none",
			query(`sum(max by (namespace) (toolgate_approval_requests_pending))`, "waiting"))).
		WithPanel(single("Oldest question", "How long the oldest question has waited.", "s",
			query(`max(toolgate_approval_oldest_pending_seconds)`, "oldest"))).
		WithPanel(single("Warm pods", "Warm tool pods waiting for a call.", "none",
			query(`sum(toolgate_sandbox_warm_pods)`, "warm"))).
		WithRow(dashboard.NewRowBuilder("Calls")).
		WithPanel(series("Calls by outcome", "Calls settled per second, by outcome.", "reqps",
			query(`sum by (outcome) (rate(toolgate_toolcall_settled_total[$__rate_interval]))`, "{{outcome}}"))).
		WithPanel(series("Calls not succeeding, by code", "Denied, failed, cancelled and timed-out calls per second, by stable code (docs/operations.md, Troubleshooting).", "reqps",
			query(`sum by (code) (rate(toolgate_toolcall_settled_total{code!="none"}[$__rate_interval]))`, "{{code}}"))).
		WithPanel(series("Call duration", "From a call's creation to its result.", "s",
			query(`histogram_quantile(0.5, sum by (le) (rate(toolgate_toolcall_duration_seconds_bucket{outcome="Succeeded"}[$__rate_interval])))`, "p50"),
			query(`histogram_quantile(0.95, sum by (le) (rate(toolgate_toolcall_duration_seconds_bucket{outcome="Succeeded"}[$__rate_interval])))`, "p95"))).
		WithPanel(series("Where time goes (p95 by stage)", "From a call's previous boundary to each stage's: Dispatch after an approval includes the wait, Execute is the body.", "s",
			query(`histogram_quantile(0.95, sum by (le, stage) (rate(toolgate_toolcall_stage_seconds_bucket[$__rate_interval])))`, "{{stage}}"))).
		WithPanel(series("Policy verdicts", "Boundaries crossed per second, by stage and verdict (a rise of Guard Deny or PostExecute Block is policy at work).", "reqps",
			query(`sum by (stage, verdict) (rate(toolgate_toolcall_stage_boundaries_total{verdict!~"OK|Abstain|Admitted|Dispatched"}[$__rate_interval]))`, "{{stage}} {{verdict}}"))).
		WithRow(dashboard.NewRowBuilder("Approvals")).
		WithPanel(series("Questions waiting", "Approval questions waiting for people, by namespace.", "none",
			query(`max by (namespace) (toolgate_approval_requests_pending)`, "{{namespace}}"))).
		WithPanel(series("Oldest question", "How long the oldest question has waited, by namespace.", "s",
			query(`max by (namespace) (toolgate_approval_oldest_pending_seconds)`, "{{namespace}}"))).
		WithPanel(series("Time to an answer (p95)", "From a question to a person's answer or its absence, by verdict.", "s",
			query(`histogram_quantile(0.95, sum by (le, verdict) (rate(toolgate_approval_wait_seconds_bucket[$__rate_interval])))`, "{{verdict}}"))).
		WithRow(dashboard.NewRowBuilder("Tool pods")).
		WithPanel(series("Pods created", "Tool pods created per second, cold and warm.", "reqps",
			query(`sum by (kind) (rate(toolgate_sandbox_pods_created_total[$__rate_interval]))`, "{{kind}}"))).
		WithPanel(series("Warm claims", "Dispatches that found a warm pod (hit) or started one cold (miss).", "reqps",
			query(`sum by (result) (rate(toolgate_sandbox_warm_claims_total[$__rate_interval]))`, "{{result}}"))).
		WithPanel(series("Egress requests", "Requests through the egress proxy, by verdict.", "reqps",
			query(`sum by (verdict) (rate(toolgate_egress_requests_total[$__rate_interval]))`, "{{verdict}}"))).
		WithRow(dashboard.NewRowBuilder("Manager")).
		WithPanel(series("Status writes per call", "ToolCall status writes per settled call: the API cost of a call.", "none",
			query(`sum(rate(toolgate_toolcall_status_writes_total[$__rate_interval])) / sum(rate(toolgate_toolcall_settled_total[$__rate_interval]))`, "writes/call"))).
		WithPanel(series("Failed status writes", "By controller and reason: conflict is retried; refused is the API server rejecting toolgate's writes.", "reqps",
			query(`sum by (controller, reason) (rate(toolgate_toolcall_status_write_errors_total[$__rate_interval]))`, "{{controller}} {{reason}}"))).
		WithPanel(series("Work queues", "Objects waiting in each controller's queue.", "none",
			query(`sum by (name) (workqueue_depth{name=~"toolcall|agentsession|toolprofile"})`, "{{name}}"))).
		WithPanel(series("Notifications", "Approval notifications (and audit copies) by sink and result.", "reqps",
			query(`sum by (sink, result) (rate(toolgate_notifications_total[$__rate_interval]))`, "{{sink}} {{result}}"))).
		WithPanel(series("Audit records", "Records written by type, and lost.", "reqps",
			query(`sum by (type) (rate(toolgate_audit_records_total[$__rate_interval]))`, "{{type}}"),
			query(`sum(rate(toolgate_audit_records_lost_total[$__rate_interval]))`, "lost")))
	return b.Build()
}

func main() {
	d, err := build()
	if err != nil {
		fmt.Fprintln(os.Stderr, "dashboard:", err)
		os.Exit(1)
	}
	out, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		fmt.Fprintln(os.Stderr, "dashboard:", err)
		os.Exit(1)
	}
	path := filepath.Join("charts", "toolgate", "files", "dashboard.json")
	if err := os.WriteFile(path, append(out, '\n'), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "dashboard:", err)
		os.Exit(1)
	}
}
