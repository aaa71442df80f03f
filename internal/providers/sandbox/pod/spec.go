package pod

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"path"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/providers/sandbox"
	"github.com/toolgate/toolgate/internal/runner"
	"github.com/toolgate/toolgate/internal/textutil"
)

// The NetworkPolicies' names and the tool pod's fixed values (its
// toolgate.dev labels are api/v1alpha1's, shared with the manager's cache).
const (
	// NetworkPolicyName is the per-namespace policy denying all traffic to
	// and from tool pods that are not allowed egress.
	NetworkPolicyName = "toolgate-sandbox-deny-all"
	// EgressPolicyName is the per-namespace policy of tool pods allowed
	// egress: no ingress, egress anywhere but link-local addresses (cloud
	// metadata) and the API server.
	EgressPolicyName = "toolgate-sandbox-egress"

	// ProxyPolicyName is the per-namespace policy of tool pods whose tool
	// names its hosts: no ingress but the manager's, egress to the egress
	// proxy's pods only.
	ProxyPolicyName = "toolgate-sandbox-egress-proxy"

	// LabelManagedBy marks the objects toolgate owns: a NetworkPolicy of
	// one of the names above without it is someone else's, never changed.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	managedBy      = "toolgate"

	containerTool   = "tool"
	runnerDir       = "/toolgate/bin"
	runnerInImage   = "/toolgate-runner"
	sandboxUID      = 65532
	defaultTimeout  = 3600
	terminationPath = "/dev/termination-log"
	// activeSlack is how long, beyond the start bound and the tool's
	// timeout, the kubelet lets a pod live (its activeDeadlineSeconds): the
	// runner stops the body itself at its timeout and then keeps the frame
	// until it is collected, so this bounds only a pod whose manager never
	// came back for it.
	activeSlack = 300
	// nodeLostAfter is how long, in seconds, a tool pod stays bound to a
	// node that stopped reporting (unreachable, not ready) before the
	// cluster evicts it and its call settles (sandbox_evicted; an
	// idempotent one is dispatched again). The API server's default for
	// every pod is 5 minutes, which a waiting agent would wait too; the
	// node controller's own grace (40 to 50 s) comes first.
	nodeLostAfter = 30
	// DefaultStartTimeout bounds how long a tool pod may take to be
	// scheduled, started and listening before the call fails with
	// sandbox_not_ready (its body never started). It is not the tool's
	// timeout, which the runner counts from the body's own start.
	DefaultStartTimeout = 2 * time.Minute
)

// Default resources of the tool container, for each of cpu and memory the
// profile's sandbox.resources leaves unset (a resource the profile sets is
// the container's limit and request). Without them a tool pod would run
// unbounded (BestEffort), able to take a node's CPU and memory.
//   - Requests are small: tool pods requesting 200m did not fit a 2-CPU node
//     beside the control plane (FailedScheduling: Insufficient cpu), and a
//     session's parallel calls each get a pod. CPU is compressible, so a
//     small request only lowers the tool's share when the node is busy.
//   - Limits bound a runaway tool: 1 CPU, and 512 Mi of memory (beyond
//     which the tool ends as sandbox_oom_killed, a clear code). A tool that
//     needs more, or a guaranteed share, sets sandbox.resources.
//
// No ephemeral-storage default: the root file system is read-only and the
// writable volumes (/tmp, the runner's) have size limits of their own.
const (
	DefaultCPURequest    = "50m"
	DefaultCPULimit      = "1"
	DefaultMemoryRequest = "64Mi"
	DefaultMemoryLimit   = "512Mi"
)

// Caps on what a profile's sandbox.resources may ask for one tool pod. A
// call is one bounded step of an agent, and a session runs several at once:
// a tool wanting more than this belongs in a workload of its own. A profile
// above a cap is refused, never silently cut (CheckResources): Enforcement
// reports it, and its calls fail with sandbox_unavailable.
const (
	MaxCPU              = "4"
	MaxMemory           = "4Gi"
	MaxEphemeralStorage = "4Gi"
)

// resourceBounds are the parsed defaults (for cpu and memory) and caps, in
// the order they are reported.
var resourceBounds = []struct {
	name                corev1.ResourceName
	request, limit, max resource.Quantity
	hasDefault          bool
}{
	{corev1.ResourceCPU, resource.MustParse(DefaultCPURequest), resource.MustParse(DefaultCPULimit), resource.MustParse(MaxCPU), true},
	{corev1.ResourceMemory, resource.MustParse(DefaultMemoryRequest), resource.MustParse(DefaultMemoryLimit), resource.MustParse(MaxMemory), true},
	{corev1.ResourceEphemeralStorage, resource.Quantity{}, resource.Quantity{}, resource.MustParse(MaxEphemeralStorage), false},
}

// profileQuantity is what the profile asks for resource name (nil: unset).
func profileQuantity(r toolgatev1alpha1.SandboxResources, name corev1.ResourceName) *resource.Quantity {
	switch name {
	case corev1.ResourceCPU:
		return r.CPU
	case corev1.ResourceMemory:
		return r.Memory
	case corev1.ResourceEphemeralStorage:
		return r.EphemeralStorage
	}
	return nil
}

// CheckResources refuses a profile's resources above a cap (or not
// positive), naming each resource, what was asked and the cap.
func CheckResources(r toolgatev1alpha1.SandboxResources) error {
	var problems []string
	for _, b := range resourceBounds {
		q := profileQuantity(r, b.name)
		switch {
		case q == nil:
		case q.Sign() <= 0:
			problems = append(problems, fmt.Sprintf("%s %s is not positive", b.name, q.String()))
		case q.Cmp(b.max) > 0:
			problems = append(problems, fmt.Sprintf("%s %s exceeds the cap %s", b.name, q.String(), b.max.String()))
		}
	}
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("sandbox.resources: %s", strings.Join(problems, "; "))
}

// toolResources are the tool container's requests and limits: each resource
// the profile sets as both, the defaults for unset cpu and memory.
func toolResources(r toolgatev1alpha1.SandboxResources) corev1.ResourceRequirements {
	out := corev1.ResourceRequirements{Limits: corev1.ResourceList{}, Requests: corev1.ResourceList{}}
	for _, b := range resourceBounds {
		switch q := profileQuantity(r, b.name); {
		case q != nil:
			out.Limits[b.name], out.Requests[b.name] = q.DeepCopy(), q.DeepCopy()
		case b.hasDefault:
			out.Limits[b.name], out.Requests[b.name] = b.limit.DeepCopy(), b.request.DeepCopy()
		}
	}
	return out
}

// MaxArguments is the largest argument text the pod provider hands over:
// the API's own limit, so nothing the API server accepted is refused here
// (the channel's request bound, runner.MaxRequestBytes, is well above it).
const MaxArguments = toolgatev1alpha1.MaxArgumentsBytes

// Name is the deterministic name of an attempt's pod: a restarted manager
// finds (adopts) the pod it created instead of creating a second one.
func Name(call string, uid string, attempt int) string {
	sum := sha256.Sum256([]byte(uid))
	suffix := fmt.Sprintf("-%s-a%d", hex.EncodeToString(sum[:])[:8], attempt)
	if max := 63 - len(suffix); len(call) > max {
		call = call[:max]
	}
	return call + suffix
}

// Config is what the operator configures for tool pods.
type Config struct {
	// RunnerImage holds the runner at /toolgate-runner (and is the image of
	// built-in tools).
	RunnerImage string
	// ImagePullPolicy of tool and runner images.
	ImagePullPolicy corev1.PullPolicy
	// RunnerImageVolume mounts RunnerImage into a container tool's pod as
	// an image volume, where the runner is run from, instead of copying it
	// in with an init container: one container start less. It needs image
	// volumes on every node tool pods may land on (Kubernetes 1.35, or the
	// ImageVolume feature gate, and containerd 2.1 or CRI-O 1.31).
	RunnerImageVolume bool
	// StartTimeout bounds the time from dispatch until the pod's runner is
	// handed the call (zero: DefaultStartTimeout).
	StartTimeout time.Duration
	// ChannelKey is the manager's public channel key (hex), set in the
	// pod's environment; the provider fills it from its Key.
	ChannelKey string
	// ManagerNamespace and ManagerLabels select the manager's pods: the
	// only ingress tool pods' NetworkPolicies allow (to the runner's port).
	// Empty: no ingress at all (a manager on the host network, as on the
	// local cluster, is not subject to NetworkPolicy on most CNIs).
	ManagerNamespace string
	ManagerLabels    map[string]string
	// EgressService names the egress proxy's Service in ManagerNamespace
	// ("": none, and a call of a tool that names its hosts fails
	// sandbox_unavailable, its body never started).
	EgressService string
}

func (c Config) startTimeout() time.Duration {
	if c.StartTimeout > 0 {
		return c.StartTimeout
	}
	return DefaultStartTimeout
}

// BuildPod is the pod of one attempt: Pod Security "restricted", read-only
// root file system with a small writable /tmp, no service account token, no
// service links, the runner (injected by an init container, unless the
// tool is built in and its image is the runner's) waiting for the manager
// to hand it the call (the pod holds no arguments and no
// secret: only the manager's public key), the workspace mounted at the
// canonical root (read-only unless the mode allows writes), the kubelet's
// activeDeadlineSeconds as a backstop, and bounded resources (the
// profile's, else the defaults; above a cap, an error and no pod).
func BuildPod(cfg Config, job sandbox.Job, name string) (*corev1.Pod, error) {
	tool, policy := job.Tool, job.Policy
	if err := CheckResources(policy.Resources); err != nil {
		return nil, err
	}
	if cfg.ChannelKey == "" {
		return nil, errors.New("no channel key")
	}
	image := cfg.RunnerImage
	if tool.Container != nil {
		image = tool.Container.Image
	}
	writable := sandbox.Writable(policy)
	timeout := int64(bodyTimeout(tool) / time.Second)
	egress := EgressKind(tool, policy)
	restricted := &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(true),
		RunAsNonRoot:             ptr.To(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	mounts := []corev1.VolumeMount{{Name: "tmp", MountPath: "/tmp"}}
	volumes := []corev1.Volume{
		{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: ptr.To(resource.MustParse("64Mi"))}}},
	}
	// A built-in tool runs in the runner image, which holds the runner, and
	// a tool image may hold it too (runnerPath); any other image gets it
	// from the runner image mounted as a volume where the nodes can, else
	// from an init container (a container start more).
	entrypoint := runnerInImage
	var inject []corev1.Container
	switch {
	case tool.Container != nil && tool.Container.RunnerPath != "":
		entrypoint = tool.Container.RunnerPath
	case tool.Container != nil && cfg.RunnerImageVolume:
		// The runner image's files, read-only, from the node's image store:
		// the runner runs from where the image holds it.
		entrypoint = path.Join(runnerDir, runnerInImage)
		mounts = append(mounts, corev1.VolumeMount{Name: "runner", MountPath: runnerDir, ReadOnly: true})
		volumes = append(volumes, corev1.Volume{Name: "runner", VolumeSource: corev1.VolumeSource{
			Image: &corev1.ImageVolumeSource{Reference: cfg.RunnerImage, PullPolicy: cfg.ImagePullPolicy},
		}})
	case tool.Container != nil:
		entrypoint = path.Join(runnerDir, "toolgate-runner")
		mounts = append(mounts, corev1.VolumeMount{Name: "runner", MountPath: runnerDir, ReadOnly: true})
		volumes = append(volumes, corev1.Volume{Name: "runner", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: ptr.To(resource.MustParse("64Mi"))}}})
		inject = []corev1.Container{{
			Name: "place-runner", Image: cfg.RunnerImage, ImagePullPolicy: cfg.ImagePullPolicy,
			Command:         []string{runnerInImage, "copy", entrypoint},
			VolumeMounts:    []corev1.VolumeMount{{Name: "runner", MountPath: runnerDir}},
			SecurityContext: restricted,
			Resources: corev1.ResourceRequirements{
				Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("32Mi")},
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")},
			},
		}}
	}
	if job.Session.ClaimName != "" {
		mounts = append(mounts, corev1.VolumeMount{Name: "workspace", MountPath: policy.WorkspaceRoot, ReadOnly: !writable})
		volumes = append(volumes, corev1.Volume{Name: "workspace", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: job.Session.ClaimName, ReadOnly: !writable},
		}})
	}
	resources := toolResources(policy.Resources)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: job.Owner.Namespace,
			Labels: map[string]string{
				toolgatev1alpha1.LabelSandbox: "true", toolgatev1alpha1.LabelEgress: egress, toolgatev1alpha1.LabelCall: textutil.LabelValue(job.Owner.Name),
				toolgatev1alpha1.LabelAttempt: fmt.Sprint(job.Attempt), LabelManagedBy: managedBy,
			},
		},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  ptr.To(false),
			EnableServiceLinks:            ptr.To(false),
			ActiveDeadlineSeconds:         ptr.To(int64(cfg.startTimeout().Seconds()) + timeout + activeSlack),
			TerminationGracePeriodSeconds: ptr.To[int64](5),
			RuntimeClassName:              policy.RuntimeClassName,
			NodeSelector:                  policy.NodeSelector,
			Tolerations:                   withNodeLoss(policy.Tolerations),
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](sandboxUID), RunAsGroup: ptr.To[int64](sandboxUID),
				FSGroup: ptr.To[int64](sandboxUID), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			InitContainers: inject,
			Containers: []corev1.Container{{
				Name: containerTool, Image: image, ImagePullPolicy: cfg.ImagePullPolicy,
				Command:                  []string{entrypoint, "serve"},
				Env:                      []corev1.EnvVar{{Name: runner.EnvManagerKey, Value: cfg.ChannelKey}},
				Ports:                    []corev1.ContainerPort{{Name: "channel", ContainerPort: runner.Port, Protocol: corev1.ProtocolTCP}},
				VolumeMounts:             mounts,
				SecurityContext:          restricted,
				Resources:                resources,
				TerminationMessagePath:   terminationPath,
				TerminationMessagePolicy: corev1.TerminationMessageReadFile,
			}},
			Volumes: volumes,
		},
	}
	return pod, nil
}

// Egress kinds, the values of LabelEgress: what a tool pod may reach.
const (
	EgressNone  = "false" // nothing
	EgressOpen  = "true"  // every public address (the profile's allowEgress)
	EgressProxy = "proxy" // the egress proxy only: the tool names its hosts
)

// bodyTimeout is the tool's timeout, or the default where it sets none.
func bodyTimeout(tool *toolgatev1alpha1.ToolDefinition) time.Duration {
	if tool.TimeoutSeconds > 0 {
		return time.Duration(tool.TimeoutSeconds) * time.Second
	}
	return defaultTimeout * time.Second
}

// EgressKind is what a tool's pod may reach: a tool naming its hosts
// reaches them through the egress proxy only, whatever its profile allows
// the others.
func EgressKind(tool *toolgatev1alpha1.ToolDefinition, policy toolgatev1alpha1.SandboxPolicy) string {
	switch sandbox.Network(tool, policy) {
	case sandbox.NetworkHosts:
		return EgressProxy
	case sandbox.NetworkEgress:
		return EgressOpen
	}
	return EgressNone
}

// DenyAll is the namespace's NetworkPolicy for tool pods not labelled for
// egress: no egress, and no ingress but the manager's (managerIngress).
func (c Config) DenyAll(namespace string) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: NetworkPolicyName, Namespace: namespace, Labels: map[string]string{LabelManagedBy: managedBy}},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{toolgatev1alpha1.LabelSandbox: "true", toolgatev1alpha1.LabelEgress: EgressNone}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Ingress:     c.managerIngress(),
		},
	}
}

// withNodeLoss is the profile's tolerations and, for the taints of a node
// that stopped reporting which they do not name, nodeLostAfter's.
func withNodeLoss(ts []corev1.Toleration) []corev1.Toleration {
	out := slices.Clone(ts)
	for _, key := range []string{corev1.TaintNodeUnreachable, corev1.TaintNodeNotReady} {
		named := slices.ContainsFunc(ts, func(t corev1.Toleration) bool {
			return t.Key == key || (t.Key == "" && t.Operator == corev1.TolerationOpExists)
		})
		if !named {
			out = append(out, corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute,
				TolerationSeconds: ptr.To[int64](nodeLostAfter)})
		}
	}
	return out
}

// managerIngress is the only ingress tool pods allow: the manager's pods,
// to the runner's channel port (none when the manager's pods are not
// configured).
func (c Config) managerIngress() []networkingv1.NetworkPolicyIngressRule {
	if c.ManagerNamespace == "" || len(c.ManagerLabels) == 0 {
		return nil
	}
	return []networkingv1.NetworkPolicyIngressRule{{
		From: []networkingv1.NetworkPolicyPeer{{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: c.ManagerNamespace}},
			PodSelector:       &metav1.LabelSelector{MatchLabels: c.ManagerLabels},
		}},
		Ports: []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromInt32(runner.Port))}},
	}}
}

// Addresses tool pods never reach, even when allowed egress: link-local
// ranges, where clouds serve instance metadata and credentials
// (169.254.0.0/16, fe80::/10, and AWS's IPv6 metadata address inside
// fc00::/7); and every private and shared range (RFC 1918, RFC 6598,
// unique local), where a cluster keeps its nodes (the kubelets' port
// 10250), its pods (the manager's, other sessions'), its Services and its
// neighbours. Egress is to the internet; an in-cluster destination is an
// operator's opt-in, a NetworkPolicy of their own selecting the tool pods
// (which the profile's status then names as widening the sandbox: Audit).
var (
	deniedIPv4 = []string{"169.254.0.0/16", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"}
	deniedIPv6 = []string{"fe80::/10", "fc00::/7", "::1/128"}
)

// The cluster's DNS, which tool pods allowed egress need to resolve the
// names they reach: the kube-dns pods of kube-system, port 53.
var (
	dnsNamespace = "kube-system"
	dnsPods      = map[string]string{"k8s-app": "kube-dns"}
)

// deniedAlready reports whether a is inside one of the denied prefixes.
func deniedAlready(a netip.Addr, denied []string) bool {
	for _, d := range denied {
		if netip.MustParsePrefix(d).Contains(a) {
			return true
		}
	}
	return false
}

// EgressPolicy is the namespace's NetworkPolicy for tool pods labelled for
// egress: no ingress but the manager's; egress to the cluster's DNS, and to
// every address except the denied ranges and apiServer (the API server's
// Service and endpoint addresses, each as a host block, where not denied
// already). The same addresses in any order give the same object.
func (c Config) EgressPolicy(namespace string, apiServer []netip.Addr) *networkingv1.NetworkPolicy {
	v4, v6 := slices.Clone(deniedIPv4), slices.Clone(deniedIPv6)
	var hosts4, hosts6 []netip.Addr
	for _, a := range apiServer {
		a = a.Unmap()
		switch {
		case !a.IsValid() || deniedAlready(a, deniedIPv4) || deniedAlready(a, deniedIPv6):
			// Already denied.
		case a.Is4():
			hosts4 = append(hosts4, a)
		default:
			hosts6 = append(hosts6, a.WithZone(""))
		}
	}
	for _, hs := range []*[]netip.Addr{&hosts4, &hosts6} {
		slices.SortFunc(*hs, netip.Addr.Compare)
		*hs = slices.Compact(*hs)
	}
	for _, a := range hosts4 {
		v4 = append(v4, netip.PrefixFrom(a, 32).String())
	}
	for _, a := range hosts6 {
		if s := netip.PrefixFrom(a, 128).String(); !slices.Contains(v6, s) {
			v6 = append(v6, s)
		}
	}
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: EgressPolicyName, Namespace: namespace, Labels: map[string]string{LabelManagedBy: managedBy}},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{toolgatev1alpha1.LabelSandbox: "true", toolgatev1alpha1.LabelEgress: EgressOpen}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Ingress:     c.managerIngress(),
			Egress: []networkingv1.NetworkPolicyEgressRule{
				{To: []networkingv1.NetworkPolicyPeer{
					{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0", Except: v4}},
					{IPBlock: &networkingv1.IPBlock{CIDR: "::/0", Except: v6}},
				}},
				{
					To: []networkingv1.NetworkPolicyPeer{{
						NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: dnsNamespace}},
						PodSelector:       &metav1.LabelSelector{MatchLabels: dnsPods},
					}},
					Ports: []networkingv1.NetworkPolicyPort{
						{Protocol: ptr.To(corev1.ProtocolUDP), Port: ptr.To(intstr.FromInt32(53))},
						{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromInt32(53))},
					},
				},
			},
		},
	}
}
