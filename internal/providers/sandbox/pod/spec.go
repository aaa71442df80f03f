package pod

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/providers/sandbox"
	"github.com/toolgate/toolgate/internal/runner"
	"github.com/toolgate/toolgate/internal/textutil"
)

// Labels and annotations on tool pods.
const (
	LabelSandbox   = "toolgate.dev/sandbox"
	LabelEgress    = "toolgate.dev/egress"
	LabelCall      = "toolgate.dev/call"
	LabelAttempt   = "toolgate.dev/attempt"
	AnnotationArgs = "toolgate.dev/arguments"

	// NetworkPolicyName is the per-namespace policy denying all traffic to
	// and from tool pods that are not allowed egress.
	NetworkPolicyName = "toolgate-sandbox-deny-all"

	containerTool   = "tool"
	runnerDir       = "/toolgate/bin"
	argsDir         = "/toolgate/args"
	runnerInImage   = "/toolgate-runner"
	sandboxUID      = 65532
	activeSlack     = 30 // seconds beyond the tool timeout before the kubelet kills the pod
	defaultTimeout  = 3600
	terminationPath = "/dev/termination-log"
)

// MaxArguments is the largest argument text the pod provider passes (through
// a pod annotation, whose total size the API server caps at 256 KiB).
const MaxArguments = 200 << 10

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
}

// BuildPod is the pod of one attempt: Pod Security "restricted", read-only
// root file system with a small writable /tmp, no service account token, no
// service links, the runner injected by an init container, the workspace
// mounted at the canonical root (read-only unless the mode allows writes),
// and the kubelet's activeDeadlineSeconds as a backstop to the timeout.
func BuildPod(cfg Config, job sandbox.Job, name, frameKey string) (*corev1.Pod, error) {
	tool, policy := job.Tool, job.Policy
	spec := runner.Spec{ArgumentsFile: path.Join(argsDir, "arguments")}
	image := cfg.RunnerImage
	if tool.Builtin != nil {
		spec.Builtin = tool.Builtin.Name
	} else {
		c := tool.Container
		image = c.Image
		spec.Argv, spec.MaxOutputBytes = c.Command, int(c.MaxOutputBytes)
		if len(c.Env) > 0 {
			spec.Env = map[string]string{}
			for _, e := range c.Env {
				spec.Env[e.Name] = e.Value
			}
		}
	}
	writable := policy.Mode == toolgatev1alpha1.SandboxWorkspaceWrite || policy.Mode == toolgatev1alpha1.SandboxFullAccess
	if job.Workspace.ClaimName != "" {
		spec.Workspace, spec.Writable = policy.WorkspaceRoot, writable
	}
	specJSON, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	timeout := int64(tool.TimeoutSeconds)
	if timeout <= 0 {
		timeout = defaultTimeout
	}
	egress := policy.AllowEgress || policy.Mode == toolgatev1alpha1.SandboxFullAccess
	restricted := &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(true),
		RunAsNonRoot:             ptr.To(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	mounts := []corev1.VolumeMount{
		{Name: "runner", MountPath: runnerDir, ReadOnly: true},
		{Name: "tmp", MountPath: "/tmp"},
		{Name: "args", MountPath: argsDir, ReadOnly: true},
	}
	volumes := []corev1.Volume{
		{Name: "runner", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: ptr.To(resource.MustParse("64Mi"))}}},
		{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: ptr.To(resource.MustParse("64Mi"))}}},
		{Name: "args", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{Items: []corev1.DownwardAPIVolumeFile{{
			Path: "arguments", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations['" + AnnotationArgs + "']"},
		}}}}},
	}
	if job.Workspace.ClaimName != "" {
		mounts = append(mounts, corev1.VolumeMount{Name: "workspace", MountPath: policy.WorkspaceRoot, ReadOnly: !writable})
		volumes = append(volumes, corev1.Volume{Name: "workspace", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: job.Workspace.ClaimName, ReadOnly: !writable},
		}})
	}
	resources := corev1.ResourceRequirements{Limits: corev1.ResourceList{}, Requests: corev1.ResourceList{}}
	for name, q := range map[corev1.ResourceName]*resource.Quantity{
		corev1.ResourceCPU: policy.Resources.CPU, corev1.ResourceMemory: policy.Resources.Memory, corev1.ResourceEphemeralStorage: policy.Resources.EphemeralStorage,
	} {
		if q != nil {
			resources.Limits[name], resources.Requests[name] = *q, *q
		}
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: job.Owner.Namespace,
			Labels: map[string]string{
				LabelSandbox: "true", LabelEgress: fmt.Sprint(egress), LabelCall: textutil.LabelValue(job.Owner.Name),
				LabelAttempt: fmt.Sprint(job.Attempt), "app.kubernetes.io/managed-by": "toolgate",
			},
			Annotations: map[string]string{AnnotationArgs: job.Arguments},
		},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  ptr.To(false),
			EnableServiceLinks:            ptr.To(false),
			ActiveDeadlineSeconds:         ptr.To(timeout + activeSlack),
			TerminationGracePeriodSeconds: ptr.To[int64](5),
			RuntimeClassName:              policy.RuntimeClassName,
			NodeSelector:                  policy.NodeSelector,
			Tolerations:                   policy.Tolerations,
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](sandboxUID), RunAsGroup: ptr.To[int64](sandboxUID),
				FSGroup: ptr.To[int64](sandboxUID), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			InitContainers: []corev1.Container{{
				Name: "place-runner", Image: cfg.RunnerImage, ImagePullPolicy: cfg.ImagePullPolicy,
				Command:         []string{runnerInImage, "copy", path.Join(runnerDir, "toolgate-runner")},
				VolumeMounts:    []corev1.VolumeMount{{Name: "runner", MountPath: runnerDir}},
				SecurityContext: restricted,
				Resources: corev1.ResourceRequirements{
					Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("32Mi")},
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")},
				},
			}},
			Containers: []corev1.Container{{
				Name: containerTool, Image: image, ImagePullPolicy: cfg.ImagePullPolicy,
				Command: []string{path.Join(runnerDir, "toolgate-runner"), "run"},
				Env: []corev1.EnvVar{
					{Name: runner.EnvSpec, Value: string(specJSON)},
					{Name: runner.EnvKey, Value: frameKey},
				},
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

// DenyAll is the namespace's NetworkPolicy: no ingress and no egress for
// tool pods not labelled for egress.
func DenyAll(namespace string) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: NetworkPolicyName, Namespace: namespace, Labels: map[string]string{"app.kubernetes.io/managed-by": "toolgate"}},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{LabelSandbox: "true", LabelEgress: "false"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
		},
	}
}
