//go:build e2e

package e2e

// Specs of a cluster of more than one node: the local cluster started with
// TOOLGATE_NODES=2 (hack/node-up.sh adds a node with its own runtime,
// network and firewall). On one node they are skipped; CI runs the suite
// on two.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/testenv"
)

// firstNode is the local cluster's first node (cluster-up.sh), the one the
// others are added to.
const firstNode = "localhost"

// otherNode is a Ready node other than the first, or the spec is skipped.
func otherNode() string {
	nodes := &corev1.NodeList{}
	ExpectWithOffset(1, clients[userAdmin].List(ctx, nodes)).To(Succeed())
	for _, n := range nodes.Items {
		for _, c := range n.Status.Conditions {
			if n.Name != firstNode && c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				return n.Name
			}
		}
	}
	Skip("one node: TOOLGATE_NODES=2 hack/cluster-up.sh starts two")
	return ""
}

// nodeNumber is N of the local cluster's node N, named 10.245.N.2
// (hack/cluster-env.sh), or "" for the first node.
func nodeNumber(name string) string {
	if parts := strings.Split(name, "."); name != firstNode && len(parts) == 4 {
		return parts[2]
	}
	return ""
}

// nodeScript runs hack/<script> for the node named name.
func nodeScript(script, name string) {
	n := nodeNumber(name)
	ExpectWithOffset(1, n).NotTo(BeEmpty(), "node %s is not one of hack/node-up.sh's", name)
	out, err := exec.Command(filepath.Join(testenv.RepoRoot(), "hack", script), n).CombinedOutput()
	ExpectWithOffset(1, err).NotTo(HaveOccurred(), "%s %s: %s", script, n, out)
}

// scheduledOn is the node each pod of the namespace was bound to, from
// the scheduler's events (which outlive the pods).
func (ns *agentNamespace) scheduledOn() map[string]string {
	events := &corev1.EventList{}
	ExpectWithOffset(1, ns.Admin.List(ctx, events, client.MatchingFields{"reason": "Scheduled"})).To(Succeed())
	out := map[string]string{}
	for _, e := range events.Items {
		// "Successfully assigned <namespace>/<pod> to <node>"
		if i := strings.LastIndex(e.Message, " to "); i > 0 {
			out[e.InvolvedObject.Name] = e.Message[i+len(" to "):]
		}
	}
	return out
}

// workspace is the path of the namespace's workspace volume on this
// machine (every node of the local cluster is on it).
func (ns *agentNamespace) workspace(name string) string {
	return filepath.Join(clusterDir, "pv", ns.Name, name)
}

// startedOn waits until n bodies of the nodes profile have started (each
// writes started-<pod> in the workspace) and returns their pods.
func (ns *agentNamespace) startedOn(n int) []string {
	var pods []string
	EventuallyWithOffset(1, func() []string {
		found, _ := filepath.Glob(ns.workspace("started-*"))
		pods = pods[:0]
		for _, f := range found {
			pods = append(pods, strings.TrimPrefix(filepath.Base(f), "started-"))
		}
		return pods
	}, 90*time.Second, 200*time.Millisecond).Should(HaveLen(n), "%d bodies started", n)
	return pods
}

// cordon marks node unschedulable until the spec ends.
func cordon(node string) {
	mustKubectl(userAdmin, "", "cordon", node)
	DeferCleanup(func() { mustKubectl(userAdmin, "", "uncordon", node) })
}

var _ = Describe("toolgate on two nodes", func() {
	It("spreads a session's warm pods over the nodes", func() {
		second := otherNode()
		ns := newAgentNamespace("nodes-warm")
		ns.OpenSession("spread", "e2e", func(s *toolgatev1alpha1.AgentSession) { s.Spec.WarmPods = ptr.To[int32](2) })
		ns.WarmToolsPod()
		Eventually(func() map[string]int {
			on := map[string]int{}
			for _, p := range ns.WarmPods() {
				if kind(&p) == injectedToolsPod {
					on[p.Spec.NodeName]++
				}
			}
			return on
		}, 60*time.Second, 200*time.Millisecond).Should(Equal(map[string]int{firstNode: 1, second: 1}),
			"the session's two warm pods of a kind, one on each node")
	})

	It("runs a session's pods where its workspace can be mounted", func() {
		second := otherNode()
		ns := newAgentNamespaceOn("nodes-workspace", second)
		warm := ns.WarmToolsPod()
		Expect(warm.Spec.NodeName).To(Equal(second), "the warm pod is on the workspace's node")
		ns.Submit(call{"a", "echo_args", `{"n":1}`}, call{"b", "echo_args", `{"n":2}`}, call{"c", "nap", `{"seconds":1}`})
		for _, name := range []string{"a", "b", "c"} {
			Expect(ns.Committed(name).Status.Result.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded), name)
		}
		on := ns.scheduledOn()
		Expect(on).NotTo(BeEmpty())
		for pod, node := range on {
			Expect(node).To(Equal(second), "pod %s", pod)
		}
	})

	// takeAway starts an idempotent body and one that must never run
	// twice on the other node, takes the node away with leave (a drain, a
	// loss), then lets the bodies go on. The idempotent call runs again on
	// the first node and succeeds; the other settles as the eviction.
	takeAway := func(prefix string, leave func(node string)) {
		second := otherNode()
		ns := newAgentNamespace(prefix)
		profile, err := os.ReadFile("testdata/nodes-profile.yaml")
		Expect(err).NotTo(HaveOccurred())
		ns.Apply(userAdmin, string(profile))
		ns.ProfileReady("nodes")
		ns.OpenSession("away", "nodes", func(s *toolgatev1alpha1.AgentSession) { s.Spec.WarmPods = ptr.To[int32](0) })

		By("both bodies started on " + second)
		mustKubectl(userAdmin, "", "cordon", firstNode)
		uncordoned := false
		DeferCleanup(func() {
			if !uncordoned {
				mustKubectl(userAdmin, "", "uncordon", firstNode)
			}
		})
		ns.Submit(call{"again", "wait_idempotent", `{}`}, call{"once", "wait_once", `{}`})
		started := ns.startedOn(2)
		on := ns.scheduledOn()
		for _, pod := range started {
			Expect(on[pod]).To(Equal(second), "pod %s", pod)
		}
		mustKubectl(userAdmin, "", "uncordon", firstNode)
		uncordoned = true

		By("the node taken away")
		leave(second)
		Expect(os.WriteFile(ns.workspace("go"), nil, 0o644)).To(Succeed())

		once := &toolgatev1alpha1.ToolCall{}
		Eventually(func(g Gomega) {
			g.Expect(ns.Admin.Get(ctx, client.ObjectKey{Name: "once"}, once)).To(Succeed())
			g.Expect(once.Committed()).To(BeTrue(), "phase %q", once.Status.Phase)
		}, 4*time.Minute, time.Second).Should(Succeed())
		Expect(once.Status.Result.Outcome).To(Equal(toolgatev1alpha1.OutcomeFailed))
		Expect(once.Status.Result.ErrorCode).To(Equal("sandbox_evicted"), once.Status.Result.Message)
		Expect(once.Status.Attempt).To(BeEquivalentTo(1), "never run twice")

		again := &toolgatev1alpha1.ToolCall{}
		Eventually(func(g Gomega) {
			g.Expect(ns.Admin.Get(ctx, client.ObjectKey{Name: "again"}, again)).To(Succeed())
			g.Expect(again.Committed()).To(BeTrue(), "phase %q", again.Status.Phase)
		}, 4*time.Minute, time.Second).Should(Succeed())
		Expect(again.Status.Result.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded), again.Status.Result.Message)
		Expect(again.Status.Attempt).To(BeEquivalentTo(2), "dispatched again once")
		Expect(ns.scheduledOn()[again.Status.Sandbox]).To(Equal(firstNode), "the second attempt ran on the node left")
		Expect(fmt.Sprint(again.Status.Stages)).To(ContainSubstring("sandbox_evicted"), "the retry names the eviction")
	}

	It("settles the calls of a drained node: an idempotent one runs again elsewhere, any other fails evicted", func() {
		takeAway("nodes-drain", func(node string) {
			cordon(node)
			mustKubectl(userAdmin, "", "drain", node, "--pod-selector", toolgatev1alpha1.LabelSandbox+"=true",
				"--ignore-daemonsets", "--delete-emptydir-data", "--force", "--timeout=120s")
		})
	})

	It("settles the calls of a lost node: an idempotent one runs again elsewhere, any other fails evicted", func() {
		takeAway("nodes-lost", func(node string) {
			nodeScript("node-down.sh", node)
			DeferCleanup(func() {
				nodeScript("node-up.sh", node)
				mustKubectl(userAdmin, "", "wait", "--for=condition=Ready", "node/"+node, "--timeout=120s")
			})
		})
	})
})
