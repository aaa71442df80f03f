package mcpclients

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	. "github.com/onsi/gomega" //nolint:staticcheck,revive // the checks read as the specs that call them

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/codes"
	"github.com/toolgate/toolgate/pkg/agent"
)

// The profile every client runs against (its tools and rules): echo returns
// its arguments as an object (structured content), write asks a person,
// danger is denied for the text "rm", secret is denied to every call (so
// not listed), slow sleeps until cancelled.
var (
	// Listed is the tool list every client must see.
	Listed = []string{"danger", "echo", "slow", "write"}
)

// Client is one real client and how its run is checked.
type Client struct {
	// Name says which client and how it is set up.
	Name string
	// Script is its file in Dir.
	Script string
	// Env are its options.
	Env []string
	// Revision is the protocol revision it must end up speaking ("" for
	// any).
	Revision string
	check    func(r *Report, k Cluster, revision string)
}

// Clients are the clients the suites run.
var Clients = []Client{
	{Name: "the TypeScript client v1", Script: "ts-v1.mjs", check: checkScenario},
	{Name: "the TypeScript client v2, 2025 handshake", Script: "ts-v2.mjs", Env: []string{"MODE=legacy"}, Revision: "2025-11-25", check: checkScenario},
	{Name: "the TypeScript client v2, negotiating", Script: "ts-v2.mjs", Env: []string{"MODE=auto"}, Revision: "2026-07-28", check: checkScenario},
	{Name: "the TypeScript client v2, pinned to 2026-07-28", Script: "ts-v2.mjs", Env: []string{"MODE=2026-07-28"}, Revision: "2026-07-28", check: checkScenario},
	{Name: "the OpenAI Agents SDK, its model scripted", Script: "openai-agents.mjs", check: checkAgents},
	{Name: "LangChain's MCP adapters, as the tool node runs a turn", Script: "langchain.mjs", check: checkLangChain},
	{Name: "docs/mcp.md's plain TypeScript recipe", Script: "recipe-typescript.mjs", check: checkRecipe},
}

// RecipeResults are the lines docs/mcp.md's plain recipes print of their
// turn.
var RecipeResults = []string{`result: {"text":"a"}`, `result: {"text":"b"}`}

// checkRecipe checks a run of docs/mcp.md's TypeScript recipe.
func checkRecipe(r *Report, k Cluster, _ string) {
	Expect(r.Lines).To(Equal(append([]string{"tools: echo write danger slow"}, RecipeResults...)), r.Stderr)
	k.ExpectTurnInOrder("t0-i0", "t0-i1")
}

// Cluster is how a check reads and acts on the cluster behind the gateway.
type Cluster struct {
	// Session is the session the endpoint names.
	Session string
	// Get reads a ToolCall of the session's namespace.
	Get func(ctx context.Context, name string) (*toolgatev1alpha1.ToolCall, error)
	// Approve approves, as a person, the ApprovalRequest of the named call;
	// an error means not yet (it is tried again).
	Approve func(ctx context.Context, name string) error
}

// call is the name of the call at (turn, index) of the session.
func (k Cluster) call(turn int64, index int32) string { return agent.CallName(k.Session, turn, index) }

// describe says the phase of every call the scenario makes, for a failure.
func (k Cluster) describe(ctx context.Context) string {
	out := "calls:"
	for _, name := range []string{k.call(0, 0), k.call(0, 1), k.call(0, 2), k.call(1, 0), k.call(2, 0)} {
		tc, err := k.Get(ctx, name)
		if err != nil {
			out += fmt.Sprintf(" %s(%v)", name, err)
			continue
		}
		out += fmt.Sprintf(" %s(%s cancel=%v)", name, tc.Status.Phase, tc.Spec.CancelRequested)
	}
	return out
}

// Exercise runs the client against the session at url as the identity
// token stands for, approving the write of its turn and cancelling its slow
// call once it runs, then checks what the client saw and the calls it left.
// The session is new: the client uses turns 0 to 2.
func (c Client) Exercise(ctx context.Context, url, token string, k Cluster) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	go func() {
		for ctx.Err() == nil && k.Approve(ctx, k.call(0, 2)) != nil {
			time.Sleep(250 * time.Millisecond)
		}
	}()
	r, err := Run(ctx, c.Script, Target{URL: url, Token: token, Env: c.Env, CancelWhen: func(ctx context.Context) error {
		for {
			if tc, err := k.Get(ctx, k.call(2, 0)); err == nil && tc.Status.Phase == toolgatev1alpha1.PhaseRunning {
				return nil
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
	}})
	Expect(err).NotTo(HaveOccurred(), k.describe(context.WithoutCancel(ctx)))
	c.check(r, k, c.Revision)
}

// expectCancelled checks the slow call was cancelled, not left running.
func (k Cluster) expectCancelled() {
	var slow *toolgatev1alpha1.ToolCall
	Eventually(func(g Gomega) {
		var err error
		slow, err = k.Get(context.Background(), k.call(2, 0))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(slow.Final()).To(BeTrue())
	}, time.Minute).Should(Succeed())
	Expect(slow.Status.Result.Outcome).To(Equal(toolgatev1alpha1.OutcomeCancelled), "the client's abort cancels the call")
}

// ExpectTurnInOrder checks turn 0's calls carry the model's call IDs and
// committed in model order.
func (k Cluster) ExpectTurnInOrder(ids ...string) {
	for i, id := range ids {
		tc, err := k.Get(context.Background(), k.call(0, int32(i)))
		Expect(err).NotTo(HaveOccurred())
		Expect(tc.Spec.CallID).To(Equal(id))
		Expect(tc.Spec.TurnSize).To(BeEquivalentTo(len(ids)))
		Expect(tc.Status.Schedule.CommitSequence).To(HaveValue(BeEquivalentTo(i)), "model order")
	}
}

// checkScenario checks the common scenario (common.mjs).
func checkScenario(r *Report, k Cluster, revision string) {
	defer k.expectCancelled()
	s, err := r.Scenario()
	Expect(err).NotTo(HaveOccurred())
	if revision != "" {
		Expect(s.Connected.ProtocolVersion).To(Equal(revision))
	}
	Expect(s.List.Tools).To(Equal(Listed), "secret is denied to every call: not listed")

	Expect(s.Turn.Results).To(HaveLen(3))
	for i, res := range s.Turn.Results {
		Expect(res.IsError).To(BeFalse(), res.Text)
		Expect(res.Meta).To(HaveKeyWithValue(agent.MetaToolCall, k.call(0, int32(i))))
		Expect(res.Meta).To(HaveKeyWithValue(agent.MetaOutcome, string(toolgatev1alpha1.OutcomeSucceeded)))
		Expect(res.Meta).To(HaveKeyWithValue(agent.MetaCommitSequence, BeNumerically("==", i)), "model order")
	}
	Expect(s.Turn.Results[0].Structured).To(Equal(map[string]any{"text": "a"}))
	Expect(s.Turn.Results[1].Structured).To(Equal(map[string]any{"text": "b"}))
	Expect(s.Turn.Results[2].Text).To(Equal("written"))
	Expect(s.Turn.Progress).To(ContainElement(ContainSubstring("approvalrequest/"+k.call(0, 2))), "the client hears that the write waits for a person")

	Expect(s.Denied.IsError).To(BeTrue(), "a denial is a tool error the model reads")
	Expect(s.Denied.Text).To(HavePrefix(codes.PolicyDenied + ": "))
	Expect(s.Denied.Meta).To(HaveKeyWithValue(agent.MetaCode, codes.PolicyDenied))

	Expect(s.Cancelled.Resolved).To(BeNil(), "the client aborted the call")
	Expect(s.Cancelled.Error).NotTo(BeNil())
}

// checkAgents checks the OpenAI Agents SDK's runs (openai-agents.mjs).
func checkAgents(r *Report, k Cluster, _ string) {
	defer k.expectCancelled()
	var list struct {
		Tools []string `json:"tools"`
	}
	Expect(r.Into("list", &list)).To(Succeed())
	Expect(list.Tools).To(Equal(Listed))

	// What the model read back: each call's output (every request carries
	// the whole history: each call once).
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
	k.ExpectTurnInOrder("call_a", "call_b", "call_w")
	denied, err := k.Get(context.Background(), k.call(1, 0))
	Expect(err).NotTo(HaveOccurred())
	Expect(denied.Spec.CallID).To(Equal("call_d"))
	Expect(denied.Status.Result.ErrorCode).To(Equal(codes.PolicyDenied))

	var cancelled struct {
		Error *Failure `json:"error"`
	}
	Expect(r.Into("cancelled", &cancelled)).To(Succeed())
	Expect(cancelled.Error).NotTo(BeNil(), "the aborted run fails")
	Expect(cancelled.Error.Name).To(Equal("AbortError"))
}

// checkLangChain checks LangChain's turn (langchain.mjs).
func checkLangChain(r *Report, k Cluster, _ string) {
	defer k.expectCancelled()
	type read struct {
		ID      string `json:"id"`
		IsError bool   `json:"isError"`
		Text    string `json:"text"`
	}
	var list struct {
		Tools []string `json:"tools"`
	}
	Expect(r.Into("list", &list)).To(Succeed())
	Expect(list.Tools).To(Equal(Listed))
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
		Expect(block.Meta).To(HaveKeyWithValue(agent.MetaToolCall, k.call(0, int32(i))))
		turn.Results[i].Text = block.Text
	}
	Expect(turn.Results).To(Equal([]read{{"call_a", false, `{"text":"a"}`}, {"call_b", false, `{"text":"b"}`}, {"call_w", false, "written"}}))
	k.ExpectTurnInOrder("call_a", "call_b", "call_w")
	var denied read
	Expect(r.Into("denied", &denied)).To(Succeed())
	Expect(denied.IsError).To(BeTrue())
	Expect(denied.Text).To(ContainSubstring(codes.PolicyDenied+": "), "the tool node hands the model the denial")
	var cancelled read
	Expect(r.Into("cancelled", &cancelled)).To(Succeed())
	Expect(cancelled.IsError).To(BeTrue(), "the aborted call fails")
}
