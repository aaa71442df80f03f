//go:build e2e

package e2e

// The suite's framework, in the manner of Cluster API's and cert-manager's
// e2e frameworks: every spec makes its own namespace (newAgentNamespace, or
// newNamespace for a room without the e2e profile), acts in it through one
// typed client per identity, and leaves it to a cleanup that dumps what is
// there if the spec failed, then deletes it. The suite waits at its end for
// every namespace it made to be gone (a finalizer nobody clears fails it).

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/internal/testutil"
)

// The identities of the local cluster (hack/cluster-up.sh writes a
// kubeconfig for each): the cluster's admin, the agent that submits calls
// and the person who approves them.
const (
	userAdmin    = "admin"
	userAgent    = "demo-agent"
	userApprover = "demo-approver"
)

// The namespace toolgate runs in, and its manager's pods.
const (
	systemNamespace = "toolgate-system"
	managerLabel    = "control-plane"
	managerValue    = "controller-manager"
)

var (
	clusterDir = envOr("TOOLGATE_CLUSTER_DIR", "/var/tmp/toolgate-cluster")
	kubectlBin string

	// ctx is the suite's: nothing in it outlives a spec's Eventually.
	ctx = context.Background()

	scheme = k8sruntime.NewScheme()
	// clients holds a typed client per identity, not scoped to a namespace.
	clients = map[string]client.Client{}
	// clientset is the admin's, for what controller-runtime's client does
	// not read (pod logs, a ServiceAccount's token).
	clientset kubernetes.Interface

	// made are the namespaces the specs made, for the suite's last wait.
	madeMu sync.Mutex
	made   []string
)

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(toolgatev1alpha1.AddToScheme(scheme))
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// kubeconfig is the path of user's kubeconfig.
func kubeconfig(user string) string {
	return filepath.Join(clusterDir, "kubeconfig", user+".kubeconfig")
}

// restConfig is user's client configuration, from its kubeconfig. The
// specs poll: client-go's default rate limit (5/s) would throttle them.
func restConfig(user string) *rest.Config {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig(user))
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	cfg.QPS, cfg.Burst = 50, 100
	return cfg
}

func newClient(cfg *rest.Config) client.Client {
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	return c
}

// impersonating is a client of the admin acting as user (a ServiceAccount's
// "system:serviceaccount:<namespace>:<name>", say), the way kubectl --as
// does: the API server authorizes and admits the request as user.
func impersonating(user string) client.Client {
	cfg := restConfig(userAdmin)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	return newClient(cfg)
}

// kubectl runs kubectl as user (admin, demo-agent, demo-approver) and
// returns stdout, or the error with stderr.
func kubectl(user string, stdin string, args ...string) (string, error) {
	if args[0] != "toolgate" { // kubectl takes no flags before a plugin's name
		args = append([]string{"--kubeconfig", kubeconfig(user)}, args...)
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

// mustKubectl is kubectl that fails the spec on an error.
func mustKubectl(user, stdin string, args ...string) string {
	out, err := kubectl(user, stdin, args...)
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	return out
}

var _ = BeforeSuite(func() {
	bin, err := testenv.BinaryAssetsDir()
	Expect(err).NotTo(HaveOccurred())
	kubectlBin = filepath.Join(bin, "kubectl")
	for _, user := range []string{userAdmin, userAgent, userApprover} {
		clients[user] = newClient(restConfig(user))
	}
	clientset, err = kubernetes.NewForConfig(restConfig(userAdmin))
	Expect(err).NotTo(HaveOccurred())
	mustKubectl(userAdmin, "", "-n", systemNamespace, "rollout", "status", "deployment/toolgate-controller-manager", "--timeout=120s")
	// For the whole suite: the install's audit sink hears every call, and
	// its manager and gateway export every call's trace.
	notifications = startNotificationReceiver()
	startJaeger()
})

// Every namespace a spec made is gone at the end: deleting one stops and
// settles its calls (toolgate's finalizers), and nothing may hold it.
var _ = AfterSuite(func() {
	madeMu.Lock()
	names := append([]string(nil), made...)
	madeMu.Unlock()
	admin := clients[userAdmin]
	if admin == nil {
		return // BeforeSuite failed
	}
	for _, name := range names {
		Eventually(func() error {
			err := admin.Get(ctx, client.ObjectKey{Name: name}, &corev1.Namespace{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			var held []string
			calls := &toolgatev1alpha1.ToolCallList{}
			if err := admin.List(ctx, calls, client.InNamespace(name)); err == nil {
				for _, tc := range calls.Items {
					for _, f := range tc.Finalizers {
						if f == toolgatev1alpha1.FinalizerStopWork {
							held = append(held, tc.Name)
						}
					}
				}
			}
			return fmt.Errorf("namespace %s is still there (%v); ToolCalls holding %s: %v", name, err, toolgatev1alpha1.FinalizerStopWork, held)
		}, 3*time.Minute, time.Second).Should(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(admin.Get(ctx, client.ObjectKey{Name: name}, &corev1.PersistentVolume{}))
		}, time.Minute, time.Second).Should(BeTrue(), "the workspace volume of %s is deleted", name)
		Expect(os.RemoveAll(filepath.Join(clusterDir, "pv", name))).To(Succeed())
	}
})

// agentNamespace is one spec's room: a namespace of its own, the typed
// clients of each identity scoped to it, and (from newAgentNamespace) the
// e2e profile and a session of demo-agent's, whose turns it counts.
type agentNamespace struct {
	// Name is the namespace's.
	Name string
	// Session is the AgentSession Submit's calls belong to.
	Session string
	// Admin, Agent and Approver act as admin, demo-agent and
	// demo-approver in the namespace.
	Admin, Agent, Approver client.Client

	turn int64
}

// newNamespace makes a namespace named after prefix, as admin: Pod
// Security "restricted" enforced, demo-agent bound to toolgate-agent (and,
// to prove the API server refuses the requester's own approval for another
// reason than RBAC, to toolgate-approver), demo-approver bound to
// toolgate-approver. If the spec fails, the namespace's state is added to
// its report; then the namespace is deleted.
func newNamespace(prefix string) *agentNamespace {
	admin := clients[userAdmin]
	created := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		GenerateName: prefix + "-",
		Labels:       map[string]string{"pod-security.kubernetes.io/enforce": "restricted"},
	}}
	ExpectWithOffset(1, admin.Create(ctx, created)).To(Succeed())
	ns := &agentNamespace{
		Name:     created.Name,
		Admin:    client.NewNamespacedClient(admin, created.Name),
		Agent:    client.NewNamespacedClient(clients[userAgent], created.Name),
		Approver: client.NewNamespacedClient(clients[userApprover], created.Name),
	}
	madeMu.Lock()
	made = append(made, ns.Name)
	madeMu.Unlock()
	By("namespace " + ns.Name)
	DeferCleanup(func() {
		Expect(client.IgnoreNotFound(admin.Delete(ctx, created))).To(Succeed())
	})
	DeferOnFailure(ns.dump)
	ns.Bind("agent", "ClusterRole", "toolgate-agent", userSubject(userAgent))
	ns.Bind("approver", "ClusterRole", "toolgate-approver", userSubject(userApprover))
	ns.Bind("agent-approver", "ClusterRole", "toolgate-approver", userSubject(userAgent))
	return ns
}

// newAgentNamespace is newNamespace with what the specs of real pods use:
// a hostPath volume claimed as "workspace" (under clusterDir/pv/<name>)
// that demo-agent may use, the profile "e2e" of testdata/profile.yaml,
// Ready, and demo-agent's session "s" on both (maxParallel 4).
func newAgentNamespace(prefix string) *agentNamespace {
	return newAgentNamespaceOn(prefix, "")
}

// newAgentNamespaceOn is newAgentNamespace whose workspace volume only
// node can mount (its node affinity), where node is not "".
func newAgentNamespaceOn(prefix, node string) *agentNamespace {
	ns := newNamespace(prefix)
	// The session mounts the claim "workspace": demo-agent may use it.
	ExpectWithOffset(1, ns.Admin.Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "workspace-user"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"persistentvolumeclaims"},
			ResourceNames: []string{"workspace"}, Verbs: []string{"use"}}},
	})).To(Succeed())
	ns.Bind("workspace-user", "Role", "workspace-user", userSubject(userAgent))

	pvDir := filepath.Join(clusterDir, "pv", ns.Name)
	ExpectWithOffset(1, os.MkdirAll(pvDir, 0o777)).To(Succeed())
	ExpectWithOffset(1, os.Chmod(pvDir, 0o777)).To(Succeed())
	size := resource.MustParse("1Gi")
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: ns.Name},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:               corev1.ResourceList{corev1.ResourceStorage: size},
			AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			ClaimRef:               &corev1.ObjectReference{Namespace: ns.Name, Name: "workspace"},
			PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: pvDir}},
		},
	}
	if node != "" {
		pv.Spec.NodeAffinity = &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
		}}}}
	}
	admin := clients[userAdmin]
	ExpectWithOffset(1, admin.Create(ctx, pv)).To(Succeed())
	// The volume is the cluster's, not the namespace's: it goes once its
	// claim has (the API server's pv-protection finalizer).
	DeferCleanup(func() {
		Expect(client.IgnoreNotFound(admin.Delete(ctx, pv))).To(Succeed())
	})
	ExpectWithOffset(1, ns.Admin.Create(ctx, &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "workspace"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: new(string),
			VolumeName:       pv.Name,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}},
		},
	})).To(Succeed())

	profile, err := os.ReadFile("testdata/profile.yaml")
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	ns.Apply(userAdmin, string(profile))
	ns.ProfileReady("e2e")

	ns.OpenSession("s", "e2e")
	return ns
}

// OpenSession creates demo-agent's session name on profile, mounting the
// claim "workspace" (maxParallel 4; opts change the rest), and makes it the one Submit's next
// turn (the first) goes to.
func (ns *agentNamespace) OpenSession(name, profile string, opts ...func(*toolgatev1alpha1.AgentSession)) {
	session := testutil.MakeAgentSession(ns.Name, name, profile).ExistingClaim("workspace").MaxParallel(4).Obj()
	session.Spec.Owner = userAgent
	for _, o := range opts {
		o(session)
	}
	ExpectWithOffset(1, ns.Agent.Create(ctx, session)).To(Succeed())
	ns.Session, ns.turn = name, 0
}

// userSubject is a RoleBinding's subject for a user.
func userSubject(name string) rbacv1.Subject {
	return rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: name}
}

// serviceAccountSubject is a RoleBinding's subject for a ServiceAccount.
func serviceAccountSubject(namespace, name string) rbacv1.Subject {
	return rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: namespace, Name: name}
}

// Bind grants subjects the role (kind Role or ClusterRole) in the
// namespace, as admin.
func (ns *agentNamespace) Bind(name, kind, role string, subjects ...rbacv1.Subject) {
	ExpectWithOffset(1, ns.Admin.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: kind, Name: role},
		Subjects:   subjects,
	})).To(Succeed())
}

// Apply applies YAML in the namespace with kubectl, as user.
func (ns *agentNamespace) Apply(user, yaml string) {
	_, err := kubectl(user, yaml, "apply", "-n", ns.Name, "-f", "-")
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
}

// ProfileReady waits for the ToolProfile to be Ready.
func (ns *agentNamespace) ProfileReady(name string) {
	EventuallyWithOffset(1, func() bool {
		p := &toolgatev1alpha1.ToolProfile{}
		if err := ns.Admin.Get(ctx, client.ObjectKey{Name: name}, p); err != nil {
			return false
		}
		return apimeta.IsStatusConditionTrue(p.Status.Conditions, toolgatev1alpha1.ConditionReady)
	}, 60*time.Second, 200*time.Millisecond).Should(BeTrue(), "ToolProfile %s/%s is Ready", ns.Name, name)
}

// call is one tool call of a turn: its name, tool and arguments (JSON).
type call struct{ Name, Tool, Arguments string }

// Submit creates the calls of the session's next turn (the first is turn
// 1), in model order, as demo-agent with kubectl apply: the YAML a user
// would write, so that a default the API server must fill is not filled by
// a Go client.
func (ns *agentNamespace) Submit(calls ...call) {
	ns.turn++
	var b strings.Builder
	for i, c := range calls {
		fmt.Fprintf(&b, `---
apiVersion: toolgate.dev/v1alpha1
kind: ToolCall
metadata: {name: %s}
spec:
  sessionRef: {name: %s}
  turn: %d
  index: %d
  turnSize: %d
  callID: call-%s
  tool: %s
  arguments: '%s'
  requester: %s
`, c.Name, ns.Session, ns.turn, i, len(calls), c.Name, c.Tool, c.Arguments, userAgent)
	}
	_, err := kubectl(userAgent, b.String(), "apply", "-n", ns.Name, "-f", "-")
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
}

// Question is the ID of the question the ApprovalRequest name asks, as
// its approver reads it ("" while there is none): an answer names it.
func (ns *agentNamespace) Question(name string) string {
	ar := &toolgatev1alpha1.ApprovalRequest{}
	if ns.Approver.Get(ctx, client.ObjectKey{Name: name}, ar) != nil {
		return ""
	}
	return ar.QuestionID()
}

// Decision is a merge patch deciding the ApprovalRequest name as user, for
// the question its approver reads now, as a person writes it with kubectl.
func (ns *agentNamespace) Decision(name, user string) string {
	ar := &toolgatev1alpha1.ApprovalRequest{}
	Expect(ns.Approver.Get(ctx, client.ObjectKey{Name: name}, ar)).To(Succeed())
	return fmt.Sprintf(`{"spec":{"decision":{"action":"Approve","decidedBy":%q,"requestUID":%q,"question":%q}}}`, user, ar.UID, ar.QuestionID())
}

// Committed waits for the ToolCall to be committed and returns it.
func (ns *agentNamespace) Committed(name string) *toolgatev1alpha1.ToolCall {
	tc := &toolgatev1alpha1.ToolCall{}
	EventuallyWithOffset(1, func(g Gomega) {
		g.Expect(ns.Admin.Get(ctx, client.ObjectKey{Name: name}, tc)).To(Succeed())
		g.Expect(tc.Committed()).To(BeTrue(), "ToolCall %s/%s is committed (phase %q)", ns.Name, name, tc.Status.Phase)
	}, 90*time.Second, 200*time.Millisecond).Should(Succeed())
	return tc
}

// Pods lists the namespace's pods with the labels.
func (ns *agentNamespace) Pods(labels client.MatchingLabels) []corev1.Pod {
	pods := &corev1.PodList{}
	ExpectWithOffset(1, ns.Admin.List(ctx, pods, labels)).To(Succeed())
	return pods.Items
}

// PodsOf counts the pods serving the call (terminating ones included).
func (ns *agentNamespace) PodsOf(call string) int {
	return len(ns.PodsOfCall(call))
}

// PodsOfCall lists the pods serving the call (PodCall: a claimed warm pod
// names it in its annotations).
func (ns *agentNamespace) PodsOfCall(call string) []corev1.Pod {
	var of []corev1.Pod
	for _, p := range ns.Pods(client.MatchingLabels{toolgatev1alpha1.LabelSandbox: "true"}) {
		if name, _, _ := toolgatev1alpha1.PodCall(&p); name == call {
			of = append(of, p)
		}
	}
	return of
}

// stillRunning describes the pods that may still run something: all but
// those being deleted that never reached a node or that their kubelet
// reported Succeeded or Failed.
func stillRunning(pods []corev1.Pod) []string {
	var running []string
	for _, p := range pods {
		final := p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
		if !p.DeletionTimestamp.IsZero() && (p.Spec.NodeName == "" || final) {
			continue
		}
		running = append(running, fmt.Sprintf("%s: phase %q, node %q, being deleted %v", p.Name, p.Status.Phase, p.Spec.NodeName, !p.DeletionTimestamp.IsZero()))
	}
	return running
}

// Pod reads a pod.
func (ns *agentNamespace) Pod(name string) *corev1.Pod {
	pod := &corev1.Pod{}
	ExpectWithOffset(1, ns.Admin.Get(ctx, client.ObjectKey{Name: name}, pod)).To(Succeed())
	return pod
}

// AgentSession reads the namespace's session.
func (ns *agentNamespace) AgentSession() *toolgatev1alpha1.AgentSession {
	s := &toolgatev1alpha1.AgentSession{}
	ExpectWithOffset(1, ns.Admin.Get(ctx, client.ObjectKey{Name: ns.Session}, s)).To(Succeed())
	return s
}

// injectedToolsPod is the image and entrypoint of a pod of the tools image
// with the runner injected (the kind of the nap and echo_args tools).
const injectedToolsPod = "toolgate.dev/tools:dev /toolgate/bin/toolgate-runner"

// kind is a pod's image and entrypoint, as injectedToolsPod spells them.
func kind(pod *corev1.Pod) string {
	c := pod.Spec.Containers[0]
	if len(c.Command) == 0 {
		return c.Image
	}
	return c.Image + " " + c.Command[0]
}

// WarmPods are the session's running warm pods (each of a template).
func (ns *agentNamespace) WarmPods() []corev1.Pod {
	var running []corev1.Pod
	for _, p := range ns.Pods(client.MatchingLabels{toolgatev1alpha1.LabelWarm: "true", toolgatev1alpha1.LabelSession: ns.Session}) {
		if toolgatev1alpha1.WarmWaiting(&p) && p.Status.Phase == corev1.PodRunning && p.Labels[toolgatev1alpha1.LabelTemplate] != "" {
			running = append(running, p)
		}
	}
	return running
}

// WarmToolsPod makes the session keep a warm pod of the injected tools
// kind (warmPods, default 1, starts one for each kind the session's calls
// used): it runs one echo_args call, "warmup", then waits for such a pod
// to run and returns it.
func (ns *agentNamespace) WarmToolsPod() corev1.Pod {
	ns.Submit(call{"warmup", "echo_args", `{"warm":"up"}`})
	ExpectWithOffset(1, ns.Committed("warmup").Status.Result.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded))
	var warm corev1.Pod
	EventuallyWithOffset(1, func() string {
		for _, p := range ns.WarmPods() {
			if kind(&p) == injectedToolsPod {
				warm = p
			}
		}
		return warm.Name
	}, 60*time.Second, 200*time.Millisecond).ShouldNot(BeEmpty(), "a warm pod of %q runs", injectedToolsPod)
	return warm
}

// dump adds the manager's log and the namespace's events, pods and calls
// to the failed spec's report, with kubectl as an operator would read them.
func (ns *agentNamespace) dump() {
	for _, args := range [][]string{
		{"-n", systemNamespace, "logs", "deployment/toolgate-controller-manager", "--tail=200"},
		{"-n", ns.Name, "get", "events", "--sort-by=.lastTimestamp"},
		{"-n", ns.Name, "describe", "pods"},
		{"-n", ns.Name, "get", "agentsessions,toolcalls,approvalrequests", "-o", "yaml"},
	} {
		out, err := kubectl(userAdmin, "", args...)
		AddReportEntry(strings.Join(args, " "), out+fmt.Sprint(err))
	}
}

// podLogs is every container's log (init containers too) of the pods.
func podLogs(pods []corev1.Pod) string {
	var b strings.Builder
	for _, p := range pods {
		for _, c := range append(append([]corev1.Container(nil), p.Spec.InitContainers...), p.Spec.Containers...) {
			out, err := clientset.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: c.Name}).DoRaw(ctx)
			ExpectWithOffset(1, err).NotTo(HaveOccurred(), "the log of %s/%s", p.Name, c.Name)
			b.Write(out)
		}
	}
	return b.String()
}
