package controller

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/lifecycle"
	"github.com/toolgate/toolgate/internal/providers/approval"
	approvalapiserver "github.com/toolgate/toolgate/internal/providers/approval/apiserver"
	approvalnone "github.com/toolgate/toolgate/internal/providers/approval/none"
	"github.com/toolgate/toolgate/internal/providers/sandbox"
	"github.com/toolgate/toolgate/internal/providers/sandbox/pod"
	"github.com/toolgate/toolgate/internal/providers/sandbox/process"
)

// Config is what the manager's flags choose.
type Config struct {
	// ProcessWorkspaceDir is where the Process sandbox provider keeps
	// session workspaces.
	ProcessWorkspaceDir string
	// PollInterval is the safety-net requeue of running calls.
	PollInterval time.Duration
	// Clock defaults to the real clock.
	Clock clock.Clock
	// Scope owns the mounted providers; disposing it unmounts them.
	Scope *lifecycle.Scope
	// RunnerImage enables the Pod sandbox provider: the image holding
	// /toolgate-runner.
	RunnerImage string
	// ImagePullPolicy of tool pods.
	ImagePullPolicy corev1.PullPolicy
	// NetworkPolicyEnforced declares the CNI enforces NetworkPolicy.
	NetworkPolicyEnforced bool
}

// Setup composes the providers and registers the controllers: the one place
// that names concrete providers.
func Setup(mgr ctrl.Manager, cfg Config) error {
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Scope == nil {
		cfg.Scope = lifecycle.NewScope()
	}
	approvals := &approval.Mounts{}
	sandboxes := &sandbox.Mounts{}
	calls := &ToolCallReconciler{
		Client: mgr.GetClient(), Approvals: approvals, Sandboxes: sandboxes,
		Clock: cfg.Clock, PollInterval: cfg.PollInterval, Recorder: mgr.GetEventRecorder("toolgate"),
		APIReader: mgr.GetAPIReader(),
	}
	if err := approvals.Mount(cfg.Scope, string(toolgatev1alpha1.ApprovalProviderAPIServer), approvalapiserver.New(mgr.GetClient(), cfg.Clock)); err != nil {
		return err
	}
	if err := approvals.Mount(cfg.Scope, string(toolgatev1alpha1.ApprovalProviderNone), approvalnone.Provider{}); err != nil {
		return err
	}
	if err := sandboxes.Mount(cfg.Scope, string(toolgatev1alpha1.SandboxProviderProcess), process.New(cfg.ProcessWorkspaceDir, calls.Notify)); err != nil {
		return err
	}
	if cfg.RunnerImage != "" {
		logs, err := kubernetes.NewForConfig(mgr.GetConfig())
		if err != nil {
			return err
		}
		provider := &pod.Provider{
			Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Logs: logs, Notify: calls.Notify, NetworkPolicyEnforced: cfg.NetworkPolicyEnforced,
			Config: pod.Config{RunnerImage: cfg.RunnerImage, ImagePullPolicy: cfg.ImagePullPolicy},
		}
		if err := sandboxes.Mount(cfg.Scope, string(toolgatev1alpha1.SandboxProviderPod), provider); err != nil {
			return err
		}
	}
	profiles := NewProfiles(mgr.GetClient(), sandboxRunner)
	calls.Profiles = profiles
	if err := (&ToolProfileReconciler{
		Client: mgr.GetClient(), Profiles: profiles, Sandboxes: sandboxes, Approvals: approvals, Clock: cfg.Clock,
	}).SetupWithManager(mgr); err != nil {
		return err
	}
	if err := (&AgentSessionReconciler{Client: mgr.GetClient(), Profiles: profiles, Clock: cfg.Clock}).SetupWithManager(mgr); err != nil {
		return err
	}
	return calls.SetupWithManager(mgr)
}
