package gateway_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/gateway"
	"github.com/toolgate/toolgate/pkg/agent"
	"github.com/toolgate/toolgate/test/mcpclients"
)

// slowApproval runs the spec that waits longer than Node's 300 s HTTP
// defaults (make test-slow-approval); make test runs the same client with
// its timeouts scaled down.
const slowApproval = "TOOLGATE_SLOW_APPROVAL"

var _ = Describe("A call that waits for a person", func() {
	// undecided fails the spec if the call's question was decided: what the
	// client saw so far was sent while a person had not yet answered.
	undecided := func(ns, name string) {
		ar := &toolgatev1alpha1.ApprovalRequest{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, ar)).To(Succeed())
		Expect(ar.Spec.Decision).To(BeNil())
	}
	// asked waits for the call's ApprovalRequest.
	asked := func(ns, name string) {
		Eventually(func() error {
			return k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &toolgatev1alpha1.ApprovalRequest{})
		}).WithTimeout(time.Minute).Should(Succeed())
	}

	It("answers with response headers at once and keeps its stream alive until the person decides", func() {
		ns, user := agentNamespace()
		session(ns, user)
		srv := startGateway(ctx, gateway.Options{KeepAlive: 200 * time.Millisecond})
		DeferCleanup(srv.Close)
		name := agent.CallName("s", 0, 0)

		// The request ends with the spec, before its server closes (which
		// waits for the requests it serves).
		rctx, end := context.WithCancel(ctx)
		DeferCleanup(end)
		body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"write","arguments":{"text":"x"},"_meta":{"toolgate.dev/turn":0,"toolgate.dev/index":0,"toolgate.dev/turnSize":1}}}`
		req, err := http.NewRequestWithContext(rctx, http.MethodPost, fmt.Sprintf("%s/mcp/%s/s", srv.URL, ns), strings.NewReader(body))
		Expect(err).NotTo(HaveOccurred())
		req.Header.Set("Authorization", "Bearer "+token(ns, "agent", audience))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
		responses := make(chan *http.Response, 1)
		go func() {
			defer GinkgoRecover()
			if res, err := http.DefaultClient.Do(req); err == nil {
				responses <- res
			}
		}()
		var res *http.Response
		Eventually(responses).WithTimeout(time.Minute).Should(Receive(&res))
		defer func() { _ = res.Body.Close() }()
		Expect(res.StatusCode).To(Equal(http.StatusOK))
		Expect(res.Header.Get("Content-Type")).To(Equal("text/event-stream"))
		asked(ns, name)
		undecided(ns, name)

		lines := bufio.NewScanner(res.Body)
		lines.Buffer(make([]byte, 1<<20), 1<<20)
		comments := 0
		for comments < 3 && lines.Scan() {
			if strings.HasPrefix(lines.Text(), ":") {
				comments++
			}
		}
		Expect(comments).To(Equal(3), "keep-alive comments while the question waits")
		undecided(ns, name)

		Expect(clusterOf(ns).Approve(ctx, name)).To(Succeed())
		var result string
		for lines.Scan() {
			if data, ok := strings.CutPrefix(lines.Text(), "data: "); ok && strings.Contains(data, `"result"`) {
				result = data
				break
			}
		}
		Expect(result).To(ContainSubstring("written"))
	})

	run := func(ns, url string, httpTimeout, wait time.Duration) {
		name := agent.CallName("s", 0, 0)
		approved := make(chan error, 1)
		go func() {
			defer GinkgoRecover()
			asked(ns, name)
			time.Sleep(wait)
			undecided(ns, name)
			approved <- clusterOf(ns).Approve(ctx, name)
		}()
		env := []string{}
		if httpTimeout > 0 {
			env = append(env, fmt.Sprintf("HTTP_TIMEOUT_MS=%d", httpTimeout.Milliseconds()))
		}
		r, err := mcpclients.Run(ctx, "wait-for-person.mjs", mcpclients.Target{URL: url, Token: token(ns, "agent", audience), Env: env})
		Expect(err).NotTo(HaveOccurred())
		Expect(<-approved).To(Succeed())
		var turn struct {
			Results  []mcpclients.Result `json:"results"`
			Progress []string            `json:"progress"`
			Seconds  float64             `json:"seconds"`
		}
		Expect(r.Into("turn", &turn)).To(Succeed())
		Expect(turn.Results).To(HaveLen(2))
		Expect(turn.Results[0].IsError).To(BeFalse(), turn.Results[0].Text)
		Expect(turn.Results[0].Text).To(Equal("written"))
		Expect(turn.Results[1].IsError).To(BeFalse(), turn.Results[1].Text)
		Expect(turn.Results[1].Text).To(ContainSubstring("after"))
		// The turn lasted the person's wait, longer than the client's timeouts.
		Expect(turn.Seconds).To(BeNumerically(">=", wait.Seconds()))
		Expect(turn.Progress).To(ContainElement(And(ContainSubstring("approvalrequest/"+name), ContainSubstring("(for "))),
			"the wait repeated in progress notifications")
		clusterOf(ns).ExpectTurnInOrder("t0-i0", "t0-i1")
	}

	It("survives Node's HTTP client and the TypeScript SDK with their timeouts scaled down to 2 s, for a 10 s wait", func() {
		Expect(mcpclients.Install()).To(Succeed())
		ns, user := agentNamespace()
		session(ns, user)
		srv := startGateway(ctx, gateway.Options{KeepAlive: 500 * time.Millisecond})
		DeferCleanup(srv.Close)
		run(ns, fmt.Sprintf("%s/mcp/%s/s", srv.URL, ns), 2*time.Second, 10*time.Second)
	})

	It("survives a wait longer than Node's 300 s defaults, with the client's default settings", func() {
		if os.Getenv(slowApproval) == "" {
			Skip("runs with " + slowApproval + "=1 (make test-slow-approval)")
		}
		Expect(mcpclients.Install()).To(Succeed())
		ns, user := agentNamespace()
		session(ns, user)
		run(ns, fmt.Sprintf("%s/mcp/%s/s", server.URL, ns), 0, 310*time.Second)
	})
})
