//go:build e2e

// Package e2e runs toolgate on the local single-node cluster (hack/
// cluster-up.sh) with real pods: make test-e2e brings the cluster up,
// installs toolgate (config/local) and runs this suite.
package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/toolgate/toolgate/internal/runner"
	"github.com/toolgate/toolgate/internal/testenv"
)

var (
	clusterDir = envOr("TOOLGATE_CLUSTER_DIR", "/var/tmp/toolgate-cluster")
	kubectlBin string
	ns         string
)

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func TestE2E(t *testing.T) {
	RegisterFailHandler(Fail)
	// Eventually bounds liveness, not speed (the suite runs beside CPU load).
	SetDefaultEventuallyTimeout(60 * time.Second)
	RunSpecs(t, "e2e (local cluster, real pods)")
}

// kubectl runs kubectl as user (admin, demo-agent, demo-approver) and
// returns stdout, or the error with stderr.
func kubectl(user string, stdin string, args ...string) (string, error) {
	if args[0] != "toolgate" { // kubectl takes no flags before a plugin's name
		args = append([]string{"--kubeconfig", filepath.Join(clusterDir, "kubeconfig", user+".kubeconfig")}, args...)
	}
	cmd := exec.Command(kubectlBin, args...)
	// The plugin, built by hack/images.sh.
	cmd.Env = append(os.Environ(), "PATH="+filepath.Join(testenv.RepoRoot(), "_output", "bin")+":"+os.Getenv("PATH"))
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("kubectl %s: %v: %s", strings.Join(args, " "), err, errb.String())
	}
	return out.String(), nil
}

func admin(args ...string) string {
	out, err := kubectl("admin", "", args...)
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	return out
}

func apply(user, yaml string) {
	_, err := kubectl(user, yaml, "apply", "-n", ns, "-f", "-")
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
}

var _ = BeforeSuite(func() {
	bin, err := testenv.BinaryAssetsDir()
	Expect(err).NotTo(HaveOccurred())
	kubectlBin = filepath.Join(bin, "kubectl")
	admin("-n", "toolgate-system", "rollout", "status", "deployment/toolgate-controller-manager", "--timeout=120s")
	ns = fmt.Sprintf("e2e-%d", time.Now().Unix())
	admin("create", "namespace", ns)
	admin("label", "namespace", ns, "pod-security.kubernetes.io/enforce=restricted")
	admin("-n", ns, "create", "rolebinding", "agent", "--clusterrole=toolgate-agent", "--user=demo-agent")
	admin("-n", ns, "create", "rolebinding", "approver", "--clusterrole=toolgate-approver", "--user=demo-approver")
	// The session mounts the claim "workspace": demo-agent may use it (kubectl
	// create role refuses the verb use outside its known resources).
	apply("admin", `
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: workspace-user}
rules: [{apiGroups: [""], resources: [persistentvolumeclaims], resourceNames: [workspace], verbs: [use]}]
`)
	admin("-n", ns, "create", "rolebinding", "workspace-user", "--role=workspace-user", "--user=demo-agent")
	// The agent may also approve, to prove the API server refuses its own
	// approval for another reason than RBAC.
	admin("-n", ns, "create", "rolebinding", "agent-approver", "--clusterrole=toolgate-approver", "--user=demo-agent")
	pvDir := filepath.Join(clusterDir, "pv", ns)
	Expect(os.MkdirAll(pvDir, 0o777)).To(Succeed())
	Expect(os.Chmod(pvDir, 0o777)).To(Succeed())
	_, err = kubectl("admin", fmt.Sprintf(`
apiVersion: v1
kind: PersistentVolume
metadata: {name: %[1]s}
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteOnce]
  storageClassName: ""
  claimRef: {namespace: %[1]s, name: workspace}
  hostPath: {path: %[2]s}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: workspace, namespace: %[1]s}
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: ""
  volumeName: %[1]s
  resources: {requests: {storage: 1Gi}}
`, ns, pvDir), "apply", "-f", "-")
	Expect(err).NotTo(HaveOccurred())
	profile, err := os.ReadFile("testdata/profile.yaml")
	Expect(err).NotTo(HaveOccurred())
	apply("admin", string(profile))
	admin("-n", ns, "wait", "--for=condition=Ready", "toolprofile/e2e", "--timeout=60s")
	apply("demo-agent", `
apiVersion: toolgate.dev/v1alpha1
kind: AgentSession
metadata: {name: s}
spec:
  owner: demo-agent
  profileRef: {name: e2e}
  workspace: {existingClaim: workspace}
  maxParallel: 4
`)
})

var _ = ReportAfterEach(func(r SpecReport) {
	if !r.Failed() {
		return
	}
	for _, args := range [][]string{
		{"-n", "toolgate-system", "logs", "deployment/toolgate-controller-manager", "--tail=200"},
		{"-n", ns, "get", "events", "--sort-by=.lastTimestamp"},
		{"-n", ns, "describe", "pods"},
		{"-n", ns, "get", "toolcalls", "-o", "yaml"},
	} {
		out, err := kubectl("admin", "", args...)
		AddReportEntry(strings.Join(args, " "), out+fmt.Sprint(err))
	}
})

type toolCall struct {
	Status struct {
		Phase    string `json:"phase"`
		Schedule struct {
			ExecutionMode  string `json:"executionMode"`
			CommitSequence *int64 `json:"commitSequence"`
		} `json:"schedule"`
		Result *struct {
			Outcome   string `json:"outcome"`
			ErrorCode string `json:"errorCode"`
			Content   string `json:"content"`
			Value     string `json:"value"`
		} `json:"result"`
	} `json:"status"`
}

var turn int64

// submit creates calls of one new turn, as demo-agent, in model order.
func submit(calls ...[3]string) {
	turn++
	var b strings.Builder
	for i, c := range calls {
		fmt.Fprintf(&b, `---
apiVersion: toolgate.dev/v1alpha1
kind: ToolCall
metadata: {name: %s}
spec:
  sessionRef: {name: s}
  turn: %d
  index: %d
  turnSize: %d
  callID: call-%s
  tool: %s
  arguments: '%s'
  requester: demo-agent
`, c[0], turn, i, len(calls), c[0], c[1], c[2])
	}
	apply("demo-agent", b.String())
}

func get(name string) toolCall {
	var tc toolCall
	out := admin("-n", ns, "get", "toolcall", name, "-o", "json")
	ExpectWithOffset(1, json.Unmarshal([]byte(out), &tc)).To(Succeed())
	return tc
}

func committed(name string) toolCall {
	EventuallyWithOffset(1, func() string { return get(name).Status.Phase }, 90*time.Second, 200*time.Millisecond).Should(Equal("Committed"))
	return get(name)
}

// injectedToolsPod is the image and entrypoint of a pod of the tools image
// with the runner injected (the kind of the nap and echo_args tools).
const injectedToolsPod = "toolgate.dev/tools:dev /toolgate/bin/toolgate-runner"

func podsOf(call string) int {
	out := admin("-n", ns, "get", "pods", "-l", "toolgate.dev/call="+call, "-o", "name")
	return len(strings.Fields(out))
}

var _ = Describe("toolgate on real pods", Ordered, func() {
	It("runs an allowed call in a pod and returns its output", func() {
		submit([3]string{"allowed", "echo_args", `{"hello":"world"}`})
		tc := committed("allowed")
		Expect(tc.Status.Result.Outcome).To(Equal("Succeeded"))
		Expect(tc.Status.Result.Content).To(Equal(`{"hello":"world"}`))
	})

	It("runs a tool whose image carries the runner without an init container, and names a runnerPath the image lacks", func() {
		submit([3]string{"own-runner", "echo_own_runner", `{"own":"runner"}`}, [3]string{"no-runner", "echo_no_runner", `{}`})
		// The pod goes with the call's result: look while the tool runs.
		Eventually(func() string {
			return admin("-n", ns, "get", "pods", "-l", "toolgate.dev/call=own-runner", "-o", "jsonpath={range .items[*]}{.spec.initContainers}|{.spec.containers[0].command[0]}{end}")
		}, 30*time.Second, 100*time.Millisecond).Should(Equal("|/toolgate-runner"), "no init container; the image's own runner is the entrypoint")
		tc := committed("own-runner")
		Expect(tc.Status.Result.Outcome).To(Equal("Succeeded"))
		Expect(tc.Status.Result.Content).To(Equal(`{"own":"runner"}`))
		missing := committed("no-runner")
		Expect(missing.Status.Result.ErrorCode).To(Equal("sandbox_unavailable"))
	})

	It("creates no pod for a denied call", func() {
		submit([3]string{"denied", "forbidden", `{}`})
		tc := committed("denied")
		Expect(tc.Status.Result.ErrorCode).To(Equal("policy_denied"))
		Expect(podsOf("denied")).To(Equal(0))
		Expect(admin("-n", ns, "get", "events", "--field-selector", "involvedObject.name=denied")).NotTo(ContainSubstring("Scheduled"))
	})

	It("asks a person: the requester's own approval is refused, a second identity's is not", func() {
		submit([3]string{"asked", "echo_args", `{"approve":"please"}`})
		Eventually(func() error {
			_, err := kubectl("demo-approver", "", "-n", ns, "get", "approvalrequest", "asked")
			return err
		}, 30*time.Second).Should(Succeed())
		Expect(podsOf("asked")).To(Equal(0))
		_, err := kubectl("demo-agent", "", "-n", ns, "patch", "approvalrequest", "asked", "--type=merge",
			"-p", `{"spec":{"decision":{"action":"Approve","decidedBy":"demo-agent"}}}`)
		Expect(err).To(MatchError(ContainSubstring("the requester of a call may not decide its approval")))
		_, err = kubectl("demo-approver", "", "-n", ns, "patch", "approvalrequest", "asked", "--type=merge",
			"-p", `{"spec":{"decision":{"action":"Approve","decidedBy":"demo-approver"}}}`)
		Expect(err).NotTo(HaveOccurred())
		tc := committed("asked")
		Expect(tc.Status.Result.Outcome).To(Equal("Succeeded"))
		Expect(tc.Status.Result.Content).To(Equal(`{"approve":"please"}`))
	})

	It("approves with the kubectl plugin, which names the approver itself", func() {
		submit([3]string{"plugin", "echo_args", `{"approve":"via the plugin"}`})
		Eventually(func() error {
			_, err := kubectl("demo-approver", "", "-n", ns, "get", "approvalrequest", "plugin")
			return err
		}, 30*time.Second).Should(Succeed())
		// As cluster admin impersonating each identity (--as), the way an
		// operator checks a user's view: what waits, as JSON; the requester
		// refused by the admission policy (demo-agent may approve in this
		// namespace, so RBAC alone would let it); the approver admitted.
		admin := filepath.Join(clusterDir, "kubeconfig", "admin.kubeconfig")
		out, err := kubectl("admin", "", "toolgate", "--kubeconfig", admin, "--as", "demo-approver", "-n", ns, "pending", "-o", "json")
		Expect(err).NotTo(HaveOccurred())
		var waiting struct {
			Items []struct {
				Metadata struct{ Name string } `json:"metadata"`
			} `json:"items"`
		}
		Expect(json.Unmarshal([]byte(out), &waiting)).To(Succeed(), out)
		Expect(waiting.Items).To(ContainElement(HaveField("Metadata.Name", "plugin")))
		_, err = kubectl("admin", "", "toolgate", "--kubeconfig", admin, "--as", "demo-agent", "-n", ns, "approve", "plugin")
		Expect(err).To(MatchError(ContainSubstring("the requester of a call may not decide its approval")))
		out, err = kubectl("admin", "", "toolgate", "--kubeconfig", admin, "--as", "demo-approver", "-n", ns, "approve", "plugin", "-m", "from the plugin")
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(ContainSubstring("Approve by demo-approver"))
		Expect(committed("plugin").Status.Result.Outcome).To(Equal("Succeeded"))
		out, err = kubectl("demo-agent", "", "toolgate", "--kubeconfig", filepath.Join(clusterDir, "kubeconfig", "demo-agent.kubeconfig"), "-n", ns, "trace", "plugin")
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(ContainSubstring("Approval"))
		Expect(out).To(ContainSubstring("no divergence"))
	})

	It("keeps a workspace write for the next call, and denies a path escape with a stable code", func() {
		submit([3]string{"write", "write_file", `{"path":"dir/note.txt","content":"persisted"}`})
		Expect(committed("write").Status.Result.Outcome).To(Equal("Succeeded"))
		submit([3]string{"read", "read_file", `{"path":"dir/note.txt"}`}, [3]string{"escape", "read_file", `{"path":"../../../../etc/passwd"}`})
		Expect(committed("read").Status.Result.Content).To(Equal("persisted"))
		esc := committed("escape")
		Expect(esc.Status.Result.Outcome).To(Equal("Denied"))
		Expect(esc.Status.Result.ErrorCode).To(Equal("sandbox_denied"))
	})

	It("commits a parallel batch in model order when the first call sleeps", func() {
		submit([3]string{"slow", "nap", `{"seconds":3}`}, [3]string{"fast1", "echo_args", `{"n":1}`}, [3]string{"fast2", "echo_args", `{"n":2}`})
		slow, f1, f2 := committed("slow"), committed("fast1"), committed("fast2")
		Expect([]string{slow.Status.Result.Outcome, f1.Status.Result.Outcome, f2.Status.Result.Outcome}).To(HaveEach("Succeeded"))
		Expect(*f1.Status.Schedule.CommitSequence).To(Equal(*slow.Status.Schedule.CommitSequence + 1))
		Expect(*f2.Status.Schedule.CommitSequence).To(Equal(*slow.Status.Schedule.CommitSequence + 2))
		Expect([]string{slow.Status.Schedule.ExecutionMode, f1.Status.Schedule.ExecutionMode, f2.Status.Schedule.ExecutionMode}).To(HaveEach("Parallel"))
	})

	It("stops the pod before a cancelled call settles", func() {
		submit([3]string{"cancelled", "nap", `{"seconds":4}`})
		Eventually(func() int { return podsOf("cancelled") }, 30*time.Second, 100*time.Millisecond).Should(Equal(1))
		_, err := kubectl("demo-agent", "", "-n", ns, "patch", "toolcall", "cancelled", "--type=merge", "-p", `{"spec":{"cancelRequested":true}}`)
		Expect(err).NotTo(HaveOccurred())
		tc := committed("cancelled")
		Expect(tc.Status.Result.Outcome).To(Equal("Cancelled"))
		Expect(podsOf("cancelled")).To(Equal(0), "the pod must be gone when the result settles")
	})

	It("kills a tool that outlives its timeout", func() {
		submit([3]string{"overtime", "nap", `{"seconds":30}`})
		tc := committed("overtime")
		Expect(tc.Status.Result.Outcome).To(Equal("TimedOut"))
		Expect(podsOf("overtime")).To(Equal(0))
	})

	// The session keeps a pod of each kind its calls use started ahead of
	// need (warmPods, default 1): the next call of that kind is handed to
	// it, and a replacement starts. Nobody else can plant one.
	It("hands a call to a warm pod, starts a replacement, and refuses a planted one", func() {
		warm := func() []string {
			out := admin("-n", ns, "get", "pods", "-l", "toolgate.dev/warm=true,toolgate.dev/session=s", "-o",
				`jsonpath={range .items[?(@.status.phase=="Running")]}{.metadata.name}{" "}{.metadata.labels.toolgate\.dev/template}{"\n"}{end}`)
			return strings.Split(strings.TrimSpace(out), "\n")
		}
		// A container tool's warm pod (the tools image, the runner injected;
		// earlier specs used it).
		var name string
		Eventually(func() string {
			for _, l := range warm() {
				if f := strings.Fields(l); len(f) == 2 && strings.TrimSpace(admin("-n", ns, "get", "pod", f[0], "-o", "jsonpath={.spec.containers[0].image} {.spec.containers[0].command[0]}")) == injectedToolsPod {
					name = f[0]
				}
			}
			return name
		}, 60*time.Second, 200*time.Millisecond).ShouldNot(BeEmpty())
		submit([3]string{"warmnap", "nap", `{"seconds":2}`})
		Eventually(func() string {
			return admin("-n", ns, "get", "pod", name, "-o", "jsonpath={.metadata.labels.toolgate\\.dev/call}")
		}, 30*time.Second, 100*time.Millisecond).Should(Equal("warmnap"), "the warm pod was claimed by the call")
		Expect(committed("warmnap").Status.Result.Content).To(Equal("slept\n"))
		Eventually(func() bool {
			for _, l := range warm() {
				if f := strings.Fields(l); len(f) == 2 && f[0] != name {
					return true
				}
			}
			return false
		}, 60*time.Second, 200*time.Millisecond).Should(BeTrue(), "a replacement warm pod runs")

		// demo-approver may create pods here (the built-in edit role), yet
		// cannot plant a warm pod for the session.
		admin("-n", ns, "create", "rolebinding", "approver-edit", "--clusterrole=edit", "--user=demo-approver")
		uid := strings.TrimSpace(admin("-n", ns, "get", "agentsession", "s", "-o", "jsonpath={.metadata.uid}"))
		_, err := kubectl("demo-approver", fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata:
  name: planted
  namespace: %s
  labels: {toolgate.dev/sandbox: "true", toolgate.dev/warm: "true", toolgate.dev/session: s}
  ownerReferences: [{apiVersion: toolgate.dev/v1alpha1, kind: AgentSession, name: s, uid: %s, controller: true}]
spec:
  securityContext: {runAsNonRoot: true, runAsUser: 65532, seccompProfile: {type: RuntimeDefault}}
  containers:
    - name: tool
      image: toolgate.dev/tools:dev
      command: [/bin/sleep, "60"]
      securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
`, ns, uid), "apply", "-f", "-")
		Expect(err).To(MatchError(ContainSubstring("only toolgate may create a pod owned by a ToolCall or an AgentSession")))
	})

	// A runner greets anyone who connects, but takes a call only from the
	// manager's key; and when a turn needs more pods than are warm, the
	// calls beyond take the cold path, with the same results.
	It("refuses a hand-off not sealed by the manager, and falls back to cold pods when no warm one is left", func() {
		var name, ip string
		Eventually(func() string {
			out := admin("-n", ns, "get", "pods", "-l", "toolgate.dev/warm=true,toolgate.dev/session=s", "-o",
				`jsonpath={range .items[?(@.status.phase=="Running")]}{.metadata.name}{" "}{.status.podIP}{" "}{.spec.containers[0].image}{" "}{.spec.containers[0].command[0]}{"\n"}{end}`)
			for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
				if f := strings.Fields(l); len(f) == 4 && f[2]+" "+f[3] == injectedToolsPod {
					name, ip = f[0], f[1]
				}
			}
			return name
		}, 60*time.Second, 200*time.Millisecond).ShouldNot(BeEmpty())
		conn, err := net.DialTimeout("tcp", net.JoinHostPort(ip, fmt.Sprint(runner.Port)), 10*time.Second)
		Expect(err).NotTo(HaveOccurred())
		forger, err := runner.NewManagerKey()
		Expect(err).NotTo(HaveOccurred())
		hello, _, err := runner.Exchange(conn, forger, runner.Request{Op: runner.OpRun, Call: "forged",
			Spec: runner.Spec{Argv: []string{"/bin/echo", "forged"}, TimeoutMillis: 5000}}, nil)
		_ = conn.Close()
		Expect(err).To(MatchError(runner.ErrRefused), "a request sealed under another key does not open")
		Expect(hello.State).To(Equal(runner.StateIdle))

		calls := [][3]string{}
		for i := range 4 {
			calls = append(calls, [3]string{fmt.Sprintf("burst%d", i), "nap", `{"seconds":3}`})
		}
		submit(calls...)
		// A pod goes with its call's result: tell warm from cold while the
		// bodies nap (a claimed warm pod carries toolgate.dev/claimed).
		claimed := map[string]bool{}
		Eventually(func() int {
			for _, c := range calls {
				out := admin("-n", ns, "get", "pods", "-l", "toolgate.dev/call="+c[0], "-o", `jsonpath={range .items[*]}{.metadata.name}={.metadata.annotations.toolgate\.dev/claimed}{end}`)
				if name, when, ok := strings.Cut(strings.TrimSpace(out), "="); ok && name != "" {
					claimed[c[0]] = when != ""
				}
			}
			return len(claimed)
		}, 60*time.Second, 100*time.Millisecond).Should(Equal(len(calls)))
		warm, cold := 0, 0
		for _, c := range calls {
			tc := committed(c[0])
			Expect(tc.Status.Result.Outcome).To(Equal("Succeeded"))
			Expect(tc.Status.Result.Content).To(Equal("slept\n"))
			if claimed[c[0]] {
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
		marker := fmt.Sprintf("e2e-secret-%d", time.Now().UnixNano())
		submit([3]string{"shout", "shout", fmt.Sprintf(`{"token":"%s"}`, marker)})
		Eventually(func() string {
			return admin("-n", ns, "get", "pods", "-l", "toolgate.dev/call=shout", "-o", "jsonpath={.items[*].status.phase}")
		}, 60*time.Second, 100*time.Millisecond).Should(Equal("Running"))
		Expect(admin("-n", ns, "get", "pods", "-l", "toolgate.dev/call=shout", "-o", "yaml")).NotTo(ContainSubstring(marker))
		// The tool has printed its arguments by now (it sleeps 4 s after).
		time.Sleep(time.Second)
		Expect(admin("-n", ns, "logs", "-l", "toolgate.dev/call=shout", "--all-containers")).NotTo(ContainSubstring(marker))
		tc := committed("shout")
		Expect(tc.Status.Result.Content).To(ContainSubstring(marker), "the output reached the result")
		Expect(admin("-n", "toolgate-system", "logs", "-l", "control-plane=controller-manager", "--tail=-1")).NotTo(ContainSubstring(marker))
		Expect(admin("get", "events", "-A", "-o", "yaml")).NotTo(ContainSubstring(marker))
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
		submit([3]string{"combined", "combine", `{}`})
		tc := committed("combined")
		Expect(tc.Status.Result.Outcome).To(Equal("Succeeded"), tc.Status.Result.ErrorCode)
		Expect(tc.Status.Result.Content).To(ContainSubstring(`\"n\":1`))
		Expect(tc.Status.Result.Content).To(ContainSubstring(`\"n\":2`))
		Expect(admin("-n", ns, "get", "toolcalls", "-o",
			`jsonpath={range .items[?(@.spec.parentRef.name=="combined")]}{.spec.tool}:{.status.result.outcome} {end}`)).
			To(Equal("echo_args:Succeeded echo_args:Succeeded "))
	})

	// NetworkPolicies add up: a policy of someone else's that selects tool
	// pods widens their isolation. The session shows it, and shows when it
	// is gone.
	It("shows on the session a NetworkPolicy that widens its tool pods' isolation", func() {
		isolation := func() string {
			return admin("-n", ns, "get", "agentsession", "s", "-o", `jsonpath={.status.conditions[?(@.type=="SandboxIsolated")].reason}`)
		}
		apply("admin", `
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: allow-all-egress}
spec:
  podSelector: {}
  policyTypes: [Egress]
  egress: [{}]
`)
		submit([3]string{"audited", "echo_args", `{"n":3}`})
		committed("audited")
		Eventually(isolation, 30*time.Second, 200*time.Millisecond).Should(Equal("AdditiveNetworkPolicy"))
		Expect(admin("-n", ns, "get", "agentsession", "s", "-o", `jsonpath={.status.conditions[?(@.type=="SandboxIsolated")].message}`)).To(ContainSubstring("allow-all-egress"))
		admin("-n", ns, "delete", "networkpolicy", "allow-all-egress")
		submit([3]string{"audited-again", "echo_args", `{"n":4}`})
		committed("audited-again")
		Eventually(isolation, 30*time.Second, 200*time.Millisecond).Should(Equal("Isolated"))
	})

	It("still yields one result per call when the operator pod is killed mid-run", func() {
		// The replacement manager waits for the dead one's leader lease
		// (15 s) to expire: the tool's timeout must outlive that.
		submit([3]string{"survivor", "patient_nap", `{"seconds":4}`})
		Eventually(func() int { return podsOf("survivor") }, 30*time.Second, 100*time.Millisecond).Should(Equal(1))
		admin("-n", "toolgate-system", "delete", "pod", "-l", "control-plane=controller-manager", "--grace-period=0", "--force")
		tc := committed("survivor")
		Expect(tc.Status.Result.Outcome).To(Equal("Succeeded"), tc.Status.Result.ErrorCode)
		Expect(tc.Status.Result.Content).To(Equal("slept\n"))
		Expect(podsOf("survivor")).To(BeNumerically("<=", 1))
	})
})
