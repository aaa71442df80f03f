//go:build e2e

package e2e

import (
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// npmProfile puts two npm MCP servers nobody here wrote behind toolgate, as
// docs/mcp-servers.md tells a new user to: the image holds node and the
// packages (toolgate.dev/mcp-node:dev, hack/images.sh), the tools name the
// servers' tools and nothing else, their schemas are the servers' own, and
// the pins (%s) are the digests the profile's status showed.
const npmProfile = `
apiVersion: toolgate.dev/v1alpha1
kind: ToolProfile
metadata: {name: e2e-npm}
spec:
  permissionPreset: Restricted
  sandbox: {mode: WorkspaceWrite}
  mcpServers:
    - name: filesystem
      container:
        image: toolgate.dev/mcp-node:dev
        command: [/usr/bin/node, /app/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js, /workspace]
    - name: everything
      container:
        image: toolgate.dev/mcp-node:dev
        command: [/usr/bin/node, /app/node_modules/@modelcontextprotocol/server-everything/dist/index.js, stdio]
  tools:
    - name: write_file
      mcp: {server: filesystem%s}
      output: {render: {format: Text}}
    - name: read_text_file
      mcp: {server: filesystem%s}
      output: {render: {format: Template, template: '{{.Value.content}}'}}
    - name: long_operation
      mcp: {server: everything, tool: trigger-long-running-operation%s}
      output: {render: {format: Text}}
      timeoutSeconds: 600
  guards:
    - {name: no-env-files, tools: [write_file, read_text_file], deny: 'call.args.path.endsWith(".env")', message: no tool touches an .env file}
  preExecute:
    - {name: writes-are-asked, tools: [write_file], action: Ask, message: a person reads what is written}
    - {name: reads, tools: [read_text_file, long_operation], action: Allow}
`

var _ = Describe("npm MCP servers on real pods", func() {
	It("are listed, pinned from their status, and run through the pipeline: an approved write, a guarded read, a cancellation mid-call", func() {
		ns := newAgentNamespace("npm")
		profile := func(pins ...string) string {
			args := []any{}
			for _, p := range pins {
				if p != "" {
					p = `, schemaDigest: "` + p + `"`
				}
				args = append(args, p)
			}
			return fmt.Sprintf(npmProfile, args...)
		}

		By("unpinned, the profile is not Ready and names the digest each tool would pin")
		ns.Apply(userAdmin, profile("", "", ""))
		p := &toolgatev1alpha1.ToolProfile{}
		Eventually(func(g Gomega) string {
			g.Expect(ns.Admin.Get(ctx, client.ObjectKey{Name: "e2e-npm"}, p)).To(Succeed())
			c := apimeta.FindStatusCondition(p.Status.Conditions, toolgatev1alpha1.ConditionReady)
			g.Expect(c).NotTo(BeNil())
			return c.Reason
		}, 120*time.Second, time.Second).Should(Equal(toolgatev1alpha1.ToolProfileReasonMCPToolUnpinned))
		digest := map[string]string{}
		for _, s := range p.Status.MCPServers {
			Expect(s.Error).To(BeEmpty(), "server %s", s.Name)
			for _, t := range s.Tools {
				digest[s.Name+"/"+t.Name] = t.SchemaDigest
			}
		}
		Expect(digest).To(HaveKey("filesystem/write_file"))
		Expect(digest).To(HaveKey("everything/trigger-long-running-operation"))

		By("pinned as listed, it is Ready")
		ns.Apply(userAdmin, profile(digest["filesystem/write_file"], digest["filesystem/read_text_file"], digest["everything/trigger-long-running-operation"]))
		ns.ProfileReady("e2e-npm")
		ns.OpenSession("npm", "e2e-npm") // not "n": YAML 1.1 reads a bare n as false

		By("a write is asked and approved, then read back; a read of an .env file is denied by its guard")
		ns.Submit(call{"write", "write_file", `{"path":"/workspace/notes.txt","content":"written by an npm server"}`})
		Eventually(func() string { return ns.Question("write") }, 60*time.Second).ShouldNot(BeEmpty())
		Expect(ns.PodsOf("write")).To(BeZero(), "nothing runs before a person approves")
		_, err := kubectl(userApprover, "", "-n", ns.Name, "patch", "approvalrequest", "write", "--type=merge", "-p", ns.Decision("write", "demo-approver"))
		Expect(err).NotTo(HaveOccurred())
		write := ns.Committed("write").Status.Result
		Expect(write.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded), write.Message)
		ns.Submit(call{"read", "read_text_file", `{"path":"/workspace/notes.txt"}`}, call{"secrets", "read_text_file", `{"path":"/workspace/.env"}`})
		read := ns.Committed("read").Status.Result
		Expect(read.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded), read.Message)
		Expect(read.Content).To(Equal("written by an npm server"))
		secrets := ns.Committed("secrets").Status.Result
		Expect(secrets.ErrorCode).To(Equal("guard_denied"))
		Expect(ns.PodsOf("secrets")).To(BeZero())

		By("a long operation cancelled mid-call: the server is stopped, not waited for")
		// 300 s of work: a result within Committed's wait (90 s) is one
		// whose server was stopped, not one that finished.
		ns.Submit(call{"long", "long_operation", `{"duration":300,"steps":300}`})
		Eventually(func() bool {
			for _, pod := range ns.PodsOfCall("long") {
				for _, cs := range pod.Status.ContainerStatuses {
					if cs.State.Running != nil && time.Since(cs.State.Running.StartedAt.Time) > 5*time.Second {
						return true
					}
				}
			}
			return false
		}, 90*time.Second, 200*time.Millisecond).Should(BeTrue(), "the server has run a while")
		tc := &toolgatev1alpha1.ToolCall{}
		Expect(ns.Agent.Get(ctx, client.ObjectKey{Name: "long"}, tc)).To(Succeed())
		cancel := client.MergeFrom(tc.DeepCopy())
		tc.Spec.CancelRequested = true
		Expect(ns.Agent.Patch(ctx, tc, cancel)).To(Succeed())
		long := ns.Committed("long")
		Expect(long.Status.Result.Outcome).To(Equal(toolgatev1alpha1.OutcomeCancelled), long.Status.Result.Message)
		Expect(stillRunning(ns.PodsOfCall("long"))).To(BeEmpty(), "a pod of the cancelled call still runs when its result settles")

		By("no listing pod is left")
		Eventually(func() ([]corev1.Pod, error) {
			pods := &corev1.PodList{}
			err := ns.Admin.List(ctx, pods, client.InNamespace(ns.Name), client.HasLabels{toolgatev1alpha1.LabelListing})
			return pods.Items, err
		}, 60*time.Second).Should(BeEmpty())
	})
})
