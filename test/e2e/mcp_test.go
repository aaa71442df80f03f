//go:build e2e

package e2e

import (
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

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

		By("the server was listed in a pod of its own, gone once listed")
		p := &toolgatev1alpha1.ToolProfile{}
		Expect(ns.Admin.Get(ctx, client.ObjectKey{Name: "e2e-mcp"}, p)).To(Succeed())
		Expect(p.Status.MCPServers).To(HaveLen(1))
		Expect(p.Status.MCPServers[0].Error).To(BeEmpty())
		digests := map[string]string{}
		for _, t := range p.Status.MCPServers[0].Tools {
			digests[t.Name] = t.SchemaDigest
		}
		Expect(digests).To(HaveKey("greet"))
		Eventually(func() ([]corev1.Pod, error) {
			pods := &corev1.PodList{}
			err := ns.Admin.List(ctx, pods, client.InNamespace(ns.Name), client.HasLabels{toolgatev1alpha1.LabelListing})
			return pods.Items, err
		}, 60*time.Second).Should(BeEmpty())

		By("a pin that no longer holds is named, and its calls never reach the tool")
		pinned := strings.Replace(mcpProfile, "mcp: {server: everything}", `mcp: {server: everything, schemaDigest: "`+digests["greet"]+`"}`, 1)
		pinned = strings.Replace(pinned, `tool: "greet (structured)"}`, `tool: "greet (structured)", schemaDigest: "sha256:`+strings.Repeat("0", 64)+`"}`, 1)
		// A tool that leaves its description and schemas to the server,
		// as kubectl applies it: no description, parameters or schema.
		pinned = strings.Replace(pinned, "  guards:\n", `    - name: greet_listed
      mcp: {server: everything, tool: greet, schemaDigest: "`+digests["greet"]+`"}
      output: {render: {format: Text}}
  guards:
`, 1)
		ns.Apply(userAdmin, pinned)
		Eventually(func(g Gomega) *metav1.Condition {
			g.Expect(ns.Admin.Get(ctx, client.ObjectKey{Name: "e2e-mcp"}, p)).To(Succeed())
			return apimeta.FindStatusCondition(p.Status.Conditions, toolgatev1alpha1.ConditionReady)
		}, 60*time.Second).Should(And(Not(BeNil()), HaveField("Reason", toolgatev1alpha1.ToolProfileReasonMCPSchemaChanged),
			HaveField("Message", ContainSubstring("tool greet_structured: server everything"))))
		ns.Submit(call{"pinned", "greet", `{"name":"ada"}`}, call{"stale", "greet_structured", `{"name":"ada"}`})
		ns.Submit(call{"listed", "greet_listed", `{"name":"grace"}`})
		Expect(ns.Committed("pinned").Status.Result.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded))
		listed := ns.Committed("listed").Status.Result
		Expect(listed.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded), listed.Message)
		Expect(listed.Content).To(Equal("Hi grace"))
		stale := ns.Committed("stale").Status.Result
		Expect(stale.ErrorCode).To(Equal("schema_changed"), stale.Message)
	})
})
