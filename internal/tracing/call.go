package tracing

import (
	"context"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// AnnotationTraceparent is the ToolCall annotation holding the W3C trace
// context of the agent's request that made the call.
const AnnotationTraceparent = toolgatev1alpha1.AnnotationTraceparent

const tracerName = "toolgate.dev/toolcall"

// Call is the trace of one ToolCall.
type Call struct {
	// Parent is the agent's span (invalid: the call's trace is its own).
	Parent trace.SpanContext
	// Root is the call's root span, every boundary span's parent.
	Root trace.SpanContext
}

// Parse is the span context traceparent names, or an invalid one.
func Parse(traceparent string) trace.SpanContext {
	if traceparent == "" {
		return trace.SpanContext{}
	}
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": traceparent})
	return trace.SpanContextFromContext(ctx)
}

// Format is the W3C header value of sc ("" for an invalid one).
func Format(sc trace.SpanContext) string {
	return Traceparent(trace.ContextWithRemoteSpanContext(context.Background(), sc))
}

// Traceparent is the W3C header value of ctx's span ("" for none).
func Traceparent(ctx context.Context) string {
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	return c["traceparent"]
}

// CallOf is the trace of the call with uid, under the agent's traceparent
// (its annotation; empty or invalid: a trace of its own, derived from the
// UID). It is the same in every process.
//
// The agent wrote the traceparent: it places the call in the agent's
// trace, and never decides whether the call is traced. Its sampled flag
// is ignored (set), so that an agent cannot drop its calls' spans from the
// operator's view; toolgate's own sampler (OTEL_TRACES_SAMPLER) decides.
func CallOf(uid, traceparent string) Call {
	c := Call{Parent: Parse(traceparent)}
	traceID := trace.TraceID(derived("toolgate.dev/trace", uid))
	if c.Parent.IsValid() {
		traceID = c.Parent.TraceID()
		c.Parent = c.Parent.WithTraceFlags(c.Parent.TraceFlags() | trace.FlagsSampled)
	}
	span := derived("toolgate.dev/root-span", uid)
	c.Root = trace.NewSpanContext(trace.SpanContextConfig{TraceID: traceID, SpanID: trace.SpanID(span[:8]), TraceFlags: trace.FlagsSampled})
	return c
}

// Active reports whether spans are exported (Setup turned tracing on, or
// a test installed a provider with SetActive): callers skip building them
// otherwise.
func Active() bool { return active.Load() }

// SetActive says whether spans are exported.
func SetActive(on bool) { active.Store(on) }

var active atomic.Bool

// Boundary writes the span of one pipeline boundary: from start (the
// previous boundary) to end (this one), a child of the call's root.
func (c Call) Boundary(stage string, start, end time.Time, attrs ...attribute.KeyValue) {
	if !active.Load() {
		return
	}
	ctx := trace.ContextWithRemoteSpanContext(context.Background(), c.Root)
	_, span := otel.Tracer(tracerName).Start(ctx, "toolgate "+stage, trace.WithTimestamp(start), trace.WithAttributes(attrs...))
	span.End(trace.WithTimestamp(end))
}

// Settled writes the call's root span, from its creation to its result,
// with the ID its boundary spans name as their parent.
func (c Call) Settled(start, end time.Time, attrs ...attribute.KeyValue) {
	if !active.Load() {
		return
	}
	ctx := context.Background()
	if c.Parent.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, c.Parent)
	}
	ctx = context.WithValue(ctx, forcedKey{}, forced{trace: c.Root.TraceID(), span: c.Root.SpanID()})
	_, span := otel.Tracer(tracerName).Start(ctx, "toolgate call", trace.WithTimestamp(start), trace.WithAttributes(attrs...), trace.WithSpanKind(trace.SpanKindServer))
	span.End(trace.WithTimestamp(end))
}

// Body writes the span of the body as the sandbox measured it (the pod's
// clock), a child of the call's root.
func (c Call) Body(start, end time.Time, attrs ...attribute.KeyValue) {
	c.Boundary("body", start, end, attrs...)
}
