//go:build e2e

// Package e2e runs toolgate on the local single-node cluster (hack/
// cluster-up.sh) with real pods. make test-e2e brings the cluster up,
// builds and imports the images (hack/images.sh), installs toolgate with
// hack/deploy.sh, runs this suite and the short chaos run, then removes the
// cluster. hack/deploy.sh applies the kustomize overlay config/local by
// default; with TOOLGATE_INSTALL=chart it installs the Helm chart
// (charts/toolgate with hack/local-values.yaml) instead, which is how CI
// (.ci/run) installs it. Against a cluster already up and installed, run
// go test -tags e2e ./test/e2e/.
//
// Every spec makes its own namespace and session (framework_test.go), so
// specs depend on no other and run in any order.
package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/providers/sandbox/pod"
	"github.com/toolgate/toolgate/internal/runner"
)

func TestE2E(t *testing.T) {
	RegisterFailHandler(Fail)
	// Eventually bounds liveness, not speed (the suite runs beside CPU load).
	SetDefaultEventuallyTimeout(60 * time.Second)
	RunSpecs(t, "e2e (local cluster, real pods)")
}

var _ = Describe("toolgate on real pods", func() {
	It("runs an allowed call in a pod and returns its output", func() {
		ns := newAgentNamespace("allowed")
		ns.Submit(call{"allowed", "echo_args", `{"hello":"world"}`})
		tc := ns.Committed("allowed")
		Expect(tc.Status.Result.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded))
		Expect(tc.Status.Result.Content).To(Equal(`{"hello":"world"}`))
	})

	It("runs the runner from an image volume or from a tool image that carries it, without an init container, and names a runnerPath the image lacks", func() {
		ns := newAgentNamespace("own-runner")
		ns.Submit(call{"own-runner", "echo_own_runner", `{"own":"runner"}`}, call{"no-runner", "echo_no_runner", `{}`},
			call{"image-volume", "echo_args", `{"runner":"volume"}`})
		// The pod goes with the call's result: look while the tool runs.
		shape := func(name string) func() string {
			return func() string {
				var b strings.Builder
				for _, p := range ns.PodsOfCall(name) {
					for _, c := range p.Spec.InitContainers {
						b.WriteString(c.Name)
					}
					b.WriteString("|" + p.Spec.Containers[0].Command[0])
					for _, v := range p.Spec.Volumes {
						if v.Name == "runner" && v.Image != nil {
							b.WriteString("|image " + v.Image.Reference)
						}
					}
				}
				return b.String()
			}
		}
		Eventually(shape("own-runner"), 30*time.Second, 100*time.Millisecond).Should(Equal("|/toolgate-runner"), "no init container; the image's own runner is the entrypoint")
		// The local install mounts the runner image (--runner-image-volume).
		Eventually(shape("image-volume"), 30*time.Second, 100*time.Millisecond).Should(Equal("|/toolgate/bin/toolgate-runner|image toolgate.dev/runner:dev"),
			"no init container; the runner runs from the runner image, mounted")
		Expect(ns.Committed("image-volume").Status.Result.Content).To(Equal(`{"runner":"volume"}`))
		tc := ns.Committed("own-runner")
		Expect(tc.Status.Result.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded))
		Expect(tc.Status.Result.Content).To(Equal(`{"own":"runner"}`))
		missing := ns.Committed("no-runner")
		Expect(missing.Status.Result.ErrorCode).To(Equal("sandbox_unavailable"))
	})

	It("creates no pod for a denied call", func() {
		ns := newAgentNamespace("denied")
		ns.Submit(call{"denied", "forbidden", `{}`})
		tc := ns.Committed("denied")
		Expect(tc.Status.Result.ErrorCode).To(Equal("policy_denied"))
		Expect(ns.PodsOf("denied")).To(Equal(0))
		events := &corev1.EventList{}
		Expect(ns.Admin.List(ctx, events, client.MatchingFields{"involvedObject.name": "denied"})).To(Succeed())
		for _, e := range events.Items {
			Expect(e.Reason + " " + e.Message).NotTo(ContainSubstring("Scheduled"))
		}
	})

	It("asks a person: the requester's own approval is refused, a second identity's is not", func() {
		ns := newAgentNamespace("asked")
		ns.Submit(call{"asked", "echo_args", `{"approve":"please"}`})
		Eventually(func() error {
			return ns.Approver.Get(ctx, client.ObjectKey{Name: "asked"}, &toolgatev1alpha1.ApprovalRequest{})
		}, 30*time.Second).Should(Succeed())
		Expect(ns.PodsOf("asked")).To(Equal(0))
		// Approval by patch, as a person would with kubectl: the admission
		// policy's message is what the requester reads.
		_, err := kubectl(userAgent, "", "-n", ns.Name, "patch", "approvalrequest", "asked", "--type=merge",
			"-p", ns.Decision("asked", "demo-agent"))
		Expect(err).To(MatchError(ContainSubstring("the requester of a call may not decide its approval")))
		_, err = kubectl(userApprover, "", "-n", ns.Name, "patch", "approvalrequest", "asked", "--type=merge",
			"-p", `{"spec":{"decision":{"action":"Approve","decidedBy":"demo-approver"}}}`)
		Expect(err).To(MatchError(ContainSubstring("a decision names the question its approver read")), "a decision that names no question")
		_, err = kubectl(userApprover, "", "-n", ns.Name, "patch", "approvalrequest", "asked", "--type=merge",
			"-p", ns.Decision("asked", "demo-approver"))
		Expect(err).NotTo(HaveOccurred())
		tc := ns.Committed("asked")
		Expect(tc.Status.Result.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded))
		Expect(tc.Status.Result.Content).To(Equal(`{"approve":"please"}`))
	})

	It("approves with the kubectl plugin, which names the approver itself", func() {
		ns := newAgentNamespace("plugin")
		ns.Submit(call{"plugin", "echo_args", `{"approve":"via the plugin"}`})
		Eventually(func() error {
			return ns.Approver.Get(ctx, client.ObjectKey{Name: "plugin"}, &toolgatev1alpha1.ApprovalRequest{})
		}, 30*time.Second).Should(Succeed())
		// As cluster admin impersonating each identity (--as), the way an
		// operator checks a user's view: what waits, as JSON; the requester
		// refused by the admission policy (demo-agent may approve in this
		// namespace, so RBAC alone would let it); the approver admitted.
		admin := kubeconfig(userAdmin)
		out, err := kubectl(userAdmin, "", "toolgate", "--kubeconfig", admin, "--as", userApprover, "-n", ns.Name, "pending", "-o", "json")
		Expect(err).NotTo(HaveOccurred())
		var waiting toolgatev1alpha1.ApprovalRequestList
		Expect(json.Unmarshal([]byte(out), &waiting)).To(Succeed(), out)
		Expect(waiting.Items).To(ContainElement(HaveField("ObjectMeta.Name", "plugin")))
		_, err = kubectl(userAdmin, "", "toolgate", "--kubeconfig", admin, "--as", userAgent, "-n", ns.Name, "approve", "plugin", "--question", ns.Question("plugin"))
		Expect(err).To(MatchError(ContainSubstring("the requester of a call may not decide its approval")))
		out, err = kubectl(userAdmin, "", "toolgate", "--kubeconfig", admin, "--as", userApprover, "-n", ns.Name, "approve", "plugin", "--question", ns.Question("plugin"), "-m", "from the plugin")
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(ContainSubstring("Approve by demo-approver"))
		Expect(ns.Committed("plugin").Status.Result.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded))
		out, err = kubectl(userAgent, "", "toolgate", "--kubeconfig", kubeconfig(userAgent), "-n", ns.Name, "trace", "plugin")
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(ContainSubstring("Approval"))
		Expect(out).To(ContainSubstring("no divergence"))
	})

	It("keeps a workspace write for the next call, and denies a path escape with a stable code", func() {
		ns := newAgentNamespace("workspace")
		ns.Submit(call{"write", "write_file", `{"path":"dir/note.txt","content":"persisted"}`})
		Expect(ns.Committed("write").Status.Result.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded))
		ns.Submit(call{"read", "read_file", `{"path":"dir/note.txt"}`}, call{"escape", "read_file", `{"path":"../../../../etc/passwd"}`})
		Expect(ns.Committed("read").Status.Result.Content).To(Equal("persisted"))
		esc := ns.Committed("escape")
		Expect(esc.Status.Result.Outcome).To(Equal(toolgatev1alpha1.OutcomeDenied))
		Expect(esc.Status.Result.ErrorCode).To(Equal("sandbox_denied"))
	})

	It("commits a parallel batch in model order when the first call sleeps", func() {
		ns := newAgentNamespace("batch")
		ns.Submit(call{"slow", "nap", `{"seconds":3}`}, call{"fast1", "echo_args", `{"n":1}`}, call{"fast2", "echo_args", `{"n":2}`})
		slow, f1, f2 := ns.Committed("slow"), ns.Committed("fast1"), ns.Committed("fast2")
		Expect([]toolgatev1alpha1.Outcome{slow.Status.Result.Outcome, f1.Status.Result.Outcome, f2.Status.Result.Outcome}).
			To(HaveEach(toolgatev1alpha1.OutcomeSucceeded))
		Expect(*f1.Status.Schedule.CommitSequence).To(Equal(*slow.Status.Schedule.CommitSequence + 1))
		Expect(*f2.Status.Schedule.CommitSequence).To(Equal(*slow.Status.Schedule.CommitSequence + 2))
		Expect([]toolgatev1alpha1.ExecutionMode{slow.Status.Schedule.ExecutionMode, f1.Status.Schedule.ExecutionMode, f2.Status.Schedule.ExecutionMode}).
			To(HaveEach(toolgatev1alpha1.ModeParallel))
	})

	It("stops the pod before a cancelled call settles", func() {
		ns := newAgentNamespace("cancel")
		ns.Submit(call{"cancelled", "nap", `{"seconds":4}`})
		Eventually(func() int { return ns.PodsOf("cancelled") }, 30*time.Second, 100*time.Millisecond).Should(Equal(1))
		tc := &toolgatev1alpha1.ToolCall{}
		Expect(ns.Agent.Get(ctx, client.ObjectKey{Name: "cancelled"}, tc)).To(Succeed())
		cancel := client.MergeFrom(tc.DeepCopy())
		tc.Spec.CancelRequested = true
		Expect(ns.Agent.Patch(ctx, tc, cancel)).To(Succeed())
		tc = ns.Committed("cancelled")
		Expect(tc.Status.Result.Outcome).To(Equal(toolgatev1alpha1.OutcomeCancelled))
		// Nothing of the pod runs once the result settles: the pod is gone,
		// or being deleted and reported Succeeded or Failed by its kubelet,
		// whose object goes once the kubelet has torn its sandbox down
		// (docs/security.md: a finalizer may hold the object, never its
		// processes).
		Expect(stillRunning(ns.PodsOfCall("cancelled"))).To(BeEmpty(), "a pod of the cancelled call still runs when its result settles")
		Eventually(func() int { return ns.PodsOf("cancelled") }, 30*time.Second, 200*time.Millisecond).Should(BeZero(), "the cancelled call's pod is deleted")
	})

	It("kills a tool that outlives its timeout", func() {
		ns := newAgentNamespace("overtime")
		ns.Submit(call{"overtime", "nap", `{"seconds":30}`})
		tc := ns.Committed("overtime")
		Expect(tc.Status.Result.Outcome).To(Equal(toolgatev1alpha1.OutcomeTimedOut))
		// The runner stopped every process of the tool before its frame;
		// the pod goes once that outcome is durable, so a manager dying in
		// between cannot lose it (docs/sandbox.md): right after the
		// commit it may still be terminating.
		Eventually(func() int { return ns.PodsOf("overtime") }, 30*time.Second, 200*time.Millisecond).Should(BeZero(), "the timed-out call's pod is deleted")
	})

	// The session keeps a pod of each kind its calls use started ahead of
	// need (warmPods, default 1): the next call of that kind is handed to
	// it, and a replacement starts. Nobody else can plant one.
	It("hands a call to a warm pod, starts a replacement, and refuses a planted one", func() {
		ns := newAgentNamespace("warm")
		// A container tool's warm pod (the tools image, the runner
		// injected), after a first call of that kind.
		name := ns.WarmToolsPod().Name
		ns.Submit(call{"warmnap", "nap", `{"seconds":2}`})
		Eventually(func() string {
			call, _, _ := toolgatev1alpha1.PodCall(ns.Pod(name))
			return call
		}, 30*time.Second, 100*time.Millisecond).Should(Equal("warmnap"), "the warm pod was claimed by the call")
		Expect(ns.Committed("warmnap").Status.Result.Content).To(Equal("slept\n"))
		Eventually(func() bool {
			for _, p := range ns.WarmPods() {
				if p.Name != name {
					return true
				}
			}
			return false
		}, 60*time.Second, 200*time.Millisecond).Should(BeTrue(), "a replacement warm pod runs")

		// demo-approver may create pods here (the built-in edit role), yet
		// cannot plant a warm pod for the session: neither one owned by
		// it, nor one labelled as a tool pod.
		ns.Bind("approver-edit", "ClusterRole", "edit", userSubject(userApprover))
		uid := ns.AgentSession().UID
		plant := func(labels, owners string) error {
			_, err := kubectl(userApprover, fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata:
  name: planted
  namespace: %s
  labels: {%s}
  ownerReferences: [%s]
spec:
  securityContext: {runAsNonRoot: true, runAsUser: 65532, seccompProfile: {type: RuntimeDefault}}
  containers:
    - name: tool
      image: toolgate.dev/tools:dev
      command: [/bin/sleep, "60"]
      securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
`, ns.Name, labels, owners), "apply", "-f", "-")
			return err
		}
		poolLabels := fmt.Sprintf(`%s: "true", %s: %s`, toolgatev1alpha1.LabelWarm, toolgatev1alpha1.LabelSession, ns.Session)
		owned := fmt.Sprintf(`{apiVersion: toolgate.dev/v1alpha1, kind: AgentSession, name: %s, uid: %s, controller: true}`, ns.Session, uid)
		Expect(plant(poolLabels, owned)).To(MatchError(ContainSubstring("only toolgate may create a pod owned by a ToolCall or an AgentSession")))
		Expect(plant(fmt.Sprintf(`%s: "true", %s`, toolgatev1alpha1.LabelSandbox, poolLabels), "")).To(MatchError(ContainSubstring("only toolgate labels a pod toolgate.dev/sandbox")))
	})

	// The exploit of a forged adoption, on a cluster whose garbage
	// collector and kubelet are real: a pod made under a pending call's
	// deterministic name, with its labels, running a real runner with the
	// manager's public key (copied from a real tool pod), would have been
	// handed the call's arguments. It is made by demo-approver with the
	// built-in edit role, as admission lets it (no owner reference:
	// admission refuses a pod owned by anything of toolgate's to anyone
	// but the manager). toolgate never hands it anything, because it did
	// not seal it, and runs the call in a pod of its own beside it.
	It("never hands a call to a pod it did not create, even one running a real runner under the call's name", func() {
		// The spec greets the planted runner from the host, which only the
		// first node's pods admit (as their node): the workspace keeps them
		// there.
		ns := newAgentNamespaceOn("forged", firstNode)
		template := ns.WarmToolsPod()
		ns.Bind("approver-edit", "ClusterRole", "edit", userSubject(userApprover))
		ns.Submit(call{"victim", "echo_args", `{"approve":"yes","token":"victim-secret-42"}`})
		victim := &toolgatev1alpha1.ToolCall{}
		Eventually(func() error { return ns.Admin.Get(ctx, client.ObjectKey{Name: "victim"}, victim) }, 30*time.Second).Should(Succeed())
		Eventually(func() error {
			return ns.Approver.Get(ctx, client.ObjectKey{Name: "victim"}, &toolgatev1alpha1.ApprovalRequest{})
		}, 30*time.Second, 100*time.Millisecond).Should(Succeed(), "the call waits for its approval: time to plant")
		planted := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
			Name:   pod.Name(victim.Name, string(victim.UID), 1),
			Labels: map[string]string{toolgatev1alpha1.LabelSandbox: "true", toolgatev1alpha1.LabelCallUID: string(victim.UID), toolgatev1alpha1.LabelAttempt: "1"},
		}, Spec: *template.Spec.DeepCopy()}
		planted.Spec.NodeName = ""
		// Labelled as a tool pod, admission refuses it (only toolgate
		// labels tool pods); under the call's name and its other labels,
		// it is made.
		Eventually(func() error { return ns.Approver.Create(ctx, planted.DeepCopy()) }, 30*time.Second, 200*time.Millisecond).Should(
			MatchError(ContainSubstring("only toolgate labels a pod toolgate.dev/sandbox")))
		delete(planted.Labels, toolgatev1alpha1.LabelSandbox)
		Eventually(func() error { return ns.Approver.Create(ctx, planted) }, 30*time.Second, 200*time.Millisecond).Should(Succeed())
		Eventually(func() string { return ns.Pod(planted.Name).Status.PodIP }, 60*time.Second, 200*time.Millisecond).ShouldNot(BeEmpty())

		_, err := kubectl(userApprover, "", "-n", ns.Name, "patch", "approvalrequest", "victim", "--type=merge",
			"-p", ns.Decision("victim", "demo-approver"))
		Expect(err).NotTo(HaveOccurred())
		tc := ns.Committed("victim")
		Expect(tc.Status.Result.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded), tc.Status.Result.Message)
		Expect(tc.Status.Result.Content).To(ContainSubstring("victim-secret-42"))

		// Its runner was never handed a call: it still greets as idle.
		forger, err := runner.NewManagerKey()
		Expect(err).NotTo(HaveOccurred())
		var hello *runner.Hello
		Eventually(func(g Gomega) {
			conn, err := net.DialTimeout("tcp", net.JoinHostPort(ns.Pod(planted.Name).Status.PodIP, fmt.Sprint(runner.Port)), 5*time.Second)
			g.Expect(err).NotTo(HaveOccurred())
			hello, _, _ = runner.Exchange(conn, forger, runner.Request{Op: runner.OpCollect, Call: "victim"}, nil)
			_ = conn.Close()
			g.Expect(hello).NotTo(BeNil())
		}, 90*time.Second, 500*time.Millisecond).Should(Succeed())
		Expect(hello.State).To(Equal(runner.StateIdle), "the planted runner was handed the call")
	})

	// A runner greets anyone who connects, but takes a call only from the
	// manager's key; and when a turn needs more pods than are warm, the
	// calls beyond take the cold path, with the same results.
	It("refuses a hand-off not sealed by the manager, and falls back to cold pods when no warm one is left", func() {
		// The forger dials from the host, which only the first node's pods
		// admit (as their node): the workspace keeps the session there.
		ns := newAgentNamespaceOn("handoff", firstNode)
		warmPod := ns.WarmToolsPod()
		conn, err := net.DialTimeout("tcp", net.JoinHostPort(warmPod.Status.PodIP, fmt.Sprint(runner.Port)), 10*time.Second)
		Expect(err).NotTo(HaveOccurred())
		forger, err := runner.NewManagerKey()
		Expect(err).NotTo(HaveOccurred())
		hello, _, err := runner.Exchange(conn, forger, runner.Request{Op: runner.OpRun, Call: "forged",
			Spec: runner.Spec{Argv: []string{"/bin/echo", "forged"}, TimeoutMillis: 5000}}, nil)
		_ = conn.Close()
		Expect(err).To(MatchError(runner.ErrRefused), "a request sealed under another key does not open")
		Expect(hello.State).To(Equal(runner.StateIdle))

		calls := []call{}
		for i := range 4 {
			calls = append(calls, call{fmt.Sprintf("burst%d", i), "nap", `{"seconds":3}`})
		}
		ns.Submit(calls...)
		// A pod goes with its call's result: tell warm from cold while the
		// bodies nap (a claimed warm pod carries toolgate.dev/claimed).
		claimed := map[string]bool{}
		Eventually(func() int {
			for _, c := range calls {
				if pods := ns.PodsOfCall(c.Name); len(pods) > 0 {
					claimed[c.Name] = pods[0].Annotations[toolgatev1alpha1.AnnotationClaimed] != ""
				}
			}
			return len(claimed)
		}, 60*time.Second, 100*time.Millisecond).Should(Equal(len(calls)))
		warm, cold := 0, 0
		for _, c := range calls {
			tc := ns.Committed(c.Name)
			Expect(tc.Status.Result.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded))
			Expect(tc.Status.Result.Content).To(Equal("slept\n"))
			if claimed[c.Name] {
				warm++
			} else {
				cold++
			}
		}
		Expect(warm).To(BeNumerically(">=", 1), "the warm pod, untouched by the forged hand-off, served a call")
		Expect(cold).To(BeNumerically(">=", 1), "the calls beyond the warm pods took the cold path")
	})

	// A secret in a call's arguments and in its tool's output reaches the
	// call's result and nothing else: not the pod (spec or container log),
	// not the manager's log, not an Event, not a log file of the cluster.
	It("keeps a call's arguments and output out of every log, Event and pod", func() {
		ns := newAgentNamespace("secret")
		marker := fmt.Sprintf("e2e-secret-%d", time.Now().UnixNano())
		ns.Submit(call{"shout", "shout", fmt.Sprintf(`{"token":"%s"}`, marker)})
		Eventually(func() []corev1.PodPhase {
			var phases []corev1.PodPhase
			for _, p := range ns.PodsOfCall("shout") {
				phases = append(phases, p.Status.Phase)
			}
			return phases
		}, 60*time.Second, 100*time.Millisecond).Should(Equal([]corev1.PodPhase{corev1.PodRunning}))
		pods := ns.PodsOfCall("shout")
		Expect(toYAML(pods)).NotTo(ContainSubstring(marker))
		// The tool has printed its arguments by now (it sleeps 4 s after).
		time.Sleep(time.Second)
		Expect(podLogs(ns.PodsOfCall("shout"))).NotTo(ContainSubstring(marker))
		tc := ns.Committed("shout")
		Expect(tc.Status.Result.Content).To(ContainSubstring(marker), "the output reached the result")
		managers := &corev1.PodList{}
		Expect(clients[userAdmin].List(ctx, managers, client.InNamespace(systemNamespace), client.MatchingLabels{managerLabel: managerValue})).To(Succeed())
		Expect(managers.Items).NotTo(BeEmpty())
		Expect(podLogs(managers.Items)).NotTo(ContainSubstring(marker))
		events := &corev1.EventList{}
		Expect(clients[userAdmin].List(ctx, events)).To(Succeed())
		Expect(toYAML(events)).NotTo(ContainSubstring(marker))
		logs, err := filepath.Glob(filepath.Join(clusterDir, "logs", "*.log"))
		Expect(err).NotTo(HaveOccurred())
		Expect(logs).NotTo(BeEmpty())
		for _, f := range logs {
			data, err := os.ReadFile(f)
			Expect(err).NotTo(HaveOccurred())
			Expect(strings.Contains(string(data), marker)).To(BeFalse(), "%s holds the secret", f)
		}
	})

	// Code Mode on real pods: the body of combine calls echo_args twice
	// through the runner; each sub-call is a nested ToolCall with its own
	// pod, and the body joins their results.
	It("runs a body's sub-calls as nested calls in their own pods", func() {
		ns := newAgentNamespace("nested")
		ns.Submit(call{"combined", "combine", `{}`})
		tc := ns.Committed("combined")
		Expect(tc.Status.Result.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded), tc.Status.Result.ErrorCode)
		Expect(tc.Status.Result.Content).To(ContainSubstring(`\"n\":1`))
		Expect(tc.Status.Result.Content).To(ContainSubstring(`\"n\":2`))
		calls := &toolgatev1alpha1.ToolCallList{}
		Expect(ns.Admin.List(ctx, calls)).To(Succeed())
		var subs strings.Builder
		for _, c := range calls.Items {
			if c.Spec.ParentRef != nil && c.Spec.ParentRef.Name == "combined" {
				outcome := toolgatev1alpha1.Outcome("")
				if c.Status.Result != nil {
					outcome = c.Status.Result.Outcome
				}
				fmt.Fprintf(&subs, "%s:%s ", c.Spec.Tool, outcome)
			}
		}
		Expect(subs.String()).To(Equal("echo_args:Succeeded echo_args:Succeeded "))
	})

	// NetworkPolicies add up: a policy of someone else's that selects tool
	// pods widens their isolation. The session shows it, and shows when it
	// is gone.
	It("shows on the session a NetworkPolicy that widens its tool pods' isolation", func() {
		ns := newAgentNamespace("isolation")
		isolation := func() *metav1.Condition {
			return apimeta.FindStatusCondition(ns.AgentSession().Status.Conditions, toolgatev1alpha1.ConditionSandboxIsolated)
		}
		reason := func() string {
			if c := isolation(); c != nil {
				return c.Reason
			}
			return ""
		}
		policy := &networkingv1.NetworkPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: "allow-all-egress"},
			Spec: networkingv1.NetworkPolicySpec{
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
				Egress:      []networkingv1.NetworkPolicyEgressRule{{}},
			},
		}
		Expect(ns.Admin.Create(ctx, policy)).To(Succeed())
		ns.Submit(call{"audited", "echo_args", `{"n":3}`})
		ns.Committed("audited")
		Eventually(reason, 30*time.Second, 200*time.Millisecond).Should(Equal(toolgatev1alpha1.AgentSessionReasonAdditiveNetworkPolicy))
		Expect(isolation().Message).To(ContainSubstring("allow-all-egress"))
		Expect(ns.Admin.Delete(ctx, policy)).To(Succeed())
		ns.Submit(call{"audited-again", "echo_args", `{"n":4}`})
		ns.Committed("audited-again")
		Eventually(reason, 30*time.Second, 200*time.Millisecond).Should(Equal(toolgatev1alpha1.AgentSessionReasonIsolated))
	})

	// Serial: it kills the manager every other spec's calls need.
	It("still yields one result per call when the operator pod is killed mid-run", Serial, func() {
		ns := newAgentNamespace("survivor")
		// The replacement manager waits for the dead one's leader lease
		// (15 s) to expire: the tool's timeout must outlive that.
		ns.Submit(call{"survivor", "patient_nap", `{"seconds":4}`})
		Eventually(func() int { return ns.PodsOf("survivor") }, 30*time.Second, 100*time.Millisecond).Should(Equal(1))
		Expect(clients[userAdmin].DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(systemNamespace),
			client.MatchingLabels{managerLabel: managerValue}, client.GracePeriodSeconds(0))).To(Succeed())
		tc := ns.Committed("survivor")
		Expect(tc.Status.Result.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded), tc.Status.Result.ErrorCode)
		Expect(tc.Status.Result.Content).To(Equal("slept\n"))
		Expect(ns.PodsOf("survivor")).To(BeNumerically("<=", 1))
	})
})

// toYAML is the objects as kubectl get -o yaml prints them (near enough to
// search for a string).
func toYAML(obj any) string {
	out, err := yaml.Marshal(obj)
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	return string(out)
}
