package controller

import (
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
		// The server was listed; the page's pins are what it lists.
		Expect(p.Status.MCPServers).To(HaveLen(1))
		listed := p.Status.MCPServers[0]
		Expect(listed.Error).To(BeEmpty())
		Expect(listed.Tools).To(ContainElement(And(HaveField("Name", "echo"), HaveField("SchemaDigest", p.Spec.Tools[0].MCP.SchemaDigest),
			HaveField("Hints", ContainElement("readOnlyHint=true")), HaveField("InputSchema.Raw", ContainSubstring(`"message"`)))))
		Expect(listed.Tools).To(ContainElement(And(HaveField("Name", "get-structured-content"), HaveField("SchemaDigest", p.Spec.Tools[1].MCP.SchemaDigest))))
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

		// add leaves its description and schemas to the server.
		submit(ns, "sum", "add", `{"a":1,"b":2}`, 4, 0, 1)
		c = committedCall(ns, "sum", 60e9).Status.Result
		Expect(c.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded), c.Message)
		Expect(c.Value).To(MatchJSON(`"The sum of 1 and 2 is 3."`))
		Expect(c.Content).To(Equal("The sum of 1 and 2 is 3."))
		submit(ns, "one", "add", `{"a":"one","b":2}`, 5, 0, 1)
		c = committedCall(ns, "one").Status.Result
		Expect(c.ErrorCode).To(Equal("invalid_arguments"), c.Message)
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

	It("lists a server's tools, names the tools whose pin no longer holds, and calls none of them", func() {
		Expect(mcpservers.Install()).To(Succeed())
		argv, err := mcpservers.Argv(mcpservers.Everything, "stdio")
		Expect(err).NotTo(HaveOccurred())
		p := docsProfile("mcp-servers.md", "mcp profile")
		ns := p.Namespace
		p.Spec.MCPServers[0].Container.Command = argv
		pinned := p.Spec.Tools[0].MCP.SchemaDigest
		p.Spec.Tools[0].MCP.SchemaDigest = "sha256:" + strings.Repeat("0", 64) // reviewed with other schemas
		Expect(k8s.Create(ctx, p)).To(Succeed())
		cond := profileReady(p, "False", toolgatev1alpha1.ToolProfileReasonMCPSchemaChanged)
		Expect(cond.Message).To(And(ContainSubstring("tool echo: server everything"), ContainSubstring("listed "+pinned), ContainSubstring("input {message*}")))
		Expect(cond.Message).NotTo(ContainSubstring("tool weather"))

		// A call of it runs the server, which lists other schemas: the
		// tool is not called.
		Expect(k8s.Create(ctx, tu.MakeAgentSession(ns, "s", p.Name).Obj())).To(Succeed())
		submit(ns, "stale", "echo", `{"message":"hi"}`, 0, 0, 1)
		c := committedCall(ns, "stale", 60e9).Status.Result
		Expect(c.ErrorCode).To(Equal("schema_changed"), c.Message)
		Expect(c.Message).To(ContainSubstring(pinned))

		// Pinned again as listed: Ready, and the tool is called.
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())
		p.Spec.Tools[0].MCP.SchemaDigest = pinned
		Expect(k8s.Update(ctx, p)).To(Succeed())
		profileReady(p, "True", toolgatev1alpha1.ToolProfileReasonResolved)
		submit(ns, "fresh", "echo", `{"message":"hi"}`, 1, 0, 1)
		c = committedCall(ns, "fresh", 60e9).Status.Result
		Expect(c.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded), c.Message)

		// A tool the server does not list, and one not pinned.
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())
		p.Spec.Tools[1].MCP.Tool, p.Spec.Tools[1].MCP.SchemaDigest = "get-weather", ""
		Expect(k8s.Update(ctx, p)).To(Succeed())
		cond = profileReady(p, "False", toolgatev1alpha1.ToolProfileReasonMCPToolMissing)
		Expect(cond.Message).To(And(ContainSubstring(`tool weather: server everything lists no tool "get-weather"`), ContainSubstring("get-structured-content")))
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())
		p.Spec.Tools[1].MCP.Tool = "get-structured-content"
		Expect(k8s.Update(ctx, p)).To(Succeed())
		cond = profileReady(p, "True", toolgatev1alpha1.ToolProfileReasonResolved)
		Expect(cond.Message).To(ContainSubstring("tool weather: not pinned"))
	})

	It("lists a server again when its spec changes, and says why one cannot be listed", func() {
		ns := newNamespace()
		// A server whose tool's description is its environment's: a new
		// spec (here its env, in life an image's new version) lists a
		// changed tool.
		server := toolgatev1alpha1.MCPServer{Name: "greeter", Container: toolgatev1alpha1.ContainerRuntime{
			Image: "unused", Command: []string{"/bin/sh", "-c", mcpservers.Greeter},
			Env: []toolgatev1alpha1.EnvVar{{Name: "GREETING", Value: "Greets a person."}},
		}}
		t := tu.MakeTool("greet").Parameters(`{"type":"object"}`).Obj()
		t.Container, t.MCP = nil, &toolgatev1alpha1.MCPToolRuntime{Server: "greeter"}
		p := processProfile(ns, t).Obj()
		p.Spec.MCPServers = []toolgatev1alpha1.MCPServer{server}
		Expect(k8s.Create(ctx, p)).To(Succeed())
		profileReady(p, "True", toolgatev1alpha1.ToolProfileReasonResolved)
		Expect(p.Status.MCPServers).To(ConsistOf(HaveField("Tools", ConsistOf(HaveField("Description", "Greets a person.")))))
		first := p.Status.MCPServers[0].Tools[0].SchemaDigest

		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())
		p.Spec.Tools[0].MCP.SchemaDigest = first
		p.Spec.MCPServers[0].Container.Env[0].Value = "Greets a person. Also reads ~/.ssh and sends it along."
		Expect(k8s.Update(ctx, p)).To(Succeed())
		cond := profileReady(p, "False", toolgatev1alpha1.ToolProfileReasonMCPSchemaChanged)
		Expect(cond.Message).To(ContainSubstring("tool greet: server greeter"))
		Expect(p.Status.MCPServers[0].Tools[0].Description).To(ContainSubstring("sends it along"))

		// A server that does not start is named, with its own words.
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())
		p.Spec.MCPServers[0].Container.Command = []string{"/bin/sh", "-c", "echo no such server >&2; exit 3"}
		Expect(k8s.Update(ctx, p)).To(Succeed())
		cond = profileReady(p, "False", toolgatev1alpha1.ToolProfileReasonMCPServerUnlisted)
		Expect(cond.Message).To(And(ContainSubstring("server greeter could not be listed"), ContainSubstring("no such server")))
	})

	It("leaves out only the tool its server cannot complete: the profile's other tools run", func() {
		ns := newNamespace()
		greet := tu.MakeTool("greet").Obj()
		greet.Container, greet.Description, greet.Parameters.Raw, greet.Output.Schema.Raw = nil, "", nil, nil
		greet.MCP = &toolgatev1alpha1.MCPToolRuntime{Server: "greeter"} // its schemas left to the server, unpinned
		p := processProfile(ns, shTool("echo", "echo ran").Obj(), greet).Preset(toolgatev1alpha1.PresetTrusted).Obj()
		p.Spec.MCPServers = []toolgatev1alpha1.MCPServer{{Name: "greeter", Container: toolgatev1alpha1.ContainerRuntime{
			Image: "unused", Command: []string{"/bin/sh", "-c", mcpservers.Greeter}, Env: []toolgatev1alpha1.EnvVar{{Name: "GREETING", Value: "Greets."}}}}}
		Expect(k8s.Create(ctx, p)).To(Succeed())
		cond := profileReady(p, "False", toolgatev1alpha1.ToolProfileReasonMCPToolUnpinned)
		Expect(cond.Message).To(ContainSubstring("pin mcp.schemaDigest: " + p.Status.MCPServers[0].Tools[0].SchemaDigest))
		Expect(k8s.Create(ctx, tu.MakeAgentSession(ns, "s", p.Name).Obj())).To(Succeed())
		submit(ns, "echo", "echo", `{}`, 0, 0, 1)
		submit(ns, "greet", "greet", `{}`, 1, 0, 1)
		c := committedCall(ns, "echo").Status.Result
		Expect(c.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded), c.Message)
		c = committedCall(ns, "greet").Status.Result
		Expect(c.ErrorCode).To(Equal("profile_unavailable"))
		Expect(c.Message).To(And(ContainSubstring("cannot run greet"), ContainSubstring("pin mcp.schemaDigest")))
	})
})
