//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/internal/testutil"
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

// gatewayAgent installs the gateway (config/local-gateway) and makes a
// namespace whose ServiceAccount mcp-agent holds the shipped agent role and
// may be acted as by the gateway. It returns the namespace, the
// ServiceAccount's username and a token for the gateway's audience.
func gatewayAgent(prefix string) (*agentNamespace, string, string) {
	rendered := mustKubectl(userAdmin, "", "kustomize", filepath.Join(testenv.RepoRoot(), "config", "local-gateway"))
	mustKubectl(userAdmin, rendered, "apply", "--server-side", "--force-conflicts", "-f", "-")
	mustKubectl(userAdmin, "", "-n", systemNamespace, "rollout", "status", "deployment/toolgate-gateway", "--timeout=120s")

	ns := newNamespace(prefix)
	Expect(ns.Admin.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "mcp-agent"}})).To(Succeed())
	ns.Bind("mcp-agent", "ClusterRole", "toolgate-agent", serviceAccountSubject(ns.Name, "mcp-agent"))
	ns.Bind("gateway-impersonator", "ClusterRole", "toolgate-gateway-impersonator", serviceAccountSubject(systemNamespace, "toolgate-gateway"))
	tr, err := clientset.CoreV1().ServiceAccounts(ns.Name).CreateToken(ctx, "mcp-agent",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{Audiences: []string{"toolgate-gateway"}}}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	return ns, fmt.Sprintf("system:serviceaccount:%s:mcp-agent", ns.Name), tr.Status.Token
}

var _ = Describe("the MCP gateway in the cluster", Ordered, func() {
	const session = "mcp"
	var ns *agentNamespace
	var user, token string

	// Ordered: the gateway, its namespace, the ServiceAccount's session and
	// token are made once for both specs.
	BeforeAll(func() {
		ns, user, token = gatewayAgent("mcp")
		ns.Apply(userAdmin, `
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
  approval: {relayApprovalMessages: true}
`)
		ns.ProfileReady("mcp")
		// The session is the ServiceAccount's own: it creates it.
		s := testutil.MakeAgentSession(ns.Name, session, "mcp").Obj()
		s.Spec.Owner = user
		Expect(impersonating(user).Create(ctx, s)).To(Succeed())
	})

	// connect opens an MCP session to the gateway as the ServiceAccount,
	// closed when the spec ends.
	connect := func(ctx context.Context) *mcp.ClientSession {
		GinkgoHelper()
		c := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "v0"}, nil)
		cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{
			Endpoint:   fmt.Sprintf("%s/mcp/%s/%s", gatewayURL, ns.Name, session),
			HTTPClient: &http.Client{Transport: bearerToken(token)},
		}, nil)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() { _ = cs.Close() })
		return cs
	}

	It("runs one model turn of four calls (two parallel reads, a write approved by a person, one denied) and returns them in model order, with the approver's words, as the transcript does", func() {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		defer cancel()
		cs := connect(ctx)

		calls := []*mcp.CallToolParams{
			{Name: "read", Arguments: map[string]any{"n": 1}},
			{Name: "read", Arguments: map[string]any{"n": 2}},
			{Name: "write", Arguments: map[string]any{"text": "x"}},
			{Name: "write", Arguments: map[string]any{"text": "drop the table"}},
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
		decide := func(verb string, index int32, message string) {
			GinkgoHelper()
			Eventually(func() error {
				name := agent.CallName(session, 0, index)
				_, err := kubectl(userApprover, "", "toolgate", verb, name, "--question", ns.Question(name), "-n", ns.Name, "-m", message, "--kubeconfig", kubeconfig(userApprover))
				return err
			}, 2*time.Minute, time.Second).Should(Succeed())
		}
		decide("approve", 2, "approved for the demo")
		decide("deny", 3, "not on a Friday")

		var order []string
		got := map[int]*mcp.CallToolResult{}
		for range calls {
			var a answer
			Eventually(answers, 3*time.Minute).Should(Receive(&a))
			Expect(a.err).NotTo(HaveOccurred())
			Expect(a.res.IsError).To(Equal(a.index == 3), "%v", a.res.Meta)
			got[a.index] = a.res
		}
		approved, _ := json.Marshal(got[2].Meta[agent.MetaContexts])
		Expect(string(approved)).To(And(ContainSubstring(`"source":"Approval"`), ContainSubstring("approved for the demo")), "the approver's words, relayed")
		denied := got[3].Content[0].(*mcp.TextContent).Text
		Expect(denied).To(And(HavePrefix("approval_rejected: "), ContainSubstring("not on a Friday")), "the MCP result of a denial")
		Expect(fmt.Sprint(got[3])).NotTo(ContainSubstring("drop the table"), "the denial never repeats the arguments")
		for i := range calls {
			Expect(got[i].Meta).To(HaveKeyWithValue(agent.MetaCommitSequence, BeEquivalentTo(i)), "model order")
			order = append(order, "toolcall.toolgate.dev/"+agent.CallName(session, 0, int32(i)))
		}
		transcript := mustKubectl(userAdmin, "", "toolgate", "transcript", session, "-n", ns.Name, "-o", "name", "--kubeconfig", kubeconfig(userAdmin))
		Expect(strings.Fields(transcript)).To(Equal(order))
	})

	It("exports one trace per call, under the agent's span: the gateway's request, the call, and a span per boundary, with no argument text", func() {
		ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		defer cancel()
		cs := connect(ctx)
		traceID := fmt.Sprintf("%016x%016x", time.Now().UnixNano(), GinkgoRandomSeed())
		const agentSpan = "a1b2c3d4e5f60718"
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "read", Arguments: map[string]any{"secret": "trace-argument-marker"},
			Meta: mcp.Meta{"traceparent": traceparent(traceID, agentSpan)}})
		Expect(err).NotTo(HaveOccurred())
		Expect(res.IsError).To(BeFalse())

		var spans []jaegerSpan
		var services map[string]string
		byName := map[string]jaegerSpan{}
		Eventually(func() []string {
			spans, services = jaegerTrace(traceID)
			var names []string
			for _, s := range spans {
				byName[s.OperationName] = s
				names = append(names, s.OperationName)
			}
			return names
		}, 60*time.Second, time.Second).Should(ContainElements("mcp tools/call", "toolgate call", "toolgate PreExecute", "toolgate Dispatch",
			"toolgate Execute", "toolgate sandbox start", "toolgate hand-over", "toolgate body", "toolgate PostExecute", "toolgate Result", "toolgate commit"), "the call's spans in Jaeger")
		gw, root := byName["mcp tools/call"], byName["toolgate call"]
		Expect(gw.parent()).To(Equal(agentSpan), "the gateway's span is the agent's span's child")
		Expect(services[gw.ProcessID]).To(Equal("toolgate-gateway"))
		Expect(root.parent()).To(Equal(gw.SpanID), "the call is the gateway request's child")
		Expect(services[root.ProcessID]).To(Equal("toolgate-manager"))
		for _, s := range spans {
			if strings.HasPrefix(s.OperationName, "toolgate ") && s.OperationName != "toolgate call" {
				Expect(s.parent()).To(Equal(root.SpanID), s.OperationName)
			}
			raw, _ := json.Marshal(s.Tags)
			Expect(string(raw)).NotTo(ContainSubstring("trace-argument-marker"), s.OperationName)
		}
		Expect(fmt.Sprint(root.Tags)).To(And(ContainSubstring("toolgate.tool"), ContainSubstring("Succeeded")))
	})

	It("answers 401 without a token for its audience, and creates nothing", func() {
		calls := func() []string {
			list := &toolgatev1alpha1.ToolCallList{}
			Expect(ns.Admin.List(ctx, list)).To(Succeed())
			var names []string
			for _, tc := range list.Items {
				names = append(names, tc.Name)
			}
			return names
		}
		before := calls()
		// A token for the API server's audience, not the gateway's.
		tr, err := clientset.CoreV1().ServiceAccounts(ns.Name).CreateToken(ctx, "mcp-agent", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		apiToken := tr.Status.Token
		for _, header := range []string{"", "Bearer " + apiToken} {
			req, err := http.NewRequest(http.MethodPost, fmt.Sprintf("%s/mcp/%s/%s", gatewayURL, ns.Name, session),
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
		Expect(calls()).To(Equal(before))
	})
})
