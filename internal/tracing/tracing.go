package tracing

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
)

// Enabled reports whether the environment turns tracing on.
func Enabled() bool {
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") || strings.EqualFold(os.Getenv("OTEL_TRACES_EXPORTER"), "none") {
		return false
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// Setup installs the global tracer provider and W3C propagator from the
// environment, for service (OTEL_SERVICE_NAME overrides it). It returns
// the function that flushes and stops it; with tracing off both are no-ops.
func Setup(ctx context.Context, service string, log logr.Logger) (func(context.Context) error, error) {
	otel.SetTextMapPropagator(propagation.TraceContext{})
	if !Enabled() {
		return func(context.Context) error { return nil }, nil
	}
	var client otlptrace.Client
	switch protocol() {
	case "grpc":
		client = otlptracegrpc.NewClient()
	case "http/protobuf", "":
		client = otlptracehttp.NewClient()
	default:
		return nil, errors.New("OTEL_EXPORTER_OTLP_PROTOCOL must be grpc or http/protobuf")
	}
	exporter, err := otlptrace.New(ctx, client)
	if err != nil {
		return nil, err
	}
	if os.Getenv("OTEL_SERVICE_NAME") != "" {
		service = os.Getenv("OTEL_SERVICE_NAME")
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(semconv.ServiceName(service)))
	if err != nil {
		return nil, err
	}
	// The sampler comes from OTEL_TRACES_SAMPLER (default: parent-based,
	// always on); a call's spans share its trace's decision.
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter), sdktrace.WithResource(res), sdktrace.WithIDGenerator(ids{}))
	otel.SetTracerProvider(tp)
	otel.SetErrorHandler(&errorLog{log: log})
	SetActive(true)
	return tp.Shutdown, nil
}

func protocol() string {
	if p := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"); p != "" {
		return p
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
}

// errorLog logs the SDK's errors (a receiver that is away) at most once a
// minute: an exporter retrying must not flood the log.
type errorLog struct {
	log  logr.Logger
	mu   sync.Mutex
	last time.Time
}

func (e *errorLog) Handle(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if time.Since(e.last) < time.Minute {
		return
	}
	e.last = time.Now()
	e.log.Info("trace export failed", "error", err.Error())
}

// IDGenerator is the ID generator a tracer provider needs for call traces
// (Setup installs it; a test's provider needs it too).
func IDGenerator() sdktrace.IDGenerator { return ids{} }

// forcedKey carries the IDs a span must have.
type forcedKey struct{}

type forced struct {
	trace trace.TraceID
	span  trace.SpanID
}

// ids makes random IDs, but those a context forces: a call's root span,
// whose ID its boundary spans (written earlier, maybe by another manager)
// already name as their parent.
type ids struct{}

func (ids) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	if f, ok := ctx.Value(forcedKey{}).(forced); ok {
		return f.trace, f.span
	}
	var t trace.TraceID
	_, _ = rand.Read(t[:])
	return t, randomSpanID()
}

func (ids) NewSpanID(ctx context.Context, _ trace.TraceID) trace.SpanID {
	if f, ok := ctx.Value(forcedKey{}).(forced); ok {
		return f.span
	}
	return randomSpanID()
}

func randomSpanID() trace.SpanID {
	var s trace.SpanID
	for s == (trace.SpanID{}) {
		_, _ = rand.Read(s[:])
	}
	return s
}

// derived is 16 bytes derived from label and uid.
func derived(label, uid string) [16]byte {
	sum := sha256.Sum256([]byte(label + "\x00" + uid))
	var out [16]byte
	copy(out[:], sum[:16])
	if binary.BigEndian.Uint64(out[:8]) == 0 {
		out[0] = 1 // never an invalid (all-zero) ID
	}
	return out
}
