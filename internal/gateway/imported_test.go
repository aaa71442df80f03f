package gateway_test

import (
	"fmt"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	tu "github.com/toolgate/toolgate/internal/testutil"
	"github.com/toolgate/toolgate/test/mcpclients"
	"github.com/toolgate/toolgate/test/mcpservers"
)

// An npm MCP server's tools imported into a profile, as an npm MCP client
// sees them through the gateway: listed with the server's own description
// and schemas (the profile left them to it, pinned), and called through
// the pipeline.
var _ = Describe("an MCP server's tools through the gateway", func() {
	It("are listed to an npm client with the server's schemas and called through the pipeline", func() {
		Expect(mcpservers.Install()).To(Succeed())
		argv, err := mcpservers.Argv(mcpservers.Everything, "stdio")
		Expect(err).NotTo(HaveOccurred())
		ns, user := agentNamespace()
		add := tu.MakeTool("add").Obj()
		add.Container, add.Description, add.Parameters.Raw, add.Output.Schema.Raw = nil, "", nil, nil
		add.Output.Render.Format = toolgatev1alpha1.RenderText
		// The digest docs/mcp-servers.md pins for server-everything's get-sum.
		add.MCP = &toolgatev1alpha1.MCPToolRuntime{Server: "everything", Tool: "get-sum",
			SchemaDigest: "sha256:144843437ed7ecf31d62e96fa490b67a3abc167c913d8b6d07e85cd20aefce94"}
		p := tu.MakeToolProfile(ns, "p").Tools(add).Preset(toolgatev1alpha1.PresetTrusted).Sandbox(func(s *toolgatev1alpha1.SandboxPolicy) {
			s.Provider = toolgatev1alpha1.SandboxProviderProcess
		}).Obj()
		p.Spec.MCPServers = []toolgatev1alpha1.MCPServer{{Name: "everything", Container: toolgatev1alpha1.ContainerRuntime{Image: "unused", Command: argv}}}
		Expect(k8s.Create(ctx, p)).To(Succeed())
		s := tu.MakeAgentSession(ns, "s", "p").Obj()
		s.Spec.Owner = user
		Expect(as(user).Create(ctx, s)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())
			g.Expect(p.Status.Conditions).To(ContainElement(And(HaveField("Type", toolgatev1alpha1.ConditionReady), HaveField("Status", metav1.ConditionTrue))))
		}, "60s").Should(Succeed())

		rep, err := mcpclients.Run(ctx, "imported.mjs", mcpclients.Target{
			URL: fmt.Sprintf("%s/mcp/%s/s", server.URL, ns), Token: token(ns, "agent", audience),
			Env: []string{"TOOL=add", `ARGS={"a":1,"b":2}`},
		})
		Expect(err).NotTo(HaveOccurred())
		var listed struct {
			Tools []struct {
				Name        string         `json:"name"`
				Description string         `json:"description"`
				InputSchema map[string]any `json:"inputSchema"`
			} `json:"tools"`
		}
		Expect(rep.Into("tools", &listed)).To(Succeed())
		Expect(listed.Tools).To(HaveLen(1))
		Expect(listed.Tools[0].Name).To(Equal("add"))
		Expect(listed.Tools[0].Description).To(Equal("Returns the sum of two numbers"))
		Expect(listed.Tools[0].InputSchema).To(HaveKeyWithValue("required", ConsistOf("a", "b")))
		var result struct {
			IsError bool   `json:"isError"`
			Text    string `json:"text"`
		}
		Expect(rep.Into("result", &result)).To(Succeed())
		Expect(result).To(Equal(struct {
			IsError bool   `json:"isError"`
			Text    string `json:"text"`
		}{false, "The sum of 1 and 2 is 3."}), "%s", rep.Stderr)
		calls := &toolgatev1alpha1.ToolCallList{}
		Expect(k8s.List(ctx, calls, client.InNamespace(ns))).To(Succeed())
		Expect(calls.Items).To(HaveLen(1))
		Expect(calls.Items[0].Spec.Tool).To(Equal("add"))
		Expect(calls.Items[0].Status.Result.Value).To(MatchJSON(`"The sum of 1 and 2 is 3."`))
	})
})
