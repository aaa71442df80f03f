//go:build e2e

package e2e

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// mcpProfile runs tools of an MCP server nobody here wrote: the Go SDK's
// example server, built from the module proxy into the tools image
// (hack/images.sh), started in each call's own pod over its stdio.
const mcpProfile = `
apiVersion: toolgate.dev/v1alpha1
kind: ToolProfile
metadata: {name: e2e-mcp}
spec:
  permissionPreset: Restricted
  mcpServers:
    - name: everything
      container: {image: toolgate.dev/tools:dev, command: [/bin/mcp-everything]}
  tools:
    - name: greet
      description: Say hi to someone.
      mcp: {server: everything}
      parameters: {type: object, additionalProperties: false, required: [name], properties: {name: {type: string, maxLength: 100}}}
      output: {schema: {type: string}, render: {format: Text}}
      timeoutSeconds: 30
    - name: greet_structured
      description: Say hi, as structured content.
      mcp: {server: everything, tool: "greet (structured)"}
      parameters: {type: object, additionalProperties: false, required: [name], properties: {name: {type: string, maxLength: 100}}}
      output:
        schema: {type: object, required: [message], properties: {message: {type: string}}}
        render: {format: Template, template: '{{.Value.message}}!'}
      timeoutSeconds: 30
    - name: sample
      description: Ask the client's model (which toolgate never lends).
      mcp: {server: everything}
      parameters: {type: object}
      output: {schema: {type: string}, render: {format: Text}}
      timeoutSeconds: 30
  guards:
    - {name: nobody-greets-root, tools: [greet], deny: 'call.args.name == "root"', message: nobody greets root}
  preExecute:
    - {name: everything, action: Allow}
`

var _ = Describe("an MCP server's tools on real pods", func() {
	It("run through the pipeline, each call its own pod and server: text, structured content, a guard, a refused sampling request", func() {
		ns := newAgentNamespace("mcp")
		ns.Apply(userAdmin, mcpProfile)
		ns.ProfileReady("e2e-mcp")
		ns.OpenSession("m", "e2e-mcp")
		ns.Submit(call{"greet", "greet", `{"name":"ada"}`}, call{"structured", "greet_structured", `{"name":"ada"}`})
		ns.Submit(call{"root", "greet", `{"name":"root"}`})
		ns.Submit(call{"sample", "sample", `{}`})

		greet := ns.Committed("greet").Status.Result
		Expect(greet.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded), greet.Message)
		Expect(greet.Content).To(Equal("Hi ada"))
		structured := ns.Committed("structured").Status.Result
		Expect(structured.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded), structured.Message)
		Expect(structured.Value).To(MatchJSON(`{"message":"Hi ada"}`))
		Expect(structured.Content).To(Equal("Hi ada!"))
		root := ns.Committed("root").Status.Result
		Expect(root.ErrorCode).To(Equal("guard_denied"))
		Expect(ns.PodsOf("root")).To(BeZero(), "a call its guard denied never got a pod")
		sample := ns.Committed("sample").Status.Result
		Expect(sample.ErrorCode).To(Equal("tool_error"))
		Expect(sample.Message).To(ContainSubstring("sampling/createMessage"))
	})
})
