//go:build e2e

package e2e

import (
	"fmt"
	"strconv"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/runner"
)

// What a tool pod can reach, probed from inside real tool pods (the probe
// tool of testdata/profile.yaml opens a TCP connection and says whether it
// connected) on a cluster that enforces NetworkPolicy (kube-router, on the
// local cluster). Every address probed is the local cluster's own: its
// node, its Service range, and pods this spec made.
var _ = Describe("isolation of tool pods, enforced", func() {
	It("keeps a tool pod from the API server, the node, another session's pod and another namespace's, and reaches what an operator's policy opens", func() {
		// A server in a namespace of its own, reached from a pod that is
		// not a tool's to show it serves.
		target := newNamespace("reach-target")
		server := restrictedPod("server", "/bin/httpd", "-f", "-p", "8080", "-h", "/")
		Expect(target.Admin.Create(ctx, server)).To(Succeed())
		serverIP := runningIP(target, "server")

		ns := newAgentNamespace("reach")
		// Another session of the same namespace, keeping a warm pod whose
		// runner listens for its calls.
		ns.OpenSession("other", "e2e")
		ns.Submit(call{"other-warmup", "echo_args", `{}`})
		Expect(ns.Committed("other-warmup").Status.Result.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded))
		var otherPod corev1.Pod
		Eventually(func() string {
			for _, p := range ns.WarmPods() {
				otherPod = p
			}
			return otherPod.Status.PodIP
		}, 60*time.Second, 200*time.Millisecond).ShouldNot(BeEmpty(), "the other session's warm pod runs")
		ns.Session, ns.turn = "s", 0

		// Every node, at the address its pods have a route to (its address
		// on their bridge, where its kubelet listens too), and at its
		// InternalIP; a tool pod runs on one of them.
		nodes := &corev1.NodeList{}
		Expect(clients[userAdmin].List(ctx, nodes)).To(Succeed())
		type probe struct {
			name, host string
			port       int
		}
		var nodeProbes []probe
		for i, n := range nodes.Items {
			for _, a := range n.Status.Addresses {
				if a.Type == corev1.NodeInternalIP {
					nodeProbes = append(nodeProbes, probe{fmt.Sprintf("to-node-%d-apiserver", i), a.Address, 6443},
						probe{fmt.Sprintf("to-node-%d-kubelet", i), a.Address, 10250})
				}
			}
			bridge := podBridgeAddress(n.Name)
			nodeProbes = append(nodeProbes, probe{fmt.Sprintf("to-node-%d-bridge-kubelet", i), bridge, 10250})
		}
		Expect(nodeProbes).To(HaveLen(3*len(nodes.Items)), "every node has an InternalIP")
		apiService := &corev1.Service{}
		Expect(clients[userAdmin].Get(ctx, client.ObjectKey{Namespace: "default", Name: "kubernetes"}, apiService)).To(Succeed())
		// Where pods reach the API server on the local cluster (the egress
		// proxy does, a pod): its own pods' environment says.
		proxy := &appsv1.Deployment{}
		Expect(clients[userAdmin].Get(ctx, client.ObjectKey{Namespace: "toolgate-system", Name: "toolgate-egress"}, proxy)).To(Succeed())
		podsAPI := ""
		for _, e := range proxy.Spec.Template.Spec.Containers[0].Env {
			if e.Name == "KUBERNETES_SERVICE_HOST" {
				podsAPI = e.Value
			}
		}
		Expect(podsAPI).NotTo(BeEmpty(), "the egress proxy's KUBERNETES_SERVICE_HOST")

		probes := append([]probe{
			{"to-api-service", apiService.Spec.ClusterIP, 443},
			{"to-pods-apiserver", podsAPI, 6443},
			{"to-other-session", otherPod.Status.PodIP, runner.Port},
			{"to-other-namespace", serverIP, 8080},
		}, nodeProbes...)
		var turn []call
		for _, p := range probes {
			turn = append(turn, call{p.name, "probe", fmt.Sprintf(`{"host":"%s","port":%d}`, p.host, p.port)})
		}
		ns.Submit(turn...)
		for _, p := range probes {
			res := ns.Committed(p.name).Status.Result
			Expect(res.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded), "%s: %s", p.name, res.Message)
			Expect(res.Content).To(Equal("unreachable\n"), "a tool pod reached %s:%d (%s)", p.host, p.port, p.name)
		}

		By("an operator's NetworkPolicy opens one destination: the tool pods reach it, and the session says the sandbox is widened")
		ns.Apply(userAdmin, fmt.Sprintf(`
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: tools-to-server}
spec:
  podSelector: {matchLabels: {%s: "true"}}
  policyTypes: [Egress]
  egress:
    - to:
        - namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: %s}}
          podSelector: {matchLabels: {app: server}}
      ports: [{protocol: TCP, port: 8080}]
`, toolgatev1alpha1.LabelSandbox, target.Name))
		// The CNI applies a new policy at its next sync, as it does a new
		// pod's: a call made sooner is refused, so calls are made until one
		// reaches it.
		reached := ""
		for k := 0; k < 8 && reached == ""; k++ {
			name := fmt.Sprintf("to-opened-%d", k)
			ns.Submit(call{name, "probe", fmt.Sprintf(`{"host":"%s","port":8080}`, serverIP)})
			if ns.Committed(name).Status.Result.Content == "reached\n" {
				reached = name
			}
		}
		Expect(reached).NotTo(BeEmpty(), "the opened destination, within 8 calls")
		ns.Submit(call{"to-other-session-still", "probe", fmt.Sprintf(`{"host":"%s","port":%d}`, otherPod.Status.PodIP, runner.Port)})
		Expect(ns.Committed("to-other-session-still").Status.Result.Content).To(Equal("unreachable\n"), "the other session's pod admits no tool pod")
	})
})

// restrictedPod is a pod Pod Security "restricted" admits, labelled
// app=name, running the tools image's command.
func restrictedPod(name string, command ...string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: ptr.To(false),
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65532),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{
				Name: name, Image: "toolgate.dev/tools:dev", ImagePullPolicy: corev1.PullNever, Command: command,
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
			}},
		},
	}
}

// runningIP waits for the pod to run and returns its address.
func runningIP(ns *agentNamespace, name string) string {
	var ip string
	EventuallyWithOffset(1, func() string {
		p := ns.Pod(name)
		if p.Status.Phase == corev1.PodRunning {
			ip = p.Status.PodIP
		}
		return ip
	}, 60*time.Second, 200*time.Millisecond).ShouldNot(BeEmpty(), "pod %s runs", name)
	return ip
}

// podBridgeAddress is the address a node of the local cluster has on its
// pods' bridge (docs/local-cluster.md): 10.244.0.254 on the first node,
// 10.244.(N-1).254 on node N.
func podBridgeAddress(node string) string {
	n := 1
	if s := nodeNumber(node); s != "" {
		var err error
		n, err = strconv.Atoi(s)
		ExpectWithOffset(1, err).NotTo(HaveOccurred())
	}
	return fmt.Sprintf("10.244.%d.254", n-1)
}
