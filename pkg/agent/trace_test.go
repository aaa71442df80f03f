package agent

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/trace"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// TestACallCarriesTheAgentsTrace: an agent traced with OpenTelemetry
// hands its span's W3C context to the call it makes; one without a span
// hands nothing.
func TestACallCarriesTheAgentsTrace(t *testing.T) {
	tc := NewCall("ns", "s", Place{}, "echo", "{}", "agent")
	WithTrace(context.Background(), tc)
	if _, ok := tc.Annotations[toolgatev1alpha1.AnnotationTraceparent]; ok {
		t.Fatalf("a call without a span carries %v", tc.Annotations)
	}
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled}))
	WithTrace(ctx, tc)
	if got := tc.Annotations[toolgatev1alpha1.AnnotationTraceparent]; got != "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" {
		t.Errorf("traceparent %q", got)
	}
}
