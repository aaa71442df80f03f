package gateway_test

import (
	"context"
	"fmt"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/test/mcpclients"
	"github.com/toolgate/toolgate/test/mcpclients/gorecipe"
)

// A spec per client of mcpclients.Clients, against the suite's gateway
// (the process sandbox); test/e2e runs them on a cluster.
var _ = Describe("MCP clients from the npm registry", func() {
	BeforeEach(func() {
		Expect(mcpclients.Install()).To(Succeed())
	})
	for _, c := range mcpclients.Clients {
		It(c.Name+": lists, runs a turn with a parallel pair and an approved write, reads a denial, and cancels", func() {
			ns, user := agentNamespace()
			session(ns, user)
			c.Exercise(ctx, fmt.Sprintf("%s/mcp/%s/s", server.URL, ns), token(ns, "agent", audience), clusterOf(ns))
		})
	}
})

var _ = Describe("docs/mcp.md's Go recipe", func() {
	It("lists the tools and runs a turn of two calls in model order", func() {
		ns, user := agentNamespace()
		session(ns, user)
		tools, results, err := gorecipe.Turn(ctx, fmt.Sprintf("%s/mcp/%s/s", server.URL, ns), token(ns, "agent", audience), 0)
		Expect(err).NotTo(HaveOccurred())
		Expect(tools).To(Equal([]string{"echo", "write", "danger", "slow"}))
		Expect(results).To(Equal(mcpclients.RecipeResults))
		clusterOf(ns).ExpectTurnInOrder("t0-i0", "t0-i1")
	})
})

// clusterOf is how the clients' checks read session "s" of ns and approve
// its calls: as alice, who holds the shipped approver role.
func clusterOf(ns string) mcpclients.Cluster {
	return mcpclients.Cluster{
		Session: "s",
		Get: func(ctx context.Context, name string) (*toolgatev1alpha1.ToolCall, error) {
			tc := &toolgatev1alpha1.ToolCall{}
			return tc, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, tc)
		},
		Approve: func(ctx context.Context, name string) error {
			ar := &toolgatev1alpha1.ApprovalRequest{}
			if err := as("alice").Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, ar); err != nil {
				return err
			}
			base := ar.DeepCopy()
			ar.Spec.Decision = ar.DecisionOf(toolgatev1alpha1.DecisionApprove, "alice", "")
			return as("alice").Patch(ctx, ar, client.MergeFrom(base))
		},
	}
}
