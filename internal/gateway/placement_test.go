package gateway

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	tu "github.com/toolgate/toolgate/internal/testutil"
	"github.com/toolgate/toolgate/pkg/agent"
)

// meta decodes _meta as the SDK does (JSON numbers become float64).
func decodeMeta(t *testing.T, text string) mcp.Meta {
	t.Helper()
	m := mcp.Meta{}
	if err := json.Unmarshal([]byte(text), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestPlacement(t *testing.T) {
	for _, tc := range []struct {
		name, meta string
		want       position
		err        string
	}{
		{name: "none: a turn of its own", meta: `{}`, want: position{turnSize: 1, auto: true}},
		{name: "a place in a turn", meta: `{"toolgate.dev/turn":7,"toolgate.dev/index":2,"toolgate.dev/turnSize":3,"toolgate.dev/callID":"call_9"}`,
			want: position{turn: 7, index: 2, turnSize: 3, callID: "call_9"}},
		{name: "turn alone", meta: `{"toolgate.dev/turn":0}`, want: position{turnSize: 1}},
		{name: "index without turn", meta: `{"toolgate.dev/index":1,"toolgate.dev/turnSize":2}`, err: "need"},
		{name: "index past the turn", meta: `{"toolgate.dev/turn":1,"toolgate.dev/index":2,"toolgate.dev/turnSize":2}`, err: "must be below"},
		{name: "fractional turn", meta: `{"toolgate.dev/turn":1.5}`, err: "must be an integer"},
		{name: "negative turn", meta: `{"toolgate.dev/turn":-1}`, err: "must be an integer from 0"},
		{name: "turn as text", meta: `{"toolgate.dev/turn":"1"}`, err: "must be an integer"},
		{name: "turn too large", meta: `{"toolgate.dev/turn":1e12}`, err: "must be an integer from 0"},
		{name: "size too large", meta: `{"toolgate.dev/turn":1,"toolgate.dev/turnSize":2000}`, err: "from 1 to 1024"},
		{name: "empty callID", meta: `{"toolgate.dev/callID":""}`, err: "non-empty string"},
		{name: "a misspelt key is refused, not ignored", meta: `{"toolgate.dev/turn":1,"toolgate.dev/callId":"call_9"}`, err: `unknown _meta key "toolgate.dev/callId"`},
		{name: "other prefixes are the client's own", meta: `{"progressToken":1,"example.com/trace":"x"}`, want: position{turnSize: 1, auto: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := placement(decodeMeta(t, tc.meta))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestUsable(t *testing.T) {
	base := func() *tu.ToolProfileWrapper {
		return tu.MakeToolProfile("ns", "p").Tools(tu.MakeTool("a").Obj(), tu.MakeTool("b").Obj())
	}
	for _, tc := range []struct {
		name    string
		profile *toolgatev1alpha1.ToolProfile
		session *toolgatev1alpha1.AgentSession
		listed  []string
	}{
		{name: "Restricted and no rule: nothing", profile: base().Obj(), listed: nil},
		{name: "Trusted: everything", profile: base().Preset(toolgatev1alpha1.PresetTrusted).Obj(), listed: []string{"a", "b"}},
		{name: "an allow rule lists its tool", profile: base().PreRule("r", toolgatev1alpha1.ActionAllow, "", "a").Obj(), listed: []string{"a"}},
		{name: "an ask rule lists its tool", profile: base().PreRule("r", toolgatev1alpha1.ActionAsk, "", "b").Obj(), listed: []string{"b"}},
		{name: "an unconditional deny hides", profile: base().Preset(toolgatev1alpha1.PresetTrusted).PreRule("r", toolgatev1alpha1.ActionDeny, "", "a").Obj(), listed: []string{"b"}},
		{name: "a conditional deny does not", profile: base().Preset(toolgatev1alpha1.PresetTrusted).PreRule("r", toolgatev1alpha1.ActionDeny, "call.args.text == 'x'", "a").Obj(), listed: []string{"a", "b"}},
		{name: "the first applying rule decides", profile: base().PreRule("allow", toolgatev1alpha1.ActionAllow, "", "a").PreRule("deny", toolgatev1alpha1.ActionDeny, "").Obj(), listed: []string{"a"}},
		{name: "a guard denying true hides", profile: base().Preset(toolgatev1alpha1.PresetTrusted).Guard("g", "true", "never", "b").Obj(), listed: []string{"a"}},
		{name: "a built-in tool needs a workspace", profile: withBuiltin(base().Preset(toolgatev1alpha1.PresetTrusted)).Obj(), listed: []string{"a"}},
		{name: "a built-in tool with a workspace", profile: withBuiltin(base().Preset(toolgatev1alpha1.PresetTrusted)).Obj(),
			session: tu.MakeAgentSession("ns", "s", "p").ClaimTemplate("1Gi").Obj(), listed: []string{"a", "b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.session == nil {
				tc.session = tu.MakeAgentSession("ns", "s", "p").Obj()
			}
			l := listTools(tc.profile, tc.session)
			var names []string
			for _, tool := range l.tools {
				names = append(names, tool.Name)
			}
			if strings.Join(names, ",") != strings.Join(tc.listed, ",") {
				t.Fatalf("listed %v, want %v", names, tc.listed)
			}
		})
	}
}

// withBuiltin makes the profile's tool "b" the built-in fs.read.
func withBuiltin(w *tu.ToolProfileWrapper) *tu.ToolProfileWrapper {
	w.Spec.Tools[1].Container, w.Spec.Tools[1].Builtin = nil, &toolgatev1alpha1.BuiltinRuntime{Name: "fs.read"}
	return w
}

func TestToResultMasksUnlistedTools(t *testing.T) {
	l := listTools(tu.MakeToolProfile("ns", "p").Preset(toolgatev1alpha1.PresetTrusted).Obj(), tu.MakeAgentSession("ns", "s", "p").Obj()) // lists "echo"
	call := func(tool, code string) *toolgatev1alpha1.ToolCall {
		tc := tu.MakeToolCall("ns", "c", "s").Tool(tool, `{}`).Obj()
		tc.Status.Result = &toolgatev1alpha1.ToolCallResult{Outcome: toolgatev1alpha1.OutcomeDenied, ErrorCode: code, Message: "rule hide-it denied"}
		return tc
	}
	listed := toResult(call("echo", "policy_denied"), l)
	if !listed.IsError || listed.Meta[agent.MetaCode] != "policy_denied" {
		t.Fatalf("a listed tool's denial keeps its code: %+v", listed.Meta)
	}
	hidden := toResult(call("hidden", "policy_denied"), l)
	unknown := toResult(call("hidden", "unknown_tool"), l)
	if hidden.Meta[agent.MetaCode] != "unknown_tool" {
		t.Fatalf("an unlisted tool's denial is answered as an unknown tool: %+v", hidden.Meta)
	}
	h, _ := json.Marshal(hidden)
	u, _ := json.Marshal(unknown)
	if string(h) != string(u) {
		t.Fatalf("a hidden tool and an unknown one differ:\n%s\n%s", h, u)
	}
}

func TestToResultSaysAFailureOnce(t *testing.T) {
	l := listTools(tu.MakeToolProfile("ns", "p").Preset(toolgatev1alpha1.PresetTrusted).Obj(), tu.MakeAgentSession("ns", "s", "p").Obj()) // lists "echo"
	failed := func(content string) *toolgatev1alpha1.ToolCall {
		tc := tu.MakeToolCall("ns", "c", "s").Tool("echo", `{}`).Obj()
		tc.Status.Result = &toolgatev1alpha1.ToolCallResult{Outcome: toolgatev1alpha1.OutcomeFailed, ErrorCode: "tool_error", Message: "exit 3", Content: content}
		return tc
	}
	texts := func(res *mcp.CallToolResult) []string {
		var out []string
		for _, c := range res.Content {
			out = append(out, c.(*mcp.TextContent).Text)
		}
		return out
	}
	// The pipeline's own rendering of the failure says the same again.
	if got := texts(toResult(failed("error: tool_error: exit 3"), l)); len(got) != 1 || got[0] != "tool_error: exit 3" {
		t.Fatalf("the failure is said once: %q", got)
	}
	// Content of the tool's own (a post rule's, a finalizer's) is kept.
	if got := texts(toResult(failed("partial output"), l)); len(got) != 2 || got[1] != "partial output" {
		t.Fatalf("other content follows the failure: %q", got)
	}
}

func TestCallName(t *testing.T) {
	if got := agent.CallName("s", 3, 1); got != "s-t3-i1" {
		t.Fatalf("got %s", got)
	}
	long := strings.Repeat("a", 250)
	a, b := agent.CallName(long, 1000000000, 1023), agent.CallName(long[:249]+"b", 1000000000, 1023)
	if len(a) > 253 || a == b {
		t.Fatalf("long names must fit and stay distinct: %d %s %s", len(a), a, b)
	}
}

func TestPlacementFromHeaders(t *testing.T) {
	extra := func(kv ...string) *mcp.RequestExtra {
		h := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return &mcp.RequestExtra{Header: h}
	}
	m, err := withHeaders(mcp.Meta{"progressToken": "p"}, extra("Toolgate-Turn", "4", "Toolgate-Index", "1", "Toolgate-Turn-Size", "2", "Toolgate-Call-Id", "call_x"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := placement(m)
	if err != nil {
		t.Fatal(err)
	}
	if want := (position{turn: 4, index: 1, turnSize: 2, callID: "call_x"}); got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	if _, err := withHeaders(mcp.Meta{agent.MetaTurn: 1.0}, extra("Toolgate-Turn", "4")); err == nil || !strings.Contains(err.Error(), "give it in one") {
		t.Fatalf("a position in both _meta and headers is refused: %v", err)
	}
	m, err = withHeaders(nil, extra("Toolgate-Turn", "four"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := placement(m); err == nil || !strings.Contains(err.Error(), "must be an integer") {
		t.Fatalf("a turn that is not a number is refused: %v", err)
	}
	if m, err := withHeaders(mcp.Meta{agent.MetaTurn: 2.0}, extra()); err != nil || m[agent.MetaTurn] != 2.0 {
		t.Fatalf("without headers the _meta stands: %v %v", m, err)
	}
}
