package pod

import (
	"time"

	"go.opentelemetry.io/otel/attribute"
	corev1 "k8s.io/api/core/v1"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/providers/sandbox"
	"github.com/toolgate/toolgate/internal/runner"
	"github.com/toolgate/toolgate/internal/tracing"
)

// traceBody adds the body's span to the call's trace, as the runner timed
// it in the pod (its node's clock): where the Execute boundary's time went
// between the hand-over, the body and the result's way back.
func traceBody(job sandbox.Job, pod *corev1.Pod, res *runner.Result) {
	if !tracing.Active() || res.BodyStartedUnixMicros == 0 {
		return
	}
	start := time.UnixMicro(res.BodyStartedUnixMicros)
	call := tracing.CallOf(string(job.OwnerUID), job.Traceparent)
	where := []attribute.KeyValue{attribute.String("toolgate.pod", pod.Name), attribute.String("k8s.node.name", pod.Spec.NodeName),
		attribute.Int("toolgate.attempt", job.Attempt)}
	if !job.Dispatched.IsZero() && job.Dispatched.Before(start) {
		// From the dispatch to the body's start: a warm pod claimed, or a
		// pod started cold, and the call handed over.
		kind := "cold"
		if pod.Annotations[toolgatev1alpha1.AnnotationClaimed] != "" {
			kind = "warm"
		}
		call.Boundary("sandbox start", job.Dispatched, start, append(where, attribute.String("toolgate.pod_kind", kind))...)
	}
	if res.ConnectedUnixMicros != 0 && res.HandedUnixMicros >= res.ConnectedUnixMicros {
		// The greeting and the request, from the runner's accepting the
		// connection to its opening the request.
		call.Boundary("hand-over", time.UnixMicro(res.ConnectedUnixMicros), time.UnixMicro(res.HandedUnixMicros), where...)
	}
	body := append(where, attribute.Int("toolgate.exit_code", res.ExitCode))
	if len(res.Refused) > 0 {
		// An MCP server asked its client for what toolgate never lends.
		body = append(body, attribute.StringSlice("toolgate.mcp.refused", res.Refused))
	}
	call.Body(start, start.Add(time.Duration(res.BodyMicros)*time.Microsecond), body...)
}

// tracePrepare adds the span of the attempt's sandbox preparation, from
// start to now: its pod found, claimed warm or created, before its
// dispatch boundary is written.
func tracePrepare(p *Provider, job sandbox.Job, start time.Time) {
	if !tracing.Active() {
		return
	}
	where := p.Where(job.Key)
	attrs := []attribute.KeyValue{attribute.Int("toolgate.attempt", job.Attempt), attribute.Bool("toolgate.prepared", where != "")}
	if where != "" {
		attrs = append(attrs, attribute.String("toolgate.pod", where))
	}
	tracing.CallOf(string(job.OwnerUID), job.Traceparent).Boundary("sandbox prepare", start, time.Now(), attrs...)
}

// traceClaim adds the span of a warm pod's claim, written beside the
// dispatch boundary.
func traceClaim(job sandbox.Job, pod *corev1.Pod, start time.Time, err error) {
	if !tracing.Active() {
		return
	}
	tracing.CallOf(string(job.OwnerUID), job.Traceparent).Boundary("sandbox claim", start, time.Now(),
		attribute.String("toolgate.pod", pod.Name), attribute.Int("toolgate.attempt", job.Attempt), attribute.Bool("toolgate.claimed", err == nil))
}
