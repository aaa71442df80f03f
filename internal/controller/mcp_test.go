package controller

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	tu "github.com/toolgate/toolgate/internal/testutil"
	"github.com/toolgate/toolgate/test/mcpservers"
)

// docs/mcp-servers.md's example profile, as written, with a real MCP
// server from the npm registry (@modelcontextprotocol/server-everything):
// its profile is read from the page and applied as YAML, and each row of
// the page's table is a call checked here. Only the sandbox differs: the
// process provider runs the server's argv on this machine (this node and
// the pinned package) instead of in its image.
var _ = Describe("docs/mcp-servers.md's example profile", func() {
	It("runs an MCP server's tools through the pipeline: allowed, guarded, refused by schema, each call its own server", func() {
		Expect(mcpservers.Install()).To(Succeed())
		argv, err := mcpservers.Argv(mcpservers.Everything, "stdio")
		Expect(err).NotTo(HaveOccurred())
		p := docsProfile("mcp-servers.md", "mcp profile")
		ns := p.Namespace
		Expect(p.Spec.MCPServers).To(HaveLen(1))
		p.Spec.MCPServers[0].Container.Command = argv
		Expect(k8s.Create(ctx, p)).To(Succeed())
		profileReady(p, "True", toolgatev1alpha1.ToolProfileReasonResolved)
		Expect(p.Status.Tools).To(ContainElement(And(HaveField("Name", "weather"), HaveField("Runtime", "mcp:everything/get-structured-content"))))
		Expect(k8s.Create(ctx, tu.MakeAgentSession(ns, "s", p.Name).Obj())).To(Succeed())

		submit(ns, "echoed", "echo", `{"message":"hi"}`, 0, 0, 1)
		c := committedCall(ns, "echoed", 60e9).Status.Result
		Expect(c.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded), c.Message)
		Expect(c.Value).To(MatchJSON(`"Echo: hi"`))
		Expect(c.Content).To(Equal("Echo: hi"))

		submit(ns, "weather", "weather", `{"location":"Chicago"}`, 1, 0, 1)
		c = committedCall(ns, "weather", 60e9).Status.Result
		Expect(c.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded), c.Message)
		Expect(c.Value).To(ContainSubstring(`"temperature"`))
		Expect(c.Content).To(MatchRegexp(`^.+, -?[0-9.]+ °C$`))

		submit(ns, "guarded", "echo", `{"message":"my password is x"}`, 2, 0, 1)
		c = committedCall(ns, "guarded").Status.Result
		Expect(c.ErrorCode).To(Equal("guard_denied"))
		Expect(c.Message).To(ContainSubstring("never repeats a password"))

		submit(ns, "paris", "weather", `{"location":"Paris"}`, 3, 0, 1)
		c = committedCall(ns, "paris").Status.Result
		Expect(c.ErrorCode).To(Equal("invalid_arguments"))
	})

	It("is not Ready when a tool names a server the profile does not declare", func() {
		ns := newNamespace()
		t := tu.MakeTool("echo").Obj()
		t.Container, t.MCP = nil, &toolgatev1alpha1.MCPToolRuntime{Server: "elsewhere"}
		p := processProfile(ns, t).Obj()
		Expect(k8s.Create(ctx, p)).To(Succeed())
		cond := profileReady(p, "False", toolgatev1alpha1.ToolProfileReasonSchemaInvalid)
		Expect(cond.Message).To(ContainSubstring(`mcp.server "elsewhere" names none of the profile's mcpServers`))
	})
})
