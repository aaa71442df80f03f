package tracing

import (
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

func recorder(t *testing.T) *tracetest.SpanRecorder {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithIDGenerator(ids{}))
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	SetActive(true)
	t.Cleanup(func() { otel.SetTracerProvider(prev); SetActive(false) })
	return rec
}

// TestACallIsOneTraceUnderTheAgentsSpan: the root span is the agent's
// span's child, with the ID the boundary spans (written before it, maybe
// by another manager) name as their parent; all share the agent's trace.
func TestACallIsOneTraceUnderTheAgentsSpan(t *testing.T) {
	rec := recorder(t)
	const agent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	c := CallOf("uid-1", agent)
	if again := CallOf("uid-1", agent); !again.Root.Equal(c.Root) || !again.Parent.Equal(c.Parent) {
		t.Fatalf("the call's trace differs between two processes: %+v, %+v", c, again)
	}
	t0 := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	c.Boundary("PreExecute", t0, t0.Add(5*time.Millisecond), attribute.String("toolgate.verdict", "Allow"))
	c.Settled(t0, t0.Add(40*time.Millisecond), attribute.String("toolgate.outcome", "Succeeded"))
	spans := rec.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans", len(spans))
	}
	boundary, root := spans[0], spans[1]
	if root.SpanContext().TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || boundary.SpanContext().TraceID() != root.SpanContext().TraceID() {
		t.Errorf("trace IDs %s, %s", root.SpanContext().TraceID(), boundary.SpanContext().TraceID())
	}
	if root.Parent().SpanID().String() != "00f067aa0ba902b7" || !root.Parent().IsRemote() {
		t.Errorf("the root's parent is %v, not the agent's span", root.Parent())
	}
	if root.SpanContext().SpanID() != c.Root.SpanID() || boundary.Parent().SpanID() != root.SpanContext().SpanID() {
		t.Errorf("root %s, boundary's parent %s", root.SpanContext().SpanID(), boundary.Parent().SpanID())
	}
	if !root.StartTime().Equal(t0) || root.EndTime().Sub(root.StartTime()) != 40*time.Millisecond || boundary.Name() != "toolgate PreExecute" {
		t.Errorf("root %v–%v, boundary %q", root.StartTime(), root.EndTime(), boundary.Name())
	}
}

// TestACallWithoutATraceHasItsOwn: no traceparent (or a malformed one):
// the call's trace is derived from its UID, the same in every process, and
// the root span has no parent.
func TestACallWithoutATraceHasItsOwn(t *testing.T) {
	rec := recorder(t)
	for _, tp := range []string{"", "00-zz-00f067aa0ba902b7-01", "not a traceparent"} {
		c := CallOf("uid-2", tp)
		if c.Parent.IsValid() || !c.Root.Equal(CallOf("uid-2", "").Root) || !c.Root.IsValid() {
			t.Errorf("%q: %+v", tp, c)
		}
	}
	c := CallOf("uid-2", "")
	if CallOf("uid-3", "").Root.TraceID() == c.Root.TraceID() {
		t.Error("two calls share a trace")
	}
	c.Settled(time.Now(), time.Now())
	if root := rec.Ended()[0]; root.Parent().IsValid() || root.SpanContext().TraceID() != c.Root.TraceID() {
		t.Errorf("root %v parent %v", root.SpanContext(), root.Parent())
	}
}

// TestTracingIsOffWithoutAnEndpoint: nothing set, or the SDK disabled:
// off.
func TestTracingIsOffWithoutAnEndpoint(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	if Enabled() {
		t.Error("on without an endpoint")
	}
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
	if !Enabled() {
		t.Error("off with an endpoint")
	}
	t.Setenv("OTEL_SDK_DISABLED", "true")
	if Enabled() {
		t.Error("on with the SDK disabled")
	}
}

// TestAnAgentNeverDecidesWhetherItsCallIsTraced: a traceparent whose
// sampled flag is off (or carries other flags) still places the call in
// the agent's trace, and every span of the call is recorded under the
// default parent-based sampler.
func TestAnAgentNeverDecidesWhetherItsCallIsTraced(t *testing.T) {
	for _, flags := range []string{"00", "02"} {
		rec := recorder(t)
		c := CallOf("uid-1", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-"+flags)
		t0 := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
		c.Boundary("PreExecute", t0, t0.Add(time.Millisecond))
		c.Settled(t0, t0.Add(2*time.Millisecond))
		spans := rec.Ended()
		if len(spans) != 2 {
			t.Fatalf("flags %s: %d spans recorded, want the boundary and the root", flags, len(spans))
		}
		for _, sp := range spans {
			if sp.SpanContext().TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" {
				t.Errorf("flags %s: span %q left the agent's trace", flags, sp.Name())
			}
		}
	}
}
