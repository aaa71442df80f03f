package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/codes"
	"github.com/toolgate/toolgate/pkg/agent"
	"github.com/toolgate/toolgate/test/mcpclients"
)

// approveWhenAsked approves, as alice, the ApprovalRequest of the call at
// (turn, index) of session "s" once it exists, until ctx ends.
func approveWhenAsked(ctx context.Context, ns string, turn int64, index int32) {
	go func() {
		defer GinkgoRecover()
		name := agent.CallName("s", turn, index)
		for ctx.Err() == nil {
			ar := &toolgatev1alpha1.ApprovalRequest{}
			if err := as("alice").Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, ar); err == nil {
				base := ar.DeepCopy()
				ar.Spec.Decision = &toolgatev1alpha1.ApprovalDecision{Action: toolgatev1alpha1.DecisionApprove, DecidedBy: "alice"}
				if as("alice").Patch(ctx, ar, client.MergeFrom(base)) == nil {
					return
				}
			}
			time.Sleep(200 * time.Millisecond)
		}
	}()
}

// running returns a CancelWhen that returns once the named call runs.
func running(ns, name string) func(context.Context) error {
	return func(ctx context.Context) error {
		for {
			tc := &toolgatev1alpha1.ToolCall{}
			if k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, tc) == nil && tc.Status.Phase == toolgatev1alpha1.PhaseRunning {
				return nil
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
}

// callsOf describes the calls of ns, for a failure's message.
func callsOf(ns string) string {
	l := &toolgatev1alpha1.ToolCallList{}
	if err := k8s.List(ctx, l, client.InNamespace(ns)); err != nil {
		return err.Error()
	}
	out := "calls:"
	for _, tc := range l.Items {
		out += fmt.Sprintf(" %s(%s cancel=%v)", tc.Name, tc.Status.Phase, tc.Spec.CancelRequested)
	}
	return out
}

// expectScenario checks what a client saw of the common scenario
// (test/mcpclients/common.mjs) from turn, and the calls it left.
func expectScenario(ns string, turn int64, s *mcpclients.Scenario) {
	Expect(s.List.Tools).To(Equal([]string{"danger", "echo", "slow", "write"}), "secret is denied to every call: not listed")

	Expect(s.Turn.Results).To(HaveLen(3))
	for i, r := range s.Turn.Results {
		Expect(r.IsError).To(BeFalse(), r.Text)
		Expect(r.Meta).To(HaveKeyWithValue(agent.MetaToolCall, agent.CallName("s", turn, int32(i))))
		Expect(r.Meta).To(HaveKeyWithValue(agent.MetaOutcome, string(toolgatev1alpha1.OutcomeSucceeded)))
		Expect(r.Meta).To(HaveKeyWithValue(agent.MetaCommitSequence, BeNumerically("==", turn*1+int64(i))), "model order")
	}
	Expect(s.Turn.Results[0].Structured).To(Equal(map[string]any{"text": "a"}))
	Expect(s.Turn.Results[1].Structured).To(Equal(map[string]any{"text": "b"}))
	Expect(s.Turn.Results[2].Text).To(Equal("written"))
	Expect(s.Turn.Progress).To(ContainElement(ContainSubstring("approvalrequest/"+agent.CallName("s", turn, 2))), "the client hears that the write waits for a person")

	Expect(s.Denied.IsError).To(BeTrue(), "a denial is a tool error the model reads")
	Expect(s.Denied.Text).To(HavePrefix(codes.PolicyDenied + ": "))
	Expect(s.Denied.Meta).To(HaveKeyWithValue(agent.MetaCode, codes.PolicyDenied))

	Expect(s.Cancelled.Resolved).To(BeNil(), "the client aborted the call")
	Expect(s.Cancelled.Error).NotTo(BeNil())
	slow := &toolgatev1alpha1.ToolCall{}
	Eventually(func(g Gomega) {
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: agent.CallName("s", turn+2, 0)}, slow)).To(Succeed())
		g.Expect(slow.Final()).To(BeTrue())
	}).Should(Succeed())
	Expect(slow.Status.Result.Outcome).To(Equal(toolgatev1alpha1.OutcomeCancelled), "the client's abort cancels the call")
}

var _ = Describe("MCP clients from the npm registry", func() {
	BeforeEach(func() {
		Expect(mcpclients.Install()).To(Succeed())
	})

	type variant struct {
		script string
		env    []string
		// revision the client must end up speaking.
		revision string
	}
	DescribeTable("list, run a turn with a parallel pair and an approved write, read a denial, and cancel",
		func(v variant) {
			ns, user := agentNamespace()
			session(ns, user)
			tok := token(ns, "agent", audience)
			rctx, cancel := context.WithTimeout(ctx, 90*time.Second)
			defer cancel()
			approveWhenAsked(rctx, ns, 0, 2)
			r, err := mcpclients.Run(rctx, v.script, mcpclients.Target{
				URL: fmt.Sprintf("%s/mcp/%s/s", server.URL, ns), Token: tok, Env: v.env,
				CancelWhen: running(ns, agent.CallName("s", 2, 0)),
			})
			Expect(err).NotTo(HaveOccurred(), callsOf(ns))
			s, err := r.Scenario()
			Expect(err).NotTo(HaveOccurred())
			if v.revision != "" {
				Expect(s.Connected.ProtocolVersion).To(Equal(v.revision))
			}
			expectScenario(ns, 0, s)
		},
		Entry("the TypeScript client v1", variant{script: "ts-v1.mjs"}),
		Entry("the TypeScript client v2, 2025 handshake", variant{script: "ts-v2.mjs", env: []string{"MODE=legacy"}, revision: "2025-11-25"}),
		Entry("the TypeScript client v2, negotiating", variant{script: "ts-v2.mjs", env: []string{"MODE=auto"}, revision: "2026-07-28"}),
		Entry("the TypeScript client v2, pinned to 2026-07-28", variant{script: "ts-v2.mjs", env: []string{"MODE=2026-07-28"}, revision: "2026-07-28"}),
	)
})

var _ = Describe("the OpenAI Agents SDK from the npm registry", func() {
	It("runs an agent whose model makes a parallel turn with an approved write, reads a denial, and is cancelled", func() {
		Expect(mcpclients.Install()).To(Succeed())
		ns, user := agentNamespace()
		session(ns, user)
		rctx, cancel := context.WithTimeout(ctx, 90*time.Second)
		defer cancel()
		approveWhenAsked(rctx, ns, 0, 2)
		r, err := mcpclients.Run(rctx, "openai-agents.mjs", mcpclients.Target{
			URL: fmt.Sprintf("%s/mcp/%s/s", server.URL, ns), Token: token(ns, "agent", audience),
			CancelWhen: running(ns, agent.CallName("s", 2, 0)),
		})
		Expect(err).NotTo(HaveOccurred(), callsOf(ns))

		var list struct {
			Tools []string `json:"tools"`
		}
		Expect(r.Into("list", &list)).To(Succeed())
		Expect(list.Tools).To(Equal([]string{"danger", "echo", "slow", "write"}))

		// What the model read back: each call's output, once per call.
		var run struct {
			Final string `json:"final"`
			Seen  []struct {
				CallID string `json:"callId"`
				Output []struct {
					Text string `json:"text"`
				} `json:"output"`
			} `json:"seen"`
		}
		Expect(r.Into("run", &run)).To(Succeed())
		Expect(run.Final).To(Equal("done"))
		read := map[string]string{}
		for _, s := range run.Seen {
			Expect(s.Output).NotTo(BeEmpty())
			read[s.CallID] = s.Output[0].Text
		}
		Expect(read).To(HaveLen(4))
		Expect(read).To(HaveKeyWithValue("call_a", `{"text":"a"}`))
		Expect(read).To(HaveKeyWithValue("call_b", `{"text":"b"}`))
		Expect(read).To(HaveKeyWithValue("call_w", "written"))
		Expect(read).To(HaveKeyWithValue("call_d", HavePrefix(codes.PolicyDenied+": ")), "a denial is a tool output the model reads")

		// In the cluster: the model's turn in its order, under the model's
		// call IDs, then the denial, then the cancelled call.
		for i, id := range []string{"call_a", "call_b", "call_w"} {
			tc := &toolgatev1alpha1.ToolCall{}
			Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: agent.CallName("s", 0, int32(i))}, tc)).To(Succeed())
			Expect(tc.Spec.CallID).To(Equal(id))
			Expect(tc.Spec.TurnSize).To(BeEquivalentTo(3))
			Expect(tc.Status.Schedule.CommitSequence).To(HaveValue(BeEquivalentTo(i)), "model order")
		}
		denied := &toolgatev1alpha1.ToolCall{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: agent.CallName("s", 1, 0)}, denied)).To(Succeed())
		Expect(denied.Spec.CallID).To(Equal("call_d"))
		Expect(denied.Status.Result.ErrorCode).To(Equal(codes.PolicyDenied))

		var cancelled struct {
			Error *mcpclients.Failure `json:"error"`
		}
		Expect(r.Into("cancelled", &cancelled)).To(Succeed())
		Expect(cancelled.Error).NotTo(BeNil(), "the aborted run fails")
		Expect(cancelled.Error.Name).To(Equal("AbortError"))
		slow := &toolgatev1alpha1.ToolCall{}
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: agent.CallName("s", 2, 0)}, slow)).To(Succeed())
			g.Expect(slow.Final()).To(BeTrue())
		}).Should(Succeed())
		Expect(slow.Status.Result.Outcome).To(Equal(toolgatev1alpha1.OutcomeCancelled))
	})
})

var _ = Describe("LangChain's MCP adapters from the npm registry", func() {
	It("run a model turn as the tool node does, in model order through the placement headers, with an approved write, a denial and a cancel", func() {
		Expect(mcpclients.Install()).To(Succeed())
		ns, user := agentNamespace()
		session(ns, user)
		rctx, cancel := context.WithTimeout(ctx, 90*time.Second)
		defer cancel()
		approveWhenAsked(rctx, ns, 0, 2)
		r, err := mcpclients.Run(rctx, "langchain.mjs", mcpclients.Target{
			URL: fmt.Sprintf("%s/mcp/%s/s", server.URL, ns), Token: token(ns, "agent", audience),
			CancelWhen: running(ns, agent.CallName("s", 2, 0)),
		})
		Expect(err).NotTo(HaveOccurred(), callsOf(ns))
		type read struct {
			ID      string `json:"id"`
			IsError bool   `json:"isError"`
			Text    string `json:"text"`
		}
		var list struct {
			Tools []string `json:"tools"`
		}
		Expect(r.Into("list", &list)).To(Succeed())
		Expect(list.Tools).To(Equal([]string{"danger", "echo", "slow", "write"}))
		var turn struct {
			Results []read `json:"results"`
		}
		Expect(r.Into("turn", &turn)).To(Succeed())
		// The tool node's message is the MCP text block as JSON (LangChain
		// keeps toolgate's _meta beside the text): the model reads the text.
		for i := range turn.Results {
			var block struct {
				Text string         `json:"text"`
				Meta map[string]any `json:"meta"`
			}
			Expect(json.Unmarshal([]byte(turn.Results[i].Text), &block)).To(Succeed(), turn.Results[i].Text)
			Expect(block.Meta).To(HaveKeyWithValue(agent.MetaToolCall, agent.CallName("s", 0, int32(i))))
			turn.Results[i].Text = block.Text
		}
		Expect(turn.Results).To(Equal([]read{{"call_a", false, `{"text":"a"}`}, {"call_b", false, `{"text":"b"}`}, {"call_w", false, "written"}}))
		for i, id := range []string{"call_a", "call_b", "call_w"} {
			tc := &toolgatev1alpha1.ToolCall{}
			Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: agent.CallName("s", 0, int32(i))}, tc)).To(Succeed())
			Expect(tc.Spec.CallID).To(Equal(id))
			Expect(tc.Status.Schedule.CommitSequence).To(HaveValue(BeEquivalentTo(i)), "model order")
		}
		var denied read
		Expect(r.Into("denied", &denied)).To(Succeed())
		Expect(denied.IsError).To(BeTrue())
		Expect(denied.Text).To(ContainSubstring(codes.PolicyDenied+": "), "the tool node hands the model the denial")
		var cancelled read
		Expect(r.Into("cancelled", &cancelled)).To(Succeed())
		Expect(cancelled.IsError).To(BeTrue(), "the aborted call fails")
		slow := &toolgatev1alpha1.ToolCall{}
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: agent.CallName("s", 2, 0)}, slow)).To(Succeed())
			g.Expect(slow.Final()).To(BeTrue())
		}).Should(Succeed())
		Expect(slow.Status.Result.Outcome).To(Equal(toolgatev1alpha1.OutcomeCancelled))
	})
})
