package gateway

import (
	"context"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolgate/toolgate/internal/tracing"
)

// callSpan is the trace context a tools/call request's ToolCall carries:
// the agent's (W3C traceparent in the request's _meta, else its HTTP
// header), or, with tracing on, the gateway's span for the request under
// it. end ends that span.
func callSpan(ctx context.Context, r *mcp.CallToolRequest, c *caller, tool string) (traceparent string, end func()) {
	tp, _ := r.Params.Meta["traceparent"].(string)
	parent := tracing.Parse(tp)
	if !parent.IsValid() && r.Extra != nil && r.Extra.Header != nil {
		parent = tracing.Parse(r.Extra.Header.Get("traceparent"))
	}
	if !tracing.Active() {
		return tracing.Format(parent), func() {}
	}
	if parent.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, parent)
	}
	ctx, span := otel.Tracer("toolgate.dev/gateway").Start(ctx, "mcp tools/call", trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("k8s.namespace.name", c.namespace), attribute.String("toolgate.session", c.session),
			attribute.String("mcp.tool.name", tool)))
	return tracing.Traceparent(ctx), func() { span.End() }
}
