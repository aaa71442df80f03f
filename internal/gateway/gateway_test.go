package gateway_test

import (
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/toolgate/toolgate/internal/tracing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/gateway"
	tu "github.com/toolgate/toolgate/internal/testutil"
	"github.com/toolgate/toolgate/pkg/agent"
)

// shTool is a tool run by /bin/sh with an exact script; it reads the
// arguments on stdin and its stdout is the value.
func shTool(name, script, output string, render toolgatev1alpha1.RenderFormat) toolgatev1alpha1.ToolDefinition {
	w := tu.MakeTool(name)
	w.Container.Command = []string{"/bin/sh", "-c", script}
	w.Output = toolgatev1alpha1.OutputDeclaration{Schema: tu.JSON(output), Render: toolgatev1alpha1.RenderSpec{Format: render}}
	return w.Obj()
}

// profile: echo returns its arguments (an object: structured content);
// write asks a person; danger is denied for the text "rm"; secret is denied
// to every call (so not listed); slow sleeps.
func profile(ns string) *toolgatev1alpha1.ToolProfile {
	object := `{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`
	return tu.MakeToolProfile(ns, "p").Tools(
		shTool("echo", "cat", object, toolgatev1alpha1.RenderJSON),
		shTool("write", "printf written", `{"type":"string"}`, toolgatev1alpha1.RenderText),
		shTool("danger", "echo ran", `{"type":"string"}`, toolgatev1alpha1.RenderText),
		shTool("secret", "echo secret", `{"type":"string"}`, toolgatev1alpha1.RenderText),
		shTool("slow", "sleep 60; echo late", `{"type":"string"}`, toolgatev1alpha1.RenderText),
	).Preset(toolgatev1alpha1.PresetTrusted).
		PreRule("ask-writes", toolgatev1alpha1.ActionAsk, "", "write").
		PreRule("no-rm", toolgatev1alpha1.ActionDeny, "call.args.text == 'rm'", "danger").
		PreRule("never-secret", toolgatev1alpha1.ActionDeny, "", "secret").
		Sandbox(func(s *toolgatev1alpha1.SandboxPolicy) {
			s.Provider = toolgatev1alpha1.SandboxProviderProcess
			s.Mode = toolgatev1alpha1.SandboxWorkspaceWrite
		}).
		Approval(func(a *toolgatev1alpha1.ApprovalSettings) { a.Provider = toolgatev1alpha1.ApprovalProviderAPIServer }).
		Obj()
}

// session creates the profile and, as the agent, a session "s", and waits
// for the profile to be Ready.
func session(ns, user string) {
	Expect(k8s.Create(ctx, profile(ns))).To(Succeed())
	s := tu.MakeAgentSession(ns, "s", "p").Obj()
	s.Spec.Owner = user
	Expect(as(user).Create(ctx, s)).To(Succeed())
	Eventually(func(g Gomega) {
		p := &toolgatev1alpha1.ToolProfile{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "p"}, p)).To(Succeed())
		g.Expect(p.Status.Conditions).To(ContainElement(And(HaveField("Type", toolgatev1alpha1.ConditionReady), HaveField("Status", metav1.ConditionTrue))))
	}).Should(Succeed())
}

// connect opens an MCP client session to the gateway, bound to session "s"
// of ns, authenticated with tok; progress receives the progress
// notifications.
func connect(ns, tok string, progress chan<- *mcp.ProgressNotificationParams, revision ...string) *mcp.ClientSession {
	return connectTo(server.URL, ns, tok, progress, revision...)
}

// connectTo is connect to the gateway at url.
func connectTo(url, ns, tok string, progress chan<- *mcp.ProgressNotificationParams, revision ...string) *mcp.ClientSession {
	c := mcp.NewClient(&mcp.Implementation{Name: "gateway-test", Version: "v0"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			if progress != nil {
				progress <- r.Params
			}
		},
	})
	t := &mcp.StreamableClientTransport{
		Endpoint:   fmt.Sprintf("%s/mcp/%s/s", url, ns),
		HTTPClient: &http.Client{Transport: bearer{token: tok, next: http.DefaultTransport}},
	}
	opts := &mcp.ClientSessionOptions{}
	if len(revision) > 0 {
		opts.ProtocolVersion = revision[0]
	}
	cs, err := c.Connect(ctx, t, opts)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(cs.Close)
	if len(revision) > 0 {
		Expect(cs.InitializeResult().ProtocolVersion).To(Equal(revision[0]))
	}
	return cs
}

func text(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, t.Text)
		}
	}
	return strings.Join(parts, "\n")
}

func calls(ns string) int {
	l := &toolgatev1alpha1.ToolCallList{}
	Expect(k8s.List(ctx, l, client.InNamespace(ns))).To(Succeed())
	return len(l.Items)
}

var _ = Describe("the MCP gateway", func() {
	var ns, user, tok string

	BeforeEach(func() {
		ns, user = agentNamespace()
		session(ns, user)
		tok = token(ns, "agent", audience)
	})

	It("lists the session's tools with their schemas, leaving out a tool the profile denies to every call", func() {
		cs := connect(ns, tok, nil)
		res, err := cs.ListTools(ctx, nil)
		Expect(err).NotTo(HaveOccurred())
		names := map[string]*mcp.Tool{}
		for _, t := range res.Tools {
			names[t.Name] = t
		}
		Expect(names).To(HaveLen(4))
		Expect(names).To(HaveKey("echo"))
		Expect(names).NotTo(HaveKey("secret"))
		in, err := json.Marshal(names["echo"].InputSchema)
		Expect(err).NotTo(HaveOccurred())
		Expect(in).To(MatchJSON(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"],"additionalProperties":false}`))
		out, err := json.Marshal(names["echo"].OutputSchema)
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(MatchJSON(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`))
		Expect(names["write"].OutputSchema).To(BeNil(), "a value that is not an object reaches the model as text")
	})

	It("runs an allowed call as one ToolCall made as the caller, and returns structured content", func() {
		cs := connect(ns, tok, nil)
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "hello"}})
		Expect(err).NotTo(HaveOccurred())
		Expect(res.IsError).To(BeFalse(), text(res))
		Expect(json.Marshal(res.StructuredContent)).To(MatchJSON(`{"text":"hello"}`))
		Expect(text(res)).To(MatchJSON(`{"text":"hello"}`))
		Expect(res.Meta).To(HaveKeyWithValue(agent.MetaOutcome, "Succeeded"))

		name, _ := res.Meta[agent.MetaToolCall].(string)
		tc := &toolgatev1alpha1.ToolCall{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, tc)).To(Succeed())
		Expect(tc.Spec.Requester).To(Equal(user))
		Expect(tc.Spec.Arguments).To(MatchJSON(`{"text":"hello"}`))
		Expect(tc.Status.Phase).To(Equal(toolgatev1alpha1.PhaseCommitted))
		Expect(calls(ns)).To(Equal(1))
	})

	It("hands the agent's trace context to the call: _meta.traceparent as is, and, with tracing on, under the gateway's span", func() {
		cs := connect(ns, tok, nil)
		const agentTP = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
		callWith := func(meta mcp.Meta) *toolgatev1alpha1.ToolCall {
			GinkgoHelper()
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "traced"}, Meta: meta})
			Expect(err).NotTo(HaveOccurred())
			Expect(res.IsError).To(BeFalse(), text(res))
			name, _ := res.Meta[agent.MetaToolCall].(string)
			tc := &toolgatev1alpha1.ToolCall{}
			Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, tc)).To(Succeed())
			return tc
		}
		Expect(callWith(mcp.Meta{"traceparent": agentTP}).Annotations).To(HaveKeyWithValue(toolgatev1alpha1.AnnotationTraceparent, agentTP))
		Expect(callWith(mcp.Meta{"traceparent": "not a trace"}).Annotations).NotTo(HaveKey(toolgatev1alpha1.AnnotationTraceparent), "a malformed one is dropped")

		rec := tracetest.NewSpanRecorder()
		prev := otel.GetTracerProvider()
		otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))
		tracing.SetActive(true)
		DeferCleanup(func() { otel.SetTracerProvider(prev); tracing.SetActive(false) })
		tc := callWith(mcp.Meta{"traceparent": agentTP})
		sc := tracing.Parse(tc.Annotations[toolgatev1alpha1.AnnotationTraceparent])
		Expect(sc.TraceID().String()).To(Equal("0af7651916cd43dd8448eb211c80319c"), "the agent's trace")
		var gw sdktrace.ReadOnlySpan
		for _, s := range rec.Ended() {
			if s.Name() == "mcp tools/call" && s.SpanContext().TraceID() == sc.TraceID() {
				gw = s
			}
		}
		Expect(gw).NotTo(BeNil(), "the gateway's span")
		Expect(gw.SpanContext().SpanID()).To(Equal(sc.SpanID()), "the call's parent is the gateway's span")
		Expect(gw.Parent().SpanID().String()).To(Equal("b7ad6b7169203331"), "under the agent's")
	})

	It("answers a denial as isError with the stable code, and an unlisted tool exactly as an unknown one", func() {
		cs := connect(ns, tok, nil)
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "danger", Arguments: map[string]any{"text": "rm"}})
		Expect(err).NotTo(HaveOccurred(), "a denial is a result, never a protocol error")
		Expect(res.IsError).To(BeTrue())
		Expect(res.Meta).To(HaveKeyWithValue(agent.MetaCode, "policy_denied"))
		Expect(res.Meta).To(HaveKeyWithValue(agent.MetaOutcome, "Denied"))
		Expect(text(res)).To(HavePrefix("policy_denied: "))

		hidden, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "secret", Arguments: map[string]any{"text": "x"}})
		Expect(err).NotTo(HaveOccurred())
		unknown, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "nothing", Arguments: map[string]any{"text": "x"}})
		Expect(err).NotTo(HaveOccurred())
		for _, r := range []*mcp.CallToolResult{hidden, unknown} {
			Expect(r.IsError).To(BeTrue())
			Expect(r.Meta).To(HaveKeyWithValue(agent.MetaCode, "unknown_tool"))
		}
		Expect(text(hidden)).To(Equal(strings.Replace(text(unknown), `"nothing"`, `"secret"`, 1)))
	})

	It("reports the pending ApprovalRequest as progress, then returns the result once a second identity approves", func() {
		progress := make(chan *mcp.ProgressNotificationParams, 16)
		cs := connect(ns, tok, progress)
		params := &mcp.CallToolParams{Name: "write", Arguments: map[string]any{"text": "x"}}
		params.SetProgressToken("write-1")
		type outcome struct {
			res *mcp.CallToolResult
			err error
		}
		done := make(chan outcome, 1)
		go func() {
			res, err := cs.CallTool(ctx, params)
			done <- outcome{res, err}
		}()

		var request string
		Eventually(progress, 60*time.Second).Should(Receive(Satisfy(func(p *mcp.ProgressNotificationParams) bool {
			request, _ = p.Meta[agent.MetaApprovalRequest].(string)
			return request != ""
		})))
		Expect(done).NotTo(Receive(), "the call waits for a person")

		ar := &toolgatev1alpha1.ApprovalRequest{}
		Eventually(func() error { return as("alice").Get(ctx, client.ObjectKey{Namespace: ns, Name: request}, ar) }).Should(Succeed())
		Expect(ar.Spec.Requester).To(Equal(user))
		base := ar.DeepCopy()
		ar.Spec.Decision = ar.DecisionOf(toolgatev1alpha1.DecisionApprove, "alice", "")
		Expect(as("alice").Patch(ctx, ar, client.MergeFrom(base))).To(Succeed())

		var got outcome
		Eventually(done, 60*time.Second).Should(Receive(&got))
		Expect(got.err).NotTo(HaveOccurred())
		Expect(got.res.IsError).To(BeFalse(), text(got.res))
		Expect(text(got.res)).To(Equal("written"))
	})

	It("gives the model a person's denial with its words, as isError with the stable code, never the arguments", func() {
		cs := connect(ns, tok, nil)
		done := make(chan *mcp.CallToolResult, 1)
		go func() {
			defer GinkgoRecover()
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "write", Arguments: map[string]any{"text": "the secret plan"}})
			Expect(err).NotTo(HaveOccurred())
			done <- res
		}()
		var ar *toolgatev1alpha1.ApprovalRequest
		Eventually(func() bool {
			list := &toolgatev1alpha1.ApprovalRequestList{}
			Expect(as("alice").List(ctx, list, client.InNamespace(ns))).To(Succeed())
			for i := range list.Items {
				if list.Items[i].Spec.Decision == nil && strings.Contains(list.Items[i].Spec.ArgumentsPreview, "the secret plan") {
					ar = &list.Items[i]
				}
			}
			return ar != nil
		}, 60*time.Second).Should(BeTrue())
		base := ar.DeepCopy()
		ar.Spec.Decision = ar.DecisionOf(toolgatev1alpha1.DecisionDeny, "alice", "write to the staging copy instead")
		Expect(as("alice").Patch(ctx, ar, client.MergeFrom(base))).To(Succeed())

		var res *mcp.CallToolResult
		Eventually(done, 60*time.Second).Should(Receive(&res))
		Expect(res.IsError).To(BeTrue())
		Expect(res.Meta[agent.MetaCode]).To(Equal("approval_rejected"))
		Expect(text(res)).To(ContainSubstring("write to the staging copy instead"), "the approver's words reach the model")
		Expect(text(res)).NotTo(ContainSubstring("the secret plan"), "the result never repeats the arguments")
	})

	It("runs one model turn sent as parallel requests with _meta, committing in model order", func() {
		cs := connect(ns, tok, nil)
		type answer struct {
			index int
			res   *mcp.CallToolResult
			err   error
		}
		answers := make(chan answer, 3)
		calls := []*mcp.CallToolParams{
			{Name: "echo", Arguments: map[string]any{"text": "a"}},
			{Name: "echo", Arguments: map[string]any{"text": "b"}},
			{Name: "write", Arguments: map[string]any{"text": "c"}},
		}
		for i, p := range calls {
			p.Meta = mcp.Meta{agent.MetaTurn: 0, agent.MetaIndex: i, agent.MetaTurnSize: len(calls), agent.MetaCallID: fmt.Sprintf("call_%d", i)}
			go func() {
				res, err := cs.CallTool(ctx, p)
				answers <- answer{i, res, err}
			}()
		}
		// The write waits for a person; approve it once it asks.
		ar := &toolgatev1alpha1.ApprovalRequest{}
		name := agent.CallName("s", 0, 2)
		Eventually(func() error { return as("alice").Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, ar) }).Should(Succeed())
		base := ar.DeepCopy()
		ar.Spec.Decision = ar.DecisionOf(toolgatev1alpha1.DecisionApprove, "alice", "")
		Expect(as("alice").Patch(ctx, ar, client.MergeFrom(base))).To(Succeed())

		got := map[int]*mcp.CallToolResult{}
		for range calls {
			var a answer
			Eventually(answers, 60*time.Second).Should(Receive(&a))
			Expect(a.err).NotTo(HaveOccurred())
			Expect(a.res.IsError).To(BeFalse(), text(a.res))
			got[a.index] = a.res
		}
		for i := range calls {
			Expect(got[i].Meta).To(HaveKeyWithValue(agent.MetaCommitSequence, BeEquivalentTo(i)), "model order")
			Expect(got[i].Meta).To(HaveKeyWithValue(agent.MetaToolCall, agent.CallName("s", 0, int32(i))))
		}
		tc := &toolgatev1alpha1.ToolCall{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: agent.CallName("s", 0, 1)}, tc)).To(Succeed())
		Expect(tc.Spec.CallID).To(Equal("call_1"))
		Expect(tc.Spec.TurnSize).To(BeEquivalentTo(3))
	})

	DescribeTable("cancels the ToolCall when the client cancels the request", func(revision string) {
		progress := make(chan *mcp.ProgressNotificationParams, 16)
		cs := connect(ns, tok, progress, revision)
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		params := &mcp.CallToolParams{Name: "slow", Arguments: map[string]any{"text": "x"}}
		params.SetProgressToken("slow-1")
		errs := make(chan error, 1)
		go func() {
			_, err := cs.CallTool(cctx, params)
			errs <- err
		}()
		var name string
		Eventually(progress, 60*time.Second).Should(Receive(Satisfy(func(p *mcp.ProgressNotificationParams) bool {
			name, _ = p.Meta[agent.MetaToolCall].(string)
			return strings.HasSuffix(p.Message, string(toolgatev1alpha1.PhaseRunning))
		})))
		cancel()
		Eventually(errs).Should(Receive(HaveOccurred()))
		Eventually(func(g Gomega) {
			tc := &toolgatev1alpha1.ToolCall{}
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, tc)).To(Succeed())
			g.Expect(tc.Spec.CancelRequested).To(BeTrue())
			g.Expect(tc.Status.Result).NotTo(BeNil())
			g.Expect(tc.Status.Result.Outcome).To(Equal(toolgatev1alpha1.OutcomeCancelled))
		}, 60*time.Second).Should(Succeed())
	},
		Entry("2026-07-28: the client aborts the request", "2026-07-28"),
		Entry("2025-11-25: the client sends notifications/cancelled in its MCP session", "2025-11-25"),
		Entry("2025-06-18: the client sends notifications/cancelled in its MCP session", "2025-06-18"),
	)

	It("runs calls past the names another agent squatted, whether it picks the turn or the client gives it", func() {
		bind(ns, rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "mallory"}, "agent")
		mallory := as("mallory")
		for turn := range int64(70) {
			squat := agent.NewCall(ns, "s", agent.Place{Turn: turn, TurnSize: 1}, "danger", `{"text":"squat"}`, "mallory")
			Eventually(func() error { return mallory.Create(ctx, squat) }).Should(Succeed())
		}
		cs := connect(ns, tok, nil)
		for _, p := range []*mcp.CallToolParams{
			{Name: "echo", Arguments: map[string]any{"text": "auto"}},
			{Name: "echo", Arguments: map[string]any{"text": "given"}, Meta: mcp.Meta{agent.MetaTurn: 5, agent.MetaIndex: 0, agent.MetaTurnSize: 1}},
		} {
			res, err := cs.CallTool(ctx, p)
			Expect(err).NotTo(HaveOccurred())
			Expect(res.IsError).To(BeFalse(), text(res))
			Expect(res.Meta).To(HaveKeyWithValue(agent.MetaOutcome, "Succeeded"))
			name, _ := res.Meta[agent.MetaToolCall].(string)
			tc := &toolgatev1alpha1.ToolCall{}
			Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, tc)).To(Succeed())
			Expect(tc.Spec.Requester).To(Equal(user))
			Expect(tc.Spec.Arguments).To(Equal(fmt.Sprintf(`{"text":%q}`, p.Arguments.(map[string]any)["text"])))
		}
	})

	It("answers a flood of made-up and forged tokens without a TokenReview each, and a known caller through it", func() {
		cs := connect(ns, tok, nil)
		_, err := cs.ListTools(ctx, nil)
		Expect(err).NotTo(HaveOccurred())
		post := func(header string) int {
			body := `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`
			req, err := http.NewRequest(http.MethodPost, fmt.Sprintf("%s/mcp/%s/s", server.URL, ns), strings.NewReader(body))
			Expect(err).NotTo(HaveOccurred())
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			req.Header.Set("Authorization", header)
			resp, err := http.DefaultClient.Do(req)
			Expect(err).NotTo(HaveOccurred())
			Expect(resp.Body.Close()).To(Succeed())
			return resp.StatusCode
		}
		statuses := map[int]int{}
		for i := range 400 {
			statuses[post(fmt.Sprintf("Bearer made-up-%d", i))]++
		}
		Expect(statuses).To(Equal(map[int]int{http.StatusUnauthorized: 400}), "a made-up token is refused at once")
		// Shaped as the audience's tokens, under the header of a real one
		// (the issuer's key ID) or none, with made-up signatures: the
		// issuer's published keys refuse them without a review (the
		// review budget, which a unit test floods, is never reached), in
		// every form of the header the bearer check reads.
		enc := base64.RawURLEncoding.EncodeToString
		realHeader := strings.Split(tok, ".")[0]
		schemes := []string{"Bearer ", "Bearer\t", "bearer  "}
		limitedBefore := counter("toolgate_gateway_requests_rejected_total", "review_budget")
		statuses = map[int]int{}
		for i := range 100 {
			claims := fmt.Sprintf(`{"aud":[%q],"exp":%d,"jti":"forged-%d"}`, audience, time.Now().Add(time.Hour).Unix(), i)
			header := realHeader
			if i%2 == 1 {
				header = enc([]byte(`{"alg":"RS256"}`))
			}
			statuses[post(schemes[i%3]+header+"."+enc([]byte(claims))+"."+enc([]byte("sig")))]++
		}
		Expect(statuses).To(Equal(map[int]int{http.StatusUnauthorized: 100}), "a forged token is refused at once")
		Expect(counter("toolgate_gateway_requests_rejected_total", "review_budget")).To(Equal(limitedBefore), "no forged token reached the review budget")
		// The known caller is answered from memory meanwhile.
		_, err = cs.ListTools(ctx, nil)
		Expect(err).NotTo(HaveOccurred())
		// The next specs' callers come from the same address: its budget
		// (20 at once, 10 a second) refills first.
		time.Sleep(2 * time.Second)
	})

	It("answers 401 and creates nothing without a valid token for its audience", func() {
		before := calls(ns)
		body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x"}}}`
		for what, header := range map[string]string{
			"no token":            "",
			"a made-up token":     "Bearer not-a-token",
			"a token for the API": "Bearer " + token(ns, "agent"),
			"another audience":    "Bearer " + token(ns, "agent", "someone-else"),
			"not a bearer token":  "Basic YWdlbnQ6cGFzcw==",
		} {
			req, err := http.NewRequest(http.MethodPost, fmt.Sprintf("%s/mcp/%s/s", server.URL, ns), strings.NewReader(body))
			Expect(err).NotTo(HaveOccurred())
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			if header != "" {
				req.Header.Set("Authorization", header)
			}
			resp, err := http.DefaultClient.Do(req)
			Expect(err).NotTo(HaveOccurred())
			Expect(resp.Body.Close()).To(Succeed())
			Expect(resp.StatusCode).To(Equal(http.StatusUnauthorized), what)
		}
		Expect(calls(ns)).To(Equal(before))
		Expect(counter("toolgate_gateway_requests_rejected_total", "unauthenticated")).To(BeNumerically(">=", 5))
	})

	It("leaves the decision to the API server: another identity's session, and a namespace the gateway may not act in", func() {
		// Another ServiceAccount of the namespace, with the same role, at
		// the agent's session.
		Expect(k8s.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "other"}})).To(Succeed())
		bind(ns, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "other"}, "agent")
		other := connect(ns, token(ns, "other", audience), nil)
		_, err := other.ListTools(ctx, nil)
		Expect(err).To(MatchError(ContainSubstring("belongs to another identity")))
		_, err = other.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "x"}})
		Expect(err).To(MatchError(ContainSubstring("belongs to another identity")))

		// A namespace whose ServiceAccounts the gateway may not act as.
		n := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "gw-unbound-"}}
		Expect(k8s.Create(ctx, n)).To(Succeed())
		Expect(k8s.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: n.Name, Name: "agent"}})).To(Succeed())
		bind(n.Name, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: n.Name, Name: "agent"}, "agent")
		unbound := connect(n.Name, token(n.Name, "agent", audience), nil)
		_, err = unbound.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "x"}})
		Expect(err).To(HaveOccurred())
		Expect(calls(n.Name)).To(BeZero())
		Expect(calls(ns)).To(BeZero())
	})

	It("refuses calls beyond an identity's limit with a clear error, creating nothing for them", func() {
		limited := startGateway(gatewayCtx, gateway.Options{MaxCallsPerIdentity: 1})
		DeferCleanup(func() {
			limited.CloseClientConnections()
			limited.Close()
		})
		cs := connectTo(limited.URL, ns, tok, nil)
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() {
			_, _ = cs.CallTool(cctx, &mcp.CallToolParams{Name: "slow", Arguments: map[string]any{"text": "x"}})
		}()
		Eventually(func() int { return calls(ns) }).Should(Equal(1))
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "y"}})
		Expect(err).NotTo(HaveOccurred())
		Expect(res.IsError).To(BeTrue())
		Expect(res.Meta).To(HaveKeyWithValue(agent.MetaCode, "concurrency_limit"))
		Expect(text(res)).To(ContainSubstring("1 tools/call requests in flight"))
		Expect(calls(ns)).To(Equal(1))
	})
})

// counter reads a counter of the suite's gateway with one label value.
func counter(name, label string) float64 {
	families, err := metrics.Gather()
	Expect(err).NotTo(HaveOccurred())
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetValue() == label {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
