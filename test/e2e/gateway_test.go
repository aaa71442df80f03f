//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/agent"
)

// gatewayURL is where config/local-gateway serves MCP: the host's network.
const gatewayURL = "http://127.0.0.1:18443"

type bearerToken string

func (b bearerToken) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+string(b))
	return http.DefaultTransport.RoundTrip(r)
}

var _ = Describe("the MCP gateway in the cluster", Ordered, func() {
	const session = "mcp"
	var user, token string

	BeforeAll(func() {
		rendered := admin("kustomize", filepath.Join(testenv.RepoRoot(), "config", "local-gateway"))
		_, err := kubectl("admin", rendered, "apply", "--server-side", "--force-conflicts", "-f", "-")
		Expect(err).NotTo(HaveOccurred())
		admin("-n", "toolgate-system", "rollout", "status", "deployment/toolgate-gateway", "--timeout=120s")

		// An agent with a ServiceAccount; the gateway may act as this
		// namespace's ServiceAccounts.
		admin("-n", ns, "create", "serviceaccount", "mcp-agent")
		user = fmt.Sprintf("system:serviceaccount:%s:mcp-agent", ns)
		admin("-n", ns, "create", "rolebinding", "mcp-agent", "--clusterrole=toolgate-agent", "--serviceaccount="+ns+":mcp-agent")
		admin("-n", ns, "create", "rolebinding", "gateway-impersonator", "--clusterrole=toolgate-gateway-impersonator",
			"--serviceaccount=toolgate-system:toolgate-gateway")
		apply("admin", `
apiVersion: toolgate.dev/v1alpha1
kind: ToolProfile
metadata: {name: mcp}
spec:
  permissionPreset: Trusted
  tools:
    - name: read
      description: Print the arguments.
      parameters: {type: object}
      output: {schema: {type: string}, render: {format: Text}}
      container: {image: toolgate.dev/tools:dev, command: [/bin/cat]}
      isConcurrencySafe: "true"
    - name: write
      description: Pretend to write; a person approves it first.
      parameters: {type: object}
      output: {schema: {type: string}, render: {format: Text}}
      container: {image: toolgate.dev/tools:dev, command: [/bin/sh, -c, 'cat >/dev/null; printf written']}
  preExecute:
    - {name: ask-writes, tools: [write], action: Ask}
`)
		admin("-n", ns, "wait", "--for=condition=Ready", "toolprofile/mcp", "--timeout=60s")
		// The session is the ServiceAccount's own: it creates it.
		_, err = kubectl("admin", fmt.Sprintf(`
apiVersion: toolgate.dev/v1alpha1
kind: AgentSession
metadata: {name: %s}
spec:
  owner: %s
  profileRef: {name: mcp}
`, session, user), "apply", "-n", ns, "--as", user, "-f", "-")
		Expect(err).NotTo(HaveOccurred())
		token = strings.TrimSpace(admin("-n", ns, "create", "token", "mcp-agent", "--audience", "toolgate-gateway"))
	})

	It("runs one model turn of three calls (two parallel reads, a write approved by a person) and returns them in model order, as the transcript does", func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		c := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "v0"}, nil)
		cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{
			Endpoint:   fmt.Sprintf("%s/mcp/%s/%s", gatewayURL, ns, session),
			HTTPClient: &http.Client{Transport: bearerToken(token)},
		}, nil)
		Expect(err).NotTo(HaveOccurred())
		defer func() { _ = cs.Close() }()

		calls := []*mcp.CallToolParams{
			{Name: "read", Arguments: map[string]any{"n": 1}},
			{Name: "read", Arguments: map[string]any{"n": 2}},
			{Name: "write", Arguments: map[string]any{"text": "x"}},
		}
		type answer struct {
			index int
			res   *mcp.CallToolResult
			err   error
		}
		answers := make(chan answer, len(calls))
		for i, p := range calls {
			p.Meta = mcp.Meta{agent.MetaTurn: 0, agent.MetaIndex: i, agent.MetaTurnSize: len(calls)}
			go func() {
				res, err := cs.CallTool(ctx, p)
				answers <- answer{i, res, err}
			}()
		}
		write := agent.CallName(session, 0, 2)
		Eventually(func() error {
			_, err := kubectl("demo-approver", "", "toolgate", "approve", write, "-n", ns,
				"--kubeconfig", filepath.Join(clusterDir, "kubeconfig", "demo-approver.kubeconfig"))
			return err
		}, 2*time.Minute, time.Second).Should(Succeed())

		var order []string
		got := map[int]*mcp.CallToolResult{}
		for range calls {
			var a answer
			Eventually(answers, 3*time.Minute).Should(Receive(&a))
			Expect(a.err).NotTo(HaveOccurred())
			Expect(a.res.IsError).To(BeFalse(), "%v", a.res.Meta)
			got[a.index] = a.res
		}
		for i := range calls {
			Expect(got[i].Meta).To(HaveKeyWithValue(agent.MetaCommitSequence, BeEquivalentTo(i)), "model order")
			order = append(order, "toolcall.toolgate.dev/"+agent.CallName(session, 0, int32(i)))
		}
		transcript := admin("toolgate", "transcript", session, "-n", ns, "-o", "name",
			"--kubeconfig", filepath.Join(clusterDir, "kubeconfig", "admin.kubeconfig"))
		Expect(strings.Fields(transcript)).To(Equal(order))
	})

	It("answers 401 without a token for its audience, and creates nothing", func() {
		before := admin("-n", ns, "get", "toolcalls", "-o", "name")
		apiToken := strings.TrimSpace(admin("-n", ns, "create", "token", "mcp-agent"))
		for _, header := range []string{"", "Bearer " + apiToken} {
			req, err := http.NewRequest(http.MethodPost, fmt.Sprintf("%s/mcp/%s/%s", gatewayURL, ns, session),
				strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read","arguments":{}}}`))
			Expect(err).NotTo(HaveOccurred())
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			if header != "" {
				req.Header.Set("Authorization", header)
			}
			resp, err := http.DefaultClient.Do(req)
			Expect(err).NotTo(HaveOccurred())
			Expect(resp.Body.Close()).To(Succeed())
			Expect(resp.StatusCode).To(Equal(http.StatusUnauthorized))
		}
		Expect(admin("-n", ns, "get", "toolcalls", "-o", "name")).To(Equal(before))
	})
})
