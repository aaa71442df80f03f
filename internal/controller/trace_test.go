package controller

import (
	"fmt"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	tu "github.com/toolgate/toolgate/internal/testutil"
	"github.com/toolgate/toolgate/internal/tracing"
)

var _ = Describe("a call's trace", func() {
	It("is one trace under the agent's span: a root span from admission to the result and a span per boundary, with no argument or output text", func() {
		rec := tracetest.NewSpanRecorder()
		prev := otel.GetTracerProvider()
		otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithIDGenerator(tracing.IDGenerator())))
		tracing.SetActive(true)
		DeferCleanup(func() { otel.SetTracerProvider(prev); tracing.SetActive(false) })

		ns := newNamespace()
		setup(processProfile(ns, shTool("echo", "cat").Obj()).PreRule("allow-all", toolgatev1alpha1.ActionAllow, ""))
		const agent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
		c := tu.MakeToolCall(ns, "c1", "s").Tool("echo", `{"text":"argument-marker"}`).At(0, 0).Obj()
		c.Annotations = map[string]string{tracing.AnnotationTraceparent: agent}
		Expect(k8s.Create(ctx, c)).To(Succeed())
		Expect(committedCall(ns, "c1").Status.Result.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded))

		ours := func() []sdktrace.ReadOnlySpan {
			var out []sdktrace.ReadOnlySpan
			for _, s := range rec.Ended() {
				if s.SpanContext().TraceID().String() == "0af7651916cd43dd8448eb211c80319c" {
					out = append(out, s)
				}
			}
			return out
		}
		Eventually(func() []string {
			var names []string
			for _, s := range ours() {
				names = append(names, s.Name())
			}
			return names
		}).Should(ContainElements("toolgate call", "toolgate PreExecute", "toolgate Dispatch", "toolgate Execute", "toolgate PostExecute", "toolgate Result", "toolgate commit", "toolgate status write"))
		var root sdktrace.ReadOnlySpan
		byName := map[string]sdktrace.ReadOnlySpan{}
		var writes []string
		for _, s := range ours() {
			byName[s.Name()] = s
			if s.Name() == "toolgate call" {
				root = s
			}
			if s.Name() == "toolgate status write" {
				writes = append(writes, fmt.Sprint(s.Attributes()))
			}
		}
		// The boundary before the body and the result are each made
		// durable by a write of their own.
		Expect(writes).To(ContainElements(ContainSubstring("Dispatch"), ContainSubstring("Result")))
		// The body ends in a later reconcile, which rebuilds the call from
		// its status (whole seconds): its span still starts where the
		// Dispatch boundary's ended, to the microsecond.
		Expect(byName["toolgate Execute"].StartTime()).To(Equal(byName["toolgate Dispatch"].EndTime()))
		Expect(root.Parent().SpanID().String()).To(Equal("b7ad6b7169203331"), "the agent's span")
		for _, s := range ours() {
			if s != root {
				Expect(s.Parent().SpanID()).To(Equal(root.SpanContext().SpanID()), s.Name())
				Expect(s.StartTime().After(s.EndTime())).To(BeFalse(), s.Name())
			}
			Expect(fmt.Sprint(s.Attributes())).NotTo(ContainSubstring("argument-marker"), s.Name())
		}
		Expect(fmt.Sprint(root.Attributes())).To(And(ContainSubstring("toolgate.tool"), ContainSubstring("echo"), ContainSubstring("Succeeded")))
	})
})
