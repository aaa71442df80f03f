// Package tracing exports OpenTelemetry traces of tool calls: one trace
// per call, a root span from the call's creation to its result, and a span
// per pipeline boundary it crossed (from the previous boundary to this
// one), under the agent's own trace when the call carries its W3C trace
// context (the annotation toolgate.dev/traceparent, which the MCP gateway
// and pkg/agent set from the agent's request).
//
// A call's spans are written by whichever manager crosses each boundary,
// across restarts and replicas, so their IDs are derived, not random: the
// trace ID is the agent's, or one derived from the call's UID; the root
// span's ID is derived from the UID, and every boundary span is its child.
//
// Configured by the standard OTEL_* environment variables: tracing is on
// when OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
// is set (OTEL_EXPORTER_OTLP_PROTOCOL grpc or http/protobuf, the default),
// off when OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none. Off, the
// global provider is OpenTelemetry's no-op one: a span costs nothing.
//
// Attributes carry identities and codes (namespace, session, call, tool,
// turn, index, stage, verdict, rule, outcome, code), never arguments or
// content.
package tracing
