package pod

import (
	"encoding/hex"
	"encoding/json"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/providers/sandbox"
	"github.com/toolgate/toolgate/internal/runner"
)

func testJob(mode toolgatev1alpha1.SandboxMode, claim string) sandbox.Job {
	return sandbox.Job{
		Key: "uid-1/2", Attempt: 2, Owner: types.NamespacedName{Namespace: "ns", Name: "call-1"}, OwnerUID: "uid-1",
		Tool: &toolgatev1alpha1.ToolDefinition{
			Name: "wc", TimeoutSeconds: 20,
			Container: &toolgatev1alpha1.ContainerRuntime{Image: "tools:1", Command: []string{"/bin/wc", "-w"}, MaxOutputBytes: 4096,
				Env: []toolgatev1alpha1.EnvVar{{Name: "LANG", Value: "C"}}},
		},
		Arguments: `{"text":"a b"}`,
		Policy: toolgatev1alpha1.SandboxPolicy{
			Mode: mode, WorkspaceRoot: "/workspace",
			Resources: toolgatev1alpha1.SandboxResources{CPU: ptr.To(resource.MustParse("500m")), Memory: ptr.To(resource.MustParse("128Mi"))},
		},
		Session: sandbox.Session{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "s"}, ClaimName: claim},
	}
}

// testConfig is a pod configuration with a manager's channel key.
var testConfig = func() Config {
	k, err := runner.NewManagerKey()
	if err != nil {
		panic(err)
	}
	return Config{RunnerImage: "runner:1", ChannelKey: hex.EncodeToString(k.PublicKey().Bytes())}
}()

// TestThePodHoldsNoCall: a tool pod is readable by anyone who may get
// pods in the namespace (and stored in etcd), so it holds neither the
// call's arguments nor any key: the call is handed to its runner over the
// channel, which only the manager's private key opens.
func TestThePodHoldsNoCall(t *testing.T) {
	job := testJob(toolgatev1alpha1.SandboxWorkspaceWrite, "ws")
	job.Arguments = `{"token":"arg-SECRET-1"}`
	pod, err := BuildPod(testConfig, job, "p")
	if err != nil {
		t.Fatal(err)
	}
	text, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(text), "arg-SECRET-1") {
		t.Fatalf("the pod carries the call's arguments: %s", text)
	}
	for _, c := range pod.Spec.Containers {
		for _, e := range c.Env {
			if e.Name != runner.EnvManagerKey {
				t.Errorf("container %s has variable %s: a pod holds no secret of its call", c.Name, e.Name)
			}
		}
	}
	if len(pod.Annotations) != 0 {
		t.Errorf("annotations %v", pod.Annotations)
	}
}

// TestPodSpecRestrictions checks every restriction of the design for each
// sandbox mode.
func TestPodSpecRestrictions(t *testing.T) {
	for _, tc := range []struct {
		mode              toolgatev1alpha1.SandboxMode
		claim             string
		egress            bool
		wantWorkspace     bool
		wantWorkspaceRO   bool
		wantEgressAllowed bool
	}{
		{toolgatev1alpha1.SandboxReadOnly, "ws", false, true, true, false},
		{toolgatev1alpha1.SandboxWorkspaceWrite, "ws", false, true, false, false},
		{toolgatev1alpha1.SandboxWorkspaceWrite, "ws", true, true, false, true},
		{toolgatev1alpha1.SandboxFullAccess, "ws", false, true, false, true},
		{toolgatev1alpha1.SandboxReadOnly, "", false, false, false, false},
	} {
		name := string(tc.mode) + "/claim=" + tc.claim
		job := testJob(tc.mode, tc.claim)
		job.Policy.AllowEgress = tc.egress
		pod, err := BuildPod(testConfig, job, "p")
		if err != nil {
			t.Fatal(err)
		}
		s := pod.Spec
		check := func(ok bool, what string) {
			t.Helper()
			if !ok {
				t.Errorf("%s: %s", name, what)
			}
		}
		check(s.RestartPolicy == corev1.RestartPolicyNever, "restartPolicy Never")
		check(s.AutomountServiceAccountToken != nil && !*s.AutomountServiceAccountToken, "no service account token")
		check(s.EnableServiceLinks != nil && !*s.EnableServiceLinks, "no service links")
		check(!s.HostNetwork && !s.HostPID && !s.HostIPC, "no host namespaces")
		check(s.ActiveDeadlineSeconds != nil && *s.ActiveDeadlineSeconds == int64(DefaultStartTimeout.Seconds())+20+activeSlack, "activeDeadlineSeconds backstop")
		check(*s.SecurityContext.RunAsNonRoot && s.SecurityContext.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault, "pod runs as non-root with RuntimeDefault seccomp")
		for _, c := range append(s.InitContainers, s.Containers...) {
			sc := c.SecurityContext
			check(sc != nil && !*sc.AllowPrivilegeEscalation && *sc.ReadOnlyRootFilesystem && *sc.RunAsNonRoot, c.Name+": no escalation, read-only root, non-root")
			check(len(sc.Capabilities.Drop) == 1 && sc.Capabilities.Drop[0] == "ALL" && len(sc.Capabilities.Add) == 0, c.Name+": all capabilities dropped")
			check(sc.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault, c.Name+": RuntimeDefault seccomp")
			check(c.Resources.Limits.Memory() != nil && !c.Resources.Limits.Memory().IsZero(), c.Name+": memory limit")
		}
		tool := s.Containers[0]
		check(tool.Command[0] == "/toolgate/bin/toolgate-runner" && tool.Command[1] == "serve", "the runner is the entrypoint")
		check(s.InitContainers[0].Image == "runner:1" && s.InitContainers[0].Command[1] == "copy", "an init container injects the runner")
		check(tool.Image == "tools:1", "any tool image works")
		check(tool.Resources.Limits.Cpu().String() == "500m" && tool.Resources.Requests.Memory().String() == "128Mi", "resources from the profile")
		workspace := ""
		if tc.claim != "" {
			workspace = job.Policy.WorkspaceRoot
		}
		spec := sandbox.RunnerSpec(job, workspace)
		check(strings.Join(spec.Argv, " ") == "/bin/wc -w" && spec.Env["LANG"] == "C" && spec.TimeoutMillis == 20000, "the exact argv, env and timeout are handed to the runner")
		check(len(tool.Env) == 1 && tool.Env[0].Name == runner.EnvManagerKey && tool.Env[0].Value == testConfig.ChannelKey, "the pod's only variable is the manager's public key")
		var tmp, ws *corev1.VolumeMount
		for i, m := range tool.VolumeMounts {
			switch m.MountPath {
			case "/tmp":
				tmp = &tool.VolumeMounts[i]
			case "/workspace":
				ws = &tool.VolumeMounts[i]
			}
		}
		check(tmp != nil && !tmp.ReadOnly, "a writable /tmp")
		check((ws != nil) == tc.wantWorkspace, "workspace mounted at the canonical root when there is one")
		if ws != nil {
			check(ws.ReadOnly == tc.wantWorkspaceRO, "workspace read-only exactly in ReadOnly mode")
			check(spec.Workspace == "/workspace" && spec.Writable == !tc.wantWorkspaceRO, "the runner knows the root and mode")
		}
		check(pod.Labels[toolgatev1alpha1.LabelEgress] == map[bool]string{true: "true", false: "false"}[tc.wantEgressAllowed], "egress label")
		check(pod.Labels[toolgatev1alpha1.LabelSandbox] == "true", "sandbox label for the NetworkPolicy")
	}
}

func TestPodPlacement(t *testing.T) {
	job := testJob(toolgatev1alpha1.SandboxReadOnly, "")
	job.Policy.RuntimeClassName = ptr.To("gvisor")
	job.Policy.NodeSelector = map[string]string{"pool": "sandbox"}
	job.Policy.Tolerations = []corev1.Toleration{{Key: "sandbox", Operator: corev1.TolerationOpExists}}
	pod, err := BuildPod(testConfig, job, "p")
	if err != nil {
		t.Fatal(err)
	}
	if *pod.Spec.RuntimeClassName != "gvisor" || pod.Spec.NodeSelector["pool"] != "sandbox" || len(pod.Spec.Tolerations) != 3 ||
		pod.Spec.Tolerations[0].Key != "sandbox" {
		t.Fatalf("%+v", pod.Spec)
	}
	job.Tool = &toolgatev1alpha1.ToolDefinition{Name: "read", Builtin: &toolgatev1alpha1.BuiltinRuntime{Name: "fs.read"}}
	pod, _ = BuildPod(testConfig, job, "p")
	if pod.Spec.Containers[0].Image != "runner:1" {
		t.Fatal("a built-in runs in the runner image")
	}
}

// TestAWarmPoolIsSpreadOverNodes: a session's warm pods of one template
// prefer nodes with fewer of them, so a node lost or drained leaves warm
// pods on the others; the spread does not make them another template than
// the pod a call would get cold.
func TestAWarmPoolIsSpreadOverNodes(t *testing.T) {
	key, err := runner.NewManagerKey()
	if err != nil {
		t.Fatal(err)
	}
	p := &Provider{Config: testConfig, Key: key}
	job := testJob(toolgatev1alpha1.SandboxWorkspaceWrite, "ws")
	job.Session.UID = "session-uid"
	cold, err := p.buildPod(job, "p")
	if err != nil {
		t.Fatal(err)
	}
	template := templateOf(cold)
	warm, err := p.warmPod(job, template)
	if err != nil {
		t.Fatal(err)
	}
	if got := templateOf(warm); got != template {
		t.Fatalf("the warm pod's template %s, the cold pod's %s", got, template)
	}
	if len(cold.Spec.TopologySpreadConstraints) != 0 {
		t.Fatalf("a call's own pod is placed by its call alone: %+v", cold.Spec.TopologySpreadConstraints)
	}
	want := []corev1.TopologySpreadConstraint{{
		MaxSkew: 1, TopologyKey: "kubernetes.io/hostname", WhenUnsatisfiable: corev1.ScheduleAnyway,
		LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{
			toolgatev1alpha1.LabelWarm: "true", toolgatev1alpha1.LabelSession: "s", toolgatev1alpha1.LabelTemplate: template,
		}},
	}}
	if !reflect.DeepEqual(warm.Spec.TopologySpreadConstraints, want) {
		t.Fatalf("spread %s, want %s", dump(warm.Spec.TopologySpreadConstraints), dump(want))
	}
	sel, err := metav1.LabelSelectorAsSelector(want[0].LabelSelector)
	if err != nil || !sel.Matches(labels.Set(warm.Labels)) {
		t.Fatalf("the spread's selector does not select the pool's own pods: %v", err)
	}
}

// TestAPodOnALostNodeIsEvictedSoon: a tool pod tolerates a node that
// stopped reporting for nodeLostAfter, not the API server's default 5
// minutes, so that its call settles (or runs again) soon; a toleration the
// profile gives for those taints is kept as it is.
func TestAPodOnALostNodeIsEvictedSoon(t *testing.T) {
	lost := func(ts []corev1.Toleration) map[string]int64 {
		got := map[string]int64{}
		for _, tol := range ts {
			if tol.Effect == corev1.TaintEffectNoExecute && tol.TolerationSeconds != nil {
				got[tol.Key] = *tol.TolerationSeconds
			}
		}
		return got
	}
	job := testJob(toolgatev1alpha1.SandboxReadOnly, "")
	pod, err := BuildPod(testConfig, job, "p")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"node.kubernetes.io/unreachable": nodeLostAfter, "node.kubernetes.io/not-ready": nodeLostAfter}
	if got := lost(pod.Spec.Tolerations); !reflect.DeepEqual(got, want) {
		t.Fatalf("tolerations %s, want %v", dump(pod.Spec.Tolerations), want)
	}
	// The profile's own, for one of the taints: kept; the other gets ours.
	job.Policy.Tolerations = []corev1.Toleration{{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists,
		Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](600)}}
	pod, _ = BuildPod(testConfig, job, "p")
	want = map[string]int64{"node.kubernetes.io/unreachable": 600, "node.kubernetes.io/not-ready": nodeLostAfter}
	if got := lost(pod.Spec.Tolerations); !reflect.DeepEqual(got, want) || len(pod.Spec.Tolerations) != 2 {
		t.Fatalf("tolerations %s, want %v", dump(pod.Spec.Tolerations), want)
	}
	// A profile that tolerates every taint is left alone.
	job.Policy.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
	pod, _ = BuildPod(testConfig, job, "p")
	if len(pod.Spec.Tolerations) != 1 {
		t.Fatalf("tolerations %s", dump(pod.Spec.Tolerations))
	}
}

func TestNamesAreDeterministicAndShort(t *testing.T) {
	a := Name(strings.Repeat("x", 250), "uid-1", 3)
	if a != Name(strings.Repeat("x", 250), "uid-1", 3) || len(a) > 63 || !strings.HasSuffix(a, "-a3") {
		t.Fatalf("%q", a)
	}
	if Name("c", "uid-1", 1) == Name("c", "uid-2", 1) {
		t.Fatal("two calls of the same name (recreated) share a pod name")
	}
}

func TestEnforcement(t *testing.T) {
	p := &Provider{}
	full, reason := p.Enforcement(toolgatev1alpha1.SandboxPolicy{Mode: toolgatev1alpha1.SandboxReadOnly})
	if full || !strings.Contains(reason, "NetworkPolicy") || !strings.Contains(reason, "runtimeClassName") {
		t.Fatalf("%v %q", full, reason)
	}
	p.NetworkPolicyEnforced = true
	if full, reason := p.Enforcement(toolgatev1alpha1.SandboxPolicy{Mode: toolgatev1alpha1.SandboxReadOnly, RuntimeClassName: ptr.To("gvisor")}); !full {
		t.Fatalf("partial: %s", reason)
	}
	if full, _ := p.Enforcement(toolgatev1alpha1.SandboxPolicy{Mode: toolgatev1alpha1.SandboxFullAccess, RuntimeClassName: ptr.To("gvisor")}); full {
		t.Fatal("FullAccess reported as full enforcement")
	}
}

// TestDefaultResources: a profile that sets no resources still gets bounded
// tool pods, with a small CPU request (tool pods requesting 200m did not fit
// a 2-CPU node); each resource the profile sets is its limit and request.
func TestDefaultResources(t *testing.T) {
	job := testJob(toolgatev1alpha1.SandboxReadOnly, "")
	job.Policy.Resources = toolgatev1alpha1.SandboxResources{}
	pod, err := BuildPod(testConfig, job, "p")
	if err != nil {
		t.Fatal(err)
	}
	r := pod.Spec.Containers[0].Resources
	for _, c := range []struct {
		what string
		got  resource.Quantity
		want string
	}{
		{"cpu request", r.Requests[corev1.ResourceCPU], "50m"},
		{"memory request", r.Requests[corev1.ResourceMemory], "64Mi"},
		{"cpu limit", r.Limits[corev1.ResourceCPU], "1"},
		{"memory limit", r.Limits[corev1.ResourceMemory], "512Mi"},
	} {
		if c.got.Cmp(resource.MustParse(c.want)) != 0 {
			t.Errorf("default %s: %q, want %s", c.what, c.got.String(), c.want)
		}
	}
	if _, ok := r.Limits[corev1.ResourceEphemeralStorage]; ok {
		t.Error("an ephemeral-storage limit the profile did not ask for")
	}
	// Only memory set: memory from the profile, CPU by default.
	job.Policy.Resources.Memory = ptr.To(resource.MustParse("256Mi"))
	pod, _ = BuildPod(testConfig, job, "p")
	r = pod.Spec.Containers[0].Resources
	if r.Limits.Memory().String() != "256Mi" || r.Requests.Memory().String() != "256Mi" || r.Limits.Cpu().String() != "1" || r.Requests.Cpu().String() != "50m" {
		t.Errorf("memory from the profile, cpu by default: %+v", r)
	}
	// The init container (the runner copy) is bounded too, and needs less
	// than the tool's default.
	init := pod.Spec.InitContainers[0].Resources
	if init.Limits.Cpu().IsZero() || init.Limits.Memory().IsZero() || init.Requests.Cpu().Cmp(resource.MustParse("50m")) > 0 {
		t.Errorf("init container: %+v", init)
	}
}

// TestTheRunnerIsInjectedOnlyWhereTheImageLacksIt: a built-in tool runs in
// the runner image, and a tool image may carry the runner (runnerPath):
// their pods have no init container (one container start less on the cold
// path) and run the image's own runner; any other tool image gets the
// runner injected.
func TestTheRunnerIsInjectedOnlyWhereTheImageLacksIt(t *testing.T) {
	for _, tc := range []struct {
		name        string
		tool        *toolgatev1alpha1.ToolDefinition
		image, exec string
		injected    bool
	}{
		{"built-in", &toolgatev1alpha1.ToolDefinition{Name: "read", TimeoutSeconds: 20, Builtin: &toolgatev1alpha1.BuiltinRuntime{Name: "fs.read"}},
			testConfig.RunnerImage, "/toolgate-runner", false},
		{"runner in the tool image", &toolgatev1alpha1.ToolDefinition{Name: "wc", TimeoutSeconds: 20,
			Container: &toolgatev1alpha1.ContainerRuntime{Image: "tools:1", Command: []string{"/bin/wc"}, RunnerPath: "/usr/local/bin/toolgate-runner"}},
			"tools:1", "/usr/local/bin/toolgate-runner", false},
		{"any tool image", &toolgatev1alpha1.ToolDefinition{Name: "wc", TimeoutSeconds: 20,
			Container: &toolgatev1alpha1.ContainerRuntime{Image: "tools:1", Command: []string{"/bin/wc"}}},
			"tools:1", "/toolgate/bin/toolgate-runner", true},
	} {
		job := testJob(toolgatev1alpha1.SandboxWorkspaceWrite, "ws")
		job.Tool = tc.tool
		pod, err := BuildPod(testConfig, job, "p")
		if err != nil {
			t.Fatal(err)
		}
		s := pod.Spec
		tool := s.Containers[0]
		if tool.Image != tc.image || strings.Join(tool.Command, " ") != tc.exec+" serve" {
			t.Errorf("%s: image %s command %v, want %s running %s", tc.name, tool.Image, tool.Command, tc.image, tc.exec)
		}
		volume, mount := false, false
		for _, v := range s.Volumes {
			volume = volume || v.Name == "runner"
		}
		for _, m := range tool.VolumeMounts {
			mount = mount || m.Name == "runner"
		}
		if got := len(s.InitContainers) == 1 && volume && mount; got != tc.injected || (!tc.injected && (len(s.InitContainers) > 0 || volume || mount)) {
			t.Errorf("%s: init containers %d, runner volume %v, mount %v; want injected=%v", tc.name, len(s.InitContainers), volume, mount, tc.injected)
		}
	}
}

// TestResourcesAboveTheCapsAreRefused: a profile asking for more than a cap
// is not silently cut: Enforcement reports it (naming the resource, what was
// asked and the cap), Validate refuses the policy, and no pod is built.
func TestResourcesAboveTheCapsAreRefused(t *testing.T) {
	p := &Provider{NetworkPolicyEnforced: true}
	at := toolgatev1alpha1.SandboxPolicy{Mode: toolgatev1alpha1.SandboxReadOnly, RuntimeClassName: ptr.To("gvisor"),
		Resources: toolgatev1alpha1.SandboxResources{CPU: ptr.To(resource.MustParse("4")), Memory: ptr.To(resource.MustParse("4Gi")), EphemeralStorage: ptr.To(resource.MustParse("4Gi"))}}
	if full, reason := p.Enforcement(at); !full {
		t.Fatalf("resources at the caps: partial: %s", reason)
	}
	for name, tc := range map[string]struct {
		set  func(*toolgatev1alpha1.SandboxResources)
		want string
	}{
		"cpu":               {func(r *toolgatev1alpha1.SandboxResources) { r.CPU = ptr.To(resource.MustParse("4100m")) }, "cpu 4100m exceeds the cap 4"},
		"memory":            {func(r *toolgatev1alpha1.SandboxResources) { r.Memory = ptr.To(resource.MustParse("8Gi")) }, "memory 8Gi exceeds the cap 4Gi"},
		"ephemeral-storage": {func(r *toolgatev1alpha1.SandboxResources) { r.EphemeralStorage = ptr.To(resource.MustParse("10Gi")) }, "ephemeral-storage 10Gi exceeds the cap 4Gi"},
		"zero memory":       {func(r *toolgatev1alpha1.SandboxResources) { r.Memory = ptr.To(resource.MustParse("0")) }, "memory 0 is not positive"},
	} {
		policy := at
		policy.Resources = *at.Resources.DeepCopy()
		tc.set(&policy.Resources)
		full, reason := p.Enforcement(policy)
		if full || !strings.Contains(reason, tc.want) {
			t.Errorf("%s: Enforcement = %v %q, want partial naming %q", name, full, reason, tc.want)
		}
		if err := p.Validate(policy); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Validate = %v", name, err)
		}
		job := testJob(toolgatev1alpha1.SandboxReadOnly, "")
		job.Policy = policy
		if pod, err := BuildPod(testConfig, job, "p"); err == nil || pod != nil {
			t.Errorf("%s: a pod was built", name)
		}
	}
}

// TestEnforcementWithEgress: a pod allowed egress relies on NetworkPolicy
// too (its ingress denial and its excluded addresses), so it is Partial
// until the CNI is declared to enforce policies.
func TestEnforcementWithEgress(t *testing.T) {
	p := &Provider{}
	policy := toolgatev1alpha1.SandboxPolicy{Mode: toolgatev1alpha1.SandboxWorkspaceWrite, AllowEgress: true, RuntimeClassName: ptr.To("gvisor")}
	if full, reason := p.Enforcement(policy); full || !strings.Contains(reason, "NetworkPolic") || !strings.Contains(reason, "--network-policy-enforced") {
		t.Fatalf("egress without an enforcing CNI: full=%v %q", full, reason)
	}
	p.NetworkPolicyEnforced = true
	if full, reason := p.Enforcement(policy); !full {
		t.Fatalf("partial: %s", reason)
	}
}

// TestEgressPolicy: tool pods allowed egress are isolated for ingress and
// may reach the cluster's DNS, and everything but link-local addresses
// (cloud metadata), the private and shared ranges where the cluster's
// nodes, pods and Services are, and the API server wherever it is; the same
// object for the same addresses in any order.
func TestEgressPolicy(t *testing.T) {
	addrs := []netip.Addr{
		netip.MustParseAddr("172.18.0.2"), netip.MustParseAddr("10.96.0.1"), netip.MustParseAddr("fd00::1"),
		netip.MustParseAddr("10.96.0.1"), netip.MustParseAddr("169.254.3.4"),
		// An API server on public addresses.
		netip.MustParseAddr("203.0.113.7"), netip.MustParseAddr("2001:db8::7"),
	}
	np := testConfig.EgressPolicy("ns", addrs)
	if np.Name != EgressPolicyName || np.Namespace != "ns" || np.Name == NetworkPolicyName || np.Labels["app.kubernetes.io/managed-by"] != "toolgate" {
		t.Fatalf("meta %+v", np.ObjectMeta)
	}
	if got := np.Spec.PodSelector.MatchLabels; len(got) != 2 || got[toolgatev1alpha1.LabelSandbox] != "true" || got[toolgatev1alpha1.LabelEgress] != "true" || len(np.Spec.PodSelector.MatchExpressions) != 0 {
		t.Fatalf("selector %+v", np.Spec.PodSelector)
	}
	if pt := np.Spec.PolicyTypes; len(pt) != 2 || pt[0] != networkingv1.PolicyTypeIngress || pt[1] != networkingv1.PolicyTypeEgress {
		t.Fatalf("policy types %v", pt)
	}
	if len(np.Spec.Ingress) != 0 {
		t.Fatalf("ingress allowed: %+v", np.Spec.Ingress)
	}
	if len(np.Spec.Egress) != 2 || len(np.Spec.Egress[0].Ports) != 0 {
		t.Fatalf("egress rules %+v", np.Spec.Egress)
	}
	want := []networkingv1.NetworkPolicyPeer{
		{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0", Except: []string{
			"169.254.0.0/16", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "203.0.113.7/32"}}},
		{IPBlock: &networkingv1.IPBlock{CIDR: "::/0", Except: []string{"fe80::/10", "fc00::/7", "::1/128", "2001:db8::7/128"}}},
	}
	if got := np.Spec.Egress[0].To; !reflect.DeepEqual(got, want) {
		t.Fatalf("egress to %s, want %s", dump(got), dump(want))
	}
	// Every address a cluster usually gives its nodes, pods and Services
	// (the kubelets' 10250, the manager's metrics, other sessions' pods)
	// and the metadata addresses are excepted.
	for _, a := range []string{"10.0.0.5", "10.244.1.7", "10.96.0.10", "172.18.0.3", "192.168.49.2", "100.64.0.9", "169.254.169.254", "fd00:ec2::254", "fd12::5"} {
		addr := netip.MustParseAddr(a)
		if !deniedAlready(addr, want[0].IPBlock.Except) && !deniedAlready(addr, want[1].IPBlock.Except) {
			t.Errorf("%s is reachable from a tool pod allowed egress", a)
		}
	}
	dns := np.Spec.Egress[1]
	if len(dns.To) != 1 || dns.To[0].NamespaceSelector.MatchLabels[corev1.LabelMetadataName] != "kube-system" || dns.To[0].PodSelector.MatchLabels["k8s-app"] != "kube-dns" ||
		len(dns.Ports) != 2 || dns.Ports[0].Port.IntVal != 53 || dns.Ports[1].Port.IntVal != 53 {
		t.Fatalf("the DNS rule %s", dump(dns))
	}
	reordered := []netip.Addr{addrs[6], addrs[5], addrs[2], addrs[1], addrs[0]}
	if again := testConfig.EgressPolicy("ns", reordered); !reflect.DeepEqual(again, np) {
		t.Fatal("the policy depends on the order of the addresses")
	}
	// Pods without egress: one policy denying both directions.
	deny := testConfig.DenyAll("ns")
	if pt := deny.Spec.PolicyTypes; len(pt) != 2 || len(deny.Spec.Ingress)+len(deny.Spec.Egress) != 0 || deny.Spec.PodSelector.MatchLabels[toolgatev1alpha1.LabelEgress] != "false" {
		t.Fatalf("deny-all %+v", deny.Spec)
	}
}

func dump(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestTheRunnerComesFromAnImageVolumeWhereTheNodesMountOne: with image
// volumes, a container tool's pod runs the runner from the runner image
// mounted read-only, pulled as the tool images are, and has no init
// container; built-in tools and images that carry the runner are as
// before.
func TestTheRunnerComesFromAnImageVolumeWhereTheNodesMountOne(t *testing.T) {
	cfg := testConfig
	cfg.RunnerImageVolume = true
	job := testJob(toolgatev1alpha1.SandboxWorkspaceWrite, "ws")
	job.Tool = &toolgatev1alpha1.ToolDefinition{Name: "wc", TimeoutSeconds: 20,
		Container: &toolgatev1alpha1.ContainerRuntime{Image: "tools:1", Command: []string{"/bin/wc"}}}
	pod, err := BuildPod(cfg, job, "p")
	if err != nil {
		t.Fatal(err)
	}
	s := pod.Spec
	tool := s.Containers[0]
	if len(s.InitContainers) != 0 || tool.Image != "tools:1" || strings.Join(tool.Command, " ") != "/toolgate/bin/toolgate-runner serve" {
		t.Fatalf("init containers %d, image %s, command %v", len(s.InitContainers), tool.Image, tool.Command)
	}
	var volume *corev1.Volume
	for i := range s.Volumes {
		if s.Volumes[i].Name == "runner" {
			volume = &s.Volumes[i]
		}
	}
	if volume == nil || volume.Image == nil || volume.Image.Reference != cfg.RunnerImage || volume.Image.PullPolicy != cfg.ImagePullPolicy || volume.EmptyDir != nil {
		t.Fatalf("runner volume %+v, want the image %s pulled %s", volume, cfg.RunnerImage, cfg.ImagePullPolicy)
	}
	mounted := false
	for _, m := range tool.VolumeMounts {
		mounted = mounted || (m.Name == "runner" && m.MountPath == "/toolgate/bin" && m.ReadOnly)
	}
	if !mounted {
		t.Fatalf("mounts %+v: the runner image is not mounted read-only at /toolgate/bin", tool.VolumeMounts)
	}
	for _, other := range []*toolgatev1alpha1.ToolDefinition{
		{Name: "read", TimeoutSeconds: 20, Builtin: &toolgatev1alpha1.BuiltinRuntime{Name: "fs.read"}},
		{Name: "wc", TimeoutSeconds: 20, Container: &toolgatev1alpha1.ContainerRuntime{Image: "tools:1", Command: []string{"/bin/wc"}, RunnerPath: "/r"}},
	} {
		job.Tool = other
		pod, err := BuildPod(cfg, job, "p")
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range pod.Spec.Volumes {
			if v.Name == "runner" {
				t.Errorf("%s: a runner volume where the image holds the runner", other.Name)
			}
		}
	}
}
