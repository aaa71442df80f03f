package apicontract

import (
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	tu "github.com/toolgate/toolgate/internal/testutil"
)

// invalid is one entry of the corpus: an object the API server must reject,
// and the field path its error message must name.
type invalid struct {
	object func(ns string) client.Object
	field  string
}

func profile(ns string, edit func(*v1.ToolProfileSpec)) client.Object {
	p := tu.MakeToolProfile(ns, "p").Obj()
	edit(&p.Spec)
	return p
}

func tool(ns string, edit func(*v1.ToolDefinition)) client.Object {
	return profile(ns, func(s *v1.ToolProfileSpec) { edit(&s.Tools[0]) })
}

func session(ns string, edit func(*v1.AgentSessionSpec)) client.Object {
	s := tu.MakeAgentSession(ns, "s", "p").Obj()
	edit(&s.Spec)
	return s
}

func call(ns string, edit func(*v1.ToolCallSpec)) client.Object {
	c := tu.MakeToolCall(ns, "c", "s").Obj()
	edit(&c.Spec)
	return c
}

func approval(ns string, edit func(*v1.ApprovalRequestSpec)) client.Object {
	a := tu.MakeApprovalRequest(ns, "a", "c", metav1.NewTime(time.Now().Add(time.Hour))).Obj()
	edit(&a.Spec)
	return a
}

// raw builds an unstructured copy of a valid typed object of kind, then lets
// edit set fields to values the Go types cannot express.
func raw(obj client.Object, kind string, edit func(spec map[string]any)) client.Object {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	Expect(err).NotTo(HaveOccurred())
	u := &unstructured.Unstructured{Object: m}
	u.SetGroupVersionKind(v1.GroupVersion.WithKind(kind))
	edit(m["spec"].(map[string]any))
	return u
}

// rawTool edits the first tool of a valid profile as unstructured data.
func rawTool(ns string, edit func(tool map[string]any)) client.Object {
	return raw(tu.MakeToolProfile(ns, "p").Obj(), "ToolProfile", func(spec map[string]any) {
		edit(spec["tools"].([]any)[0].(map[string]any))
	})
}

func manyTools(n int) []v1.ToolDefinition {
	out := make([]v1.ToolDefinition, n)
	for i := range out {
		out[i] = tu.MakeTool(fmt.Sprintf("tool-%d", i)).Obj()
	}
	return out
}

var corpus = []TableEntry{
	// ToolProfile: the catalog.
	Entry("no tools", invalid{func(ns string) client.Object {
		return profile(ns, func(s *v1.ToolProfileSpec) { s.Tools = []v1.ToolDefinition{} })
	}, "spec.tools"}),
	Entry("more than 64 tools", invalid{func(ns string) client.Object {
		return profile(ns, func(s *v1.ToolProfileSpec) { s.Tools = manyTools(65) })
	}, "spec.tools"}),
	Entry("duplicate tool names", invalid{func(ns string) client.Object {
		return profile(ns, func(s *v1.ToolProfileSpec) { s.Tools = append(s.Tools, tu.MakeTool("echo").Obj()) })
	}, "spec.tools[1]"}),
	Entry("tool name in upper case", invalid{func(ns string) client.Object {
		return tool(ns, func(t *v1.ToolDefinition) { t.Name = "Echo" })
	}, "spec.tools[0].name"}),
	Entry("tool name starting with a digit", invalid{func(ns string) client.Object {
		return tool(ns, func(t *v1.ToolDefinition) { t.Name = "1echo" })
	}, "spec.tools[0].name"}),
	Entry("tool name longer than 63", invalid{func(ns string) client.Object {
		return tool(ns, func(t *v1.ToolDefinition) { t.Name = strings.Repeat("a", 64) })
	}, "spec.tools[0].name"}),
	Entry("tool name with a dot", invalid{func(ns string) client.Object {
		return tool(ns, func(t *v1.ToolDefinition) { t.Name = "fs.read" })
	}, "spec.tools[0].name"}),
	Entry("empty description", invalid{func(ns string) client.Object {
		return tool(ns, func(t *v1.ToolDefinition) { t.Description = "" })
	}, "spec.tools[0].description"}),
	Entry("a container tool without parameters", invalid{func(ns string) client.Object {
		return tool(ns, func(t *v1.ToolDefinition) { t.Parameters.Raw = nil })
	}, "spec.tools[0].parameters: Invalid value: parameters is required"}),
	Entry("a container tool without an output schema", invalid{func(ns string) client.Object {
		return tool(ns, func(t *v1.ToolDefinition) { t.Output.Schema.Raw = nil })
	}, "spec.tools[0].output.schema: Invalid value: output.schema is required"}),
	Entry("an MCP tool's pin that is not a SHA-256 digest", invalid{func(ns string) client.Object {
		return tool(ns, func(t *v1.ToolDefinition) {
			t.Container, t.MCP = nil, &v1.MCPToolRuntime{Server: "everything", SchemaDigest: "sha256:abc"}
		})
	}, "spec.tools[0].mcp.schemaDigest"}),
	Entry("container and builtin together", invalid{func(ns string) client.Object {
		return tool(ns, func(t *v1.ToolDefinition) { t.Builtin = &v1.BuiltinRuntime{Name: "fs.read"} })
	}, "spec.tools[0]"}),
	Entry("neither container nor builtin", invalid{func(ns string) client.Object {
		return tool(ns, func(t *v1.ToolDefinition) { t.Container = nil })
	}, "spec.tools[0]"}),
	Entry("container and mcp together", invalid{func(ns string) client.Object {
		return tool(ns, func(t *v1.ToolDefinition) { t.MCP = &v1.MCPToolRuntime{Server: "everything"} })
	}, "spec.tools[0]"}),
	Entry("mcp without a server", invalid{func(ns string) client.Object {
		return tool(ns, func(t *v1.ToolDefinition) { t.Container, t.MCP = nil, &v1.MCPToolRuntime{} })
	}, "spec.tools[0].mcp.server"}),
	Entry("an MCP server without a command", invalid{func(ns string) client.Object {
		return profile(ns, func(s *v1.ToolProfileSpec) {
			s.MCPServers = []v1.MCPServer{{Name: "everything", Container: v1.ContainerRuntime{Image: "example.com/mcp:1"}}}
		})
	}, "spec.mcpServers[0].container.command"}),
	Entry("an MCP server's name in upper case", invalid{func(ns string) client.Object {
		return profile(ns, func(s *v1.ToolProfileSpec) {
			s.MCPServers = []v1.MCPServer{{Name: "Everything", Container: v1.ContainerRuntime{Image: "example.com/mcp:1", Command: []string{"server"}}}}
		})
	}, "spec.mcpServers[0].name"}),
	Entry("container without command", invalid{func(ns string) client.Object {
		return tool(ns, func(t *v1.ToolDefinition) { t.Container.Command = []string{} })
	}, "spec.tools[0].container.command"}),
	Entry("container without image", invalid{func(ns string) client.Object {
		return tool(ns, func(t *v1.ToolDefinition) { t.Container.Image = "" })
	}, "spec.tools[0].container.image"}),
	Entry("env var name with a space", invalid{func(ns string) client.Object {
		return tool(ns, func(t *v1.ToolDefinition) { t.Container.Env = []v1.EnvVar{{Name: "A B", Value: "x"}} })
	}, "spec.tools[0].container.env[0].name"}),
	Entry("maxOutputBytes below 1 KiB", invalid{func(ns string) client.Object {
		return tool(ns, func(t *v1.ToolDefinition) { t.Container.MaxOutputBytes = 10 })
	}, "spec.tools[0].container.maxOutputBytes"}),
	Entry("a runnerPath that is not absolute", invalid{func(ns string) client.Object {
		return tool(ns, func(t *v1.ToolDefinition) { t.Container.RunnerPath = "bin/toolgate-runner" })
	}, "spec.tools[0].container.runnerPath"}),
	Entry("unknown builtin", invalid{func(ns string) client.Object {
		return tool(ns, func(t *v1.ToolDefinition) {
			t.Container = nil
			t.Builtin = &v1.BuiltinRuntime{Name: "shell"}
		})
	}, "spec.tools[0].builtin.name"}),
	Entry("parameters that are not an object", invalid{func(ns string) client.Object {
		return rawTool(ns, func(t map[string]any) { t["parameters"] = "string" })
	}, "spec.tools[0].parameters"}),
	Entry("unknown render format", invalid{func(ns string) client.Object {
		return tool(ns, func(t *v1.ToolDefinition) { t.Output.Render.Format = "HTML" })
	}, "spec.tools[0].output.render.format"}),
	Entry("Template render without template", invalid{func(ns string) client.Object {
		return tool(ns, func(t *v1.ToolDefinition) { t.Output.Render.Format = v1.RenderTemplate })
	}, "spec.tools[0].output.render.template"}),
	Entry("timeout of zero seconds", invalid{func(ns string) client.Object {
		return rawTool(ns, func(t map[string]any) { t["timeoutSeconds"] = int64(0) })
	}, "spec.tools[0].timeoutSeconds"}),
	Entry("timeout above one day", invalid{func(ns string) client.Object {
		return tool(ns, func(t *v1.ToolDefinition) { t.TimeoutSeconds = 86401 })
	}, "spec.tools[0].timeoutSeconds"}),
	Entry("retry of a body not declared idempotent", invalid{func(ns string) client.Object {
		return tool(ns, func(t *v1.ToolDefinition) { t.Retry = &v1.RetryPolicy{MaxAttempts: 3} })
	}, "spec.tools[0].retry.maxAttempts"}),
	Entry("retry with more than 10 attempts", invalid{func(ns string) client.Object {
		return tool(ns, func(t *v1.ToolDefinition) {
			t.Idempotent = true
			t.Retry = &v1.RetryPolicy{MaxAttempts: 11}
		})
	}, "spec.tools[0].retry.maxAttempts"}),
	Entry("empty concurrency classifier", invalid{func(ns string) client.Object {
		return rawTool(ns, func(t map[string]any) { t["isConcurrencySafe"] = "" })
	}, "spec.tools[0].isConcurrencySafe"}),
	// ToolProfile: policies.
	Entry("unknown permission preset", invalid{func(ns string) client.Object {
		return profile(ns, func(s *v1.ToolProfileSpec) { s.PermissionPreset = "Yolo" })
	}, "spec.permissionPreset"}),
	Entry("pre-execute rule with an unknown action", invalid{func(ns string) client.Object {
		return profile(ns, func(s *v1.ToolProfileSpec) { s.PreExecute = []v1.PolicyRule{{Name: "r", Action: "Maybe"}} })
	}, "spec.preExecute[0].action"}),
	Entry("pre-execute rule with an invalid name", invalid{func(ns string) client.Object {
		return profile(ns, func(s *v1.ToolProfileSpec) {
			s.PreExecute = []v1.PolicyRule{{Name: "Allow All", Action: v1.ActionAllow}}
		})
	}, "spec.preExecute[0].name"}),
	Entry("duplicate pre-execute rule names", invalid{func(ns string) client.Object {
		return profile(ns, func(s *v1.ToolProfileSpec) {
			s.PreExecute = []v1.PolicyRule{{Name: "r", Action: v1.ActionAllow}, {Name: "r", Action: v1.ActionDeny}}
		})
	}, "spec.preExecute[1]"}),
	Entry("pre-execute rule naming an undeclared tool", invalid{func(ns string) client.Object {
		return profile(ns, func(s *v1.ToolProfileSpec) {
			s.PreExecute = []v1.PolicyRule{{Name: "r", Action: v1.ActionAllow, Tools: []string{"rm"}}}
		})
	}, "spec.preExecute"}),
	Entry("guard without a deny expression", invalid{func(ns string) client.Object {
		return profile(ns, func(s *v1.ToolProfileSpec) { s.Guards = []v1.GuardRule{{Name: "g", Message: "no"}} })
	}, "spec.guards[0].deny"}),
	Entry("guard without a message", invalid{func(ns string) client.Object {
		return profile(ns, func(s *v1.ToolProfileSpec) { s.Guards = []v1.GuardRule{{Name: "g", Deny: "true"}} })
	}, "spec.guards[0].message"}),
	Entry("guard naming an undeclared tool", invalid{func(ns string) client.Object {
		return profile(ns, func(s *v1.ToolProfileSpec) {
			s.Guards = []v1.GuardRule{{Name: "g", Deny: "true", Message: "no", Tools: []string{"rm"}}}
		})
	}, "spec.guards"}),
	Entry("post rule replacing content and value", invalid{func(ns string) client.Object {
		return profile(ns, func(s *v1.ToolProfileSpec) {
			s.PostExecute = []v1.PostRule{{Name: "p", Action: v1.PostAccept, ReplaceContent: "x", ReplaceValue: "'y'"}}
		})
	}, "spec.postExecute[0]"}),
	Entry("blocking post rule replacing the value", invalid{func(ns string) client.Object {
		return profile(ns, func(s *v1.ToolProfileSpec) {
			s.PostExecute = []v1.PostRule{{Name: "p", Action: v1.PostBlock, ReplaceValue: "'y'"}}
		})
	}, "spec.postExecute[0]"}),
	Entry("post rule attaching an empty context (a call's result holds none)", invalid{func(ns string) client.Object {
		return profile(ns, func(s *v1.ToolProfileSpec) {
			s.PostExecute = []v1.PostRule{{Name: "p", Action: v1.PostAccept, Contexts: []string{""}}}
		})
	}, "spec.postExecute[0].contexts[0]"}),
	Entry("post rule with an unknown action", invalid{func(ns string) client.Object {
		return profile(ns, func(s *v1.ToolProfileSpec) { s.PostExecute = []v1.PostRule{{Name: "p", Action: "Rewrite"}} })
	}, "spec.postExecute[0].action"}),
	// ToolProfile: sandbox and approval.
	Entry("FullAccess without allowFullAccess", invalid{func(ns string) client.Object {
		return profile(ns, func(s *v1.ToolProfileSpec) { s.Sandbox.Mode = v1.SandboxFullAccess })
	}, "spec.sandbox.mode"}),
	Entry("relative workspace root", invalid{func(ns string) client.Object {
		return profile(ns, func(s *v1.ToolProfileSpec) { s.Sandbox.WorkspaceRoot = "workspace" })
	}, "spec.sandbox.workspaceRoot"}),
	Entry("workspace root with ..", invalid{func(ns string) client.Object {
		return profile(ns, func(s *v1.ToolProfileSpec) { s.Sandbox.WorkspaceRoot = "/workspace/../etc" })
	}, "spec.sandbox.workspaceRoot"}),
	Entry("unknown sandbox provider", invalid{func(ns string) client.Object {
		return profile(ns, func(s *v1.ToolProfileSpec) { s.Sandbox.Provider = "Docker" })
	}, "spec.sandbox.provider"}),
	Entry("unknown approval provider", invalid{func(ns string) client.Object {
		return profile(ns, func(s *v1.ToolProfileSpec) { s.Approval.Provider = "Slack" })
	}, "spec.approval.provider"}),
	Entry("approval timeout below 10 s", invalid{func(ns string) client.Object {
		return profile(ns, func(s *v1.ToolProfileSpec) { s.Approval.TimeoutSeconds = 5 })
	}, "spec.approval.timeoutSeconds"}),
	// AgentSession.
	Entry("session without a profile name", invalid{func(ns string) client.Object {
		return session(ns, func(s *v1.AgentSessionSpec) { s.ProfileRef.Name = "" })
	}, "spec.profileRef.name"}),
	Entry("maxParallel of 0", invalid{func(ns string) client.Object {
		return raw(tu.MakeAgentSession(ns, "s", "p").Obj(), "AgentSession", func(s map[string]any) { s["maxParallel"] = int64(0) })
	}, "spec.maxParallel"}),
	Entry("maxParallel above 256", invalid{func(ns string) client.Object {
		return session(ns, func(s *v1.AgentSessionSpec) { s.MaxParallel = 257 })
	}, "spec.maxParallel"}),
	Entry("workspace with a claim and a template", invalid{func(ns string) client.Object {
		return tu.MakeAgentSession(ns, "s", "p").ExistingClaim("w").ClaimTemplate("1Gi").Obj()
	}, "spec.workspace"}),
	Entry("workspace with neither claim nor template", invalid{func(ns string) client.Object {
		return session(ns, func(s *v1.AgentSessionSpec) { s.Workspace = &v1.WorkspaceSpec{} })
	}, "spec.workspace"}),
	Entry("workspace template of size zero", invalid{func(ns string) client.Object {
		return session(ns, func(s *v1.AgentSessionSpec) {
			s.Workspace = &v1.WorkspaceSpec{VolumeClaimTemplate: &v1.WorkspaceClaimTemplate{Size: resource.MustParse("0")}}
		})
	}, "spec.workspace.volumeClaimTemplate.size"}),
	Entry("approval timeout of 1 s", invalid{func(ns string) client.Object {
		return session(ns, func(s *v1.AgentSessionSpec) { s.ApprovalTimeoutSeconds = ptr.To[int32](1) })
	}, "spec.approvalTimeoutSeconds"}),
	// ToolCall.
	Entry("negative turn", invalid{func(ns string) client.Object {
		return call(ns, func(s *v1.ToolCallSpec) { s.Turn = -1 })
	}, "spec.turn"}),
	Entry("negative index", invalid{func(ns string) client.Object {
		return call(ns, func(s *v1.ToolCallSpec) { s.Index = -1 })
	}, "spec.index"}),
	Entry("index above 1023", invalid{func(ns string) client.Object {
		return call(ns, func(s *v1.ToolCallSpec) { s.Index = 1024 })
	}, "spec.index"}),
	Entry("index at or above turnSize (default 1)", invalid{func(ns string) client.Object {
		return call(ns, func(s *v1.ToolCallSpec) { s.Index = 1 })
	}, "spec.index"}),
	Entry("index at or above a declared turnSize", invalid{func(ns string) client.Object {
		return call(ns, func(s *v1.ToolCallSpec) { s.Index, s.TurnSize = 3, 3 })
	}, "spec.index"}),
	Entry("turnSize 0", invalid{func(ns string) client.Object {
		return raw(call(ns, func(*v1.ToolCallSpec) {}), "ToolCall", func(spec map[string]any) { spec["turnSize"] = int64(0) })
	}, "spec.turnSize"}),
	Entry("turnSize above 1024", invalid{func(ns string) client.Object {
		return call(ns, func(s *v1.ToolCallSpec) { s.TurnSize = 1025 })
	}, "spec.turnSize"}),
	Entry("finalizeContent with neither template nor maxBytes", invalid{func(ns string) client.Object {
		return tool(ns, func(t *v1.ToolDefinition) { t.Output.FinalizeContent = &v1.FinalizeContentSpec{} })
	}, "spec.tools[0].output.finalizeContent"}),
	Entry("finalizeContent maxBytes below 32", invalid{func(ns string) client.Object {
		return tool(ns, func(t *v1.ToolDefinition) { t.Output.FinalizeContent = &v1.FinalizeContentSpec{MaxBytes: 8} })
	}, "spec.tools[0].output.finalizeContent.maxBytes"}),
	Entry("tool name with a slash", invalid{func(ns string) client.Object {
		return call(ns, func(s *v1.ToolCallSpec) { s.Tool = "fs/read" })
	}, "spec.tool"}),
	Entry("empty callID", invalid{func(ns string) client.Object {
		return call(ns, func(s *v1.ToolCallSpec) { s.CallID = "" })
	}, "spec.callID"}),
	Entry("callID with spaces", invalid{func(ns string) client.Object {
		return call(ns, func(s *v1.ToolCallSpec) { s.CallID = "call one" })
	}, "spec.callID"}),
	Entry("empty arguments", invalid{func(ns string) client.Object {
		return call(ns, func(s *v1.ToolCallSpec) { s.Arguments = "" })
	}, "spec.arguments"}),
	Entry("arguments above 200 KiB, the one limit every provider takes", invalid{func(ns string) client.Object {
		return call(ns, func(s *v1.ToolCallSpec) { s.Arguments = `{"text":"` + strings.Repeat("x", v1.MaxArgumentsBytes) + `"}` })
	}, "spec.arguments"}),
	Entry("arguments within 200 Ki characters but above 200 KiB as UTF-8 (4-byte characters)", invalid{func(ns string) client.Object {
		return call(ns, func(s *v1.ToolCallSpec) {
			s.Arguments = `{"text":"` + strings.Repeat("𝄞", v1.MaxArgumentsBytes/4+1) + `"}`
		})
	}, "at most 204800 bytes as UTF-8"}),
	Entry("arguments as an embedded object", invalid{func(ns string) client.Object {
		return raw(tu.MakeToolCall(ns, "c", "s").Obj(), "ToolCall", func(s map[string]any) { s["arguments"] = map[string]any{"text": "hi"} })
	}, "spec.arguments"}),
	Entry("empty requester", invalid{func(ns string) client.Object {
		return call(ns, func(s *v1.ToolCallSpec) { s.Requester = "" })
	}, "spec.requester"}),
	Entry("session name in upper case", invalid{func(ns string) client.Object {
		return call(ns, func(s *v1.ToolCallSpec) { s.SessionRef.Name = "Session" })
	}, "spec.sessionRef.name"}),
	Entry("missing sessionRef", invalid{func(ns string) client.Object {
		return raw(tu.MakeToolCall(ns, "c", "s").Obj(), "ToolCall", func(s map[string]any) { delete(s, "sessionRef") })
	}, "spec.sessionRef"}),
	// ApprovalRequest.
	Entry("decision with an unknown action", invalid{func(ns string) client.Object {
		return approval(ns, func(s *v1.ApprovalRequestSpec) { s.Decision = &v1.ApprovalDecision{Action: "Maybe", DecidedBy: "bob"} })
	}, "spec.decision.action"}),
	Entry("decision without decidedBy", invalid{func(ns string) client.Object {
		return approval(ns, func(s *v1.ApprovalRequestSpec) { s.Decision = &v1.ApprovalDecision{Action: v1.DecisionApprove} })
	}, "spec.decision.decidedBy"}),
	Entry("approval request without a reason", invalid{func(ns string) client.Object {
		return approval(ns, func(s *v1.ApprovalRequestSpec) { s.Reason = "" })
	}, "spec.reason"}),
	Entry("approval request without a requester", invalid{func(ns string) client.Object {
		return approval(ns, func(s *v1.ApprovalRequestSpec) { s.Requester = "" })
	}, "spec.requester"}),
	Entry("approval request with an invalid tool", invalid{func(ns string) client.Object {
		return approval(ns, func(s *v1.ApprovalRequestSpec) { s.Tool = "Echo!" })
	}, "spec.tool"}),
	Entry("approval request without a deadline", invalid{func(ns string) client.Object {
		return raw(approval(ns, func(*v1.ApprovalRequestSpec) {}), "ApprovalRequest", func(s map[string]any) { delete(s, "deadline") })
	}, "spec.deadline"}),
	Entry("approval request preview above 8 KiB", invalid{func(ns string) client.Object {
		return approval(ns, func(s *v1.ApprovalRequestSpec) { s.ArgumentsPreview = strings.Repeat("x", 8193) })
	}, "spec.argumentsPreview"}),
}

var _ = Describe("the invalid-object corpus", func() {
	It("has at least 40 cases", func() {
		Expect(len(corpus)).To(BeNumerically(">=", 40))
	})

	DescribeTable("is rejected by the API server with a message naming the field",
		func(c invalid) {
			ns := newNamespace()
			obj := c.object(ns)
			err := k8s.Create(ctx, obj)
			Expect(err).To(HaveOccurred(), "the API server accepted an invalid object")
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want 422 Invalid, got: %v", err)
			GinkgoWriter.Println(err.Error())
			Expect(err.Error()).To(ContainSubstring(c.field))
		},
		corpus,
	)
})
