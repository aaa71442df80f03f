package pod

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/providers/sandbox"
	"github.com/toolgate/toolgate/internal/runner"
	"github.com/toolgate/toolgate/internal/tracing"
)

// TestTheBodyIsASpanOfTheCall: the runner's timing of the body becomes a
// span of the call's trace, under its root, as the runner measured it.
func TestTheBodyIsASpanOfTheCall(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithIDGenerator(tracing.IDGenerator())))
	tracing.SetActive(true)
	t.Cleanup(func() { otel.SetTracerProvider(prev); tracing.SetActive(false) })

	const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	started := time.Date(2026, 12, 3, 10, 0, 0, 123456000, time.UTC)
	job := sandbox.Job{OwnerUID: "uid-1", Traceparent: tp, Attempt: 1, Dispatched: started.Add(-30 * time.Millisecond)}
	res := &runner.Result{Header: runner.Header{BodyStartedUnixMicros: started.UnixMicro(), BodyMicros: 42_000,
		ConnectedUnixMicros: started.Add(-3 * time.Millisecond).UnixMicro(), HandedUnixMicros: started.Add(-time.Millisecond).UnixMicro()}}
	warm := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p1", Annotations: map[string]string{toolgatev1alpha1.AnnotationClaimed: "c1"}}, Spec: corev1.PodSpec{NodeName: "n1"}}
	traceBody(job, warm, res)
	spans := rec.Ended()
	if len(spans) != 3 {
		t.Fatalf("%d spans", len(spans))
	}
	claim, handed, s := spans[0], spans[1], spans[2]
	if handed.Name() != "toolgate hand-over" || !handed.StartTime().Equal(started.Add(-3*time.Millisecond)) || !handed.EndTime().Equal(started.Add(-time.Millisecond)) {
		t.Errorf("hand-over span %q %v–%v", handed.Name(), handed.StartTime(), handed.EndTime())
	}
	if claim.Name() != "toolgate sandbox start" || !claim.StartTime().Equal(job.Dispatched) || !claim.EndTime().Equal(started) ||
		!strings.Contains(fmt.Sprint(claim.Attributes()), "warm") {
		t.Errorf("sandbox span %q %v–%v %v", claim.Name(), claim.StartTime(), claim.EndTime(), claim.Attributes())
	}
	root := tracing.CallOf("uid-1", tp).Root
	if s.Name() != "toolgate body" || s.Parent().SpanID() != root.SpanID() || s.SpanContext().TraceID() != root.TraceID() {
		t.Errorf("span %q parent %v trace %v", s.Name(), s.Parent().SpanID(), s.SpanContext().TraceID())
	}
	if !s.StartTime().Equal(started) || s.EndTime().Sub(s.StartTime()) != 42*time.Millisecond {
		t.Errorf("span %v–%v", s.StartTime(), s.EndTime())
	}

	// An MCP server's refused requests are on the body's span.
	res.Refused = []string{"sampling/createMessage"}
	traceBody(job, warm, res)
	spans = rec.Ended()
	refused := false
	for _, a := range spans[len(spans)-1].Attributes() {
		refused = refused || (a.Key == "toolgate.mcp.refused" && fmt.Sprint(a.Value.AsStringSlice()) == "[sampling/createMessage]")
	}
	if len(spans) != 6 || spans[5].Name() != "toolgate body" || !refused {
		t.Errorf("refused requests not on the body's span: %v", spans[len(spans)-1].Attributes())
	}

	// A runner of a release that does not time the body adds nothing.
	traceBody(job, &corev1.Pod{}, &runner.Result{})
	if len(rec.Ended()) != 6 {
		t.Error("a span without the runner's timing")
	}
}
