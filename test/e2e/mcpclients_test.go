//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/testutil"
	"github.com/toolgate/toolgate/pkg/agent"
	"github.com/toolgate/toolgate/test/mcpclients"
	"github.com/toolgate/toolgate/test/mcpclients/gorecipe"
)

// The clients of test/mcpclients against the gateway in the cluster, each
// call in a pod, each approval given with kubectl by a person holding the
// shipped approver role.
var _ = Describe("MCP clients from the npm registry, against the gateway in the cluster", Ordered, func() {
	var ns *agentNamespace
	var user, token string

	BeforeAll(func() {
		Expect(mcpclients.Install()).To(Succeed())
		ns, user, token = gatewayAgent("mcpclients")
		// The profile of mcpclients.Listed, applied as YAML.
		ns.Apply(userAdmin, `
apiVersion: toolgate.dev/v1alpha1
kind: ToolProfile
metadata: {name: clients}
spec:
  permissionPreset: Trusted
  tools:
    - name: echo
      description: Return the arguments.
      parameters: {type: object, properties: {text: {type: string}}, required: [text]}
      output: {schema: {type: object, properties: {text: {type: string}}, required: [text]}, render: {format: JSON}}
      container: {image: toolgate.dev/tools:dev, command: [/bin/cat]}
      isConcurrencySafe: "true"
    - name: write
      description: Pretend to write; a person approves it first.
      parameters: {type: object, properties: {text: {type: string}}, required: [text]}
      output: {schema: {type: string}, render: {format: Text}}
      container: {image: toolgate.dev/tools:dev, command: [/bin/sh, -c, 'cat >/dev/null; printf written']}
    - name: danger
      description: Denied for the text rm.
      parameters: {type: object, properties: {text: {type: string}}, required: [text]}
      output: {schema: {type: string}, render: {format: Text}}
      container: {image: toolgate.dev/tools:dev, command: [/bin/sh, -c, 'cat >/dev/null; printf ran']}
    - name: secret
      description: Denied to every call.
      parameters: {type: object}
      output: {schema: {type: string}, render: {format: Text}}
      container: {image: toolgate.dev/tools:dev, command: [/bin/sh, -c, 'printf secret']}
    - name: slow
      description: Sleep until cancelled.
      parameters: {type: object, properties: {text: {type: string}}, required: [text]}
      output: {schema: {type: string}, render: {format: Text}}
      container: {image: toolgate.dev/tools:dev, command: [/bin/sh, -c, 'sleep 120; printf late']}
  preExecute:
    - {name: ask-writes, tools: [write], action: Ask}
    - {name: no-rm, tools: [danger], when: "call.args.text == 'rm'", action: Deny}
    - {name: never-secret, tools: [secret], action: Deny}
`)
		ns.ProfileReady("clients")
	})

	// newSession creates, as the agent, a session of the clients' profile.
	newSession := func(name string) {
		s := testutil.MakeAgentSession(ns.Name, name, "clients").Obj()
		s.Spec.Owner = user
		Expect(impersonating(user).Create(ctx, s)).To(Succeed())
	}
	clusterOf := func(session string) mcpclients.Cluster {
		return mcpclients.Cluster{
			Session: session,
			Get: func(ctx context.Context, name string) (*toolgatev1alpha1.ToolCall, error) {
				tc := &toolgatev1alpha1.ToolCall{}
				return tc, ns.Admin.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: name}, tc)
			},
			Approve: func(_ context.Context, name string) error {
				_, err := kubectl(userApprover, "", "toolgate", "approve", name, "--question", ns.Question(name), "-n", ns.Name, "--kubeconfig", kubeconfig(userApprover))
				return err
			},
		}
	}

	for i, c := range mcpclients.Clients {
		It(c.Name+": lists, runs a turn with a parallel pair and an approved write, reads a denial, and cancels", func() {
			session := fmt.Sprintf("client-%d", i)
			newSession(session)
			c.Exercise(ctx, fmt.Sprintf("%s/mcp/%s/%s", gatewayURL, ns.Name, session), token, clusterOf(session))
			if i > 0 {
				return
			}
			// A settled call names the pod it ran in, which is gone by now;
			// its events are still there to read.
			write, err := clusterOf(session).Get(ctx, agent.CallName(session, 0, 2))
			Expect(err).NotTo(HaveOccurred())
			Expect(write.Status.Sandbox).NotTo(BeEmpty())
			Eventually(func() string {
				return mustKubectl(userAdmin, "", "-n", ns.Name, "get", "events", "--field-selector", "involvedObject.name="+write.Status.Sandbox, "-o", "name")
			}, time.Minute).ShouldNot(BeEmpty(), "the events of pod %s", write.Status.Sandbox)
		})
	}

	It("an npm MCP server's tool imported into a profile: listed with the server's schemas, called through the gateway, run in its pod", func() {
		// server-everything's get-sum, its description and schemas left to
		// the server, pinned with the digest docs/mcp-servers.md gives.
		ns.Apply(userAdmin, `
apiVersion: toolgate.dev/v1alpha1
kind: ToolProfile
metadata: {name: imported}
spec:
  permissionPreset: Trusted
  mcpServers:
    - name: everything
      container:
        image: toolgate.dev/mcp-node:dev
        command: [/usr/bin/node, /app/node_modules/@modelcontextprotocol/server-everything/dist/index.js, stdio]
  tools:
    - name: add
      mcp: {server: everything, tool: get-sum, schemaDigest: "sha256:144843437ed7ecf31d62e96fa490b67a3abc167c913d8b6d07e85cd20aefce94"}
      output: {render: {format: Text}}
`)
		ns.ProfileReady("imported")
		s := testutil.MakeAgentSession(ns.Name, "imported", "imported").Obj()
		s.Spec.Owner = user
		Expect(impersonating(user).Create(ctx, s)).To(Succeed())
		rep, err := mcpclients.Run(ctx, "imported.mjs", mcpclients.Target{
			URL: fmt.Sprintf("%s/mcp/%s/imported", gatewayURL, ns.Name), Token: token,
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
		Expect(listed.Tools[0].Description).To(Equal("Returns the sum of two numbers"))
		Expect(listed.Tools[0].InputSchema).To(HaveKeyWithValue("required", ConsistOf("a", "b")))
		var result struct {
			IsError bool   `json:"isError"`
			Text    string `json:"text"`
		}
		Expect(rep.Into("result", &result)).To(Succeed())
		Expect(result.IsError).To(BeFalse(), "%s", result.Text)
		Expect(result.Text).To(Equal("The sum of 1 and 2 is 3."))
		tc, err := clusterOf("imported").Get(ctx, agent.CallName("imported", 0, 0))
		Expect(err).NotTo(HaveOccurred())
		Expect(tc.Status.Sandbox).NotTo(BeEmpty(), "the call ran in a pod")
	})

	It("docs/mcp.md's Go recipe: lists the tools and runs a turn of two calls in model order", func() {
		newSession("go-recipe")
		tools, results, err := gorecipe.Turn(ctx, fmt.Sprintf("%s/mcp/%s/go-recipe", gatewayURL, ns.Name), token, 0)
		Expect(err).NotTo(HaveOccurred())
		Expect(tools).To(Equal([]string{"echo", "write", "danger", "slow"}))
		Expect(results).To(Equal(mcpclients.RecipeResults))
		clusterOf("go-recipe").ExpectTurnInOrder("t0-i0", "t0-i1")
	})
})
