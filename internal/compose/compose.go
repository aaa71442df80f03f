// Package compose composes toolgate's manager: the providers each seam
// mounts, the controllers' configuration and the manager's cache. It is the
// one place that names concrete providers; cmd/manager, internal/testmanager
// (the envtest suites, hack/throughput, hack/gatewaybench) and cmd/manager's
// namespaced test all compose the manager here, and what they choose
// differently is in Options.
package compose

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/audit"
	"github.com/toolgate/toolgate/internal/controller"
	"github.com/toolgate/toolgate/internal/keys"
	"github.com/toolgate/toolgate/internal/lifecycle"
	"github.com/toolgate/toolgate/internal/notify"
	"github.com/toolgate/toolgate/internal/providers/approval"
	approvalapiserver "github.com/toolgate/toolgate/internal/providers/approval/apiserver"
	approvalnone "github.com/toolgate/toolgate/internal/providers/approval/none"
	"github.com/toolgate/toolgate/internal/providers/sandbox"
	"github.com/toolgate/toolgate/internal/providers/sandbox/pod"
	"github.com/toolgate/toolgate/internal/providers/sandbox/process"
)

// Options are what a composition of the manager chooses.
type Options struct {
	// Approvals are the approval providers mounted (of APIServer and None).
	Approvals []toolgatev1alpha1.ApprovalProvider
	// ProcessSandbox mounts the Process sandbox provider, which runs tools
	// as processes of the manager itself: for tests and development only.
	// Its bodies keep their workspaces under ProcessWorkspaceDir; with
	// ProcessSubCalls they are given an endpoint for sub-calls.
	ProcessSandbox      bool
	ProcessWorkspaceDir string
	ProcessSubCalls     bool
	// RunnerImage, when set, mounts the Pod sandbox provider.
	RunnerImage string
	// RunnerImageVolume mounts the runner image into container tools'
	// pods as an image volume instead of an init container (pod.Config).
	RunnerImageVolume     bool
	NetworkPolicyEnforced bool
	// The pod sandbox's channel key lives in Secret Namespace/ChannelKeySecret;
	// ManagerLabels select the manager's pods (the only ingress tool pods
	// allow).
	Namespace        string
	ChannelKeySecret string
	ManagerLabels    map[string]string
	// EgressService names the egress proxy's Service in Namespace ("":
	// none); its grant keys are written to Secret EgressKeySecret.
	EgressService, EgressKeySecret string
	// WatchNamespaces, when not empty, are the only namespaces the
	// manager's cache lists and watches (Cache).
	WatchNamespaces []string
	// WakeBuffer is the room for pending wake-ups of calls whose work ended
	// (0: 1024).
	WakeBuffer int
	// PollInterval and SessionWorkers are the controllers' (controller.Config;
	// 0: its defaults).
	PollInterval   time.Duration
	SessionWorkers int
	// DefaultRetention is controller.Config's: the ttlSecondsAfterCommit
	// of a session that sets none (0: calls are kept with their session).
	DefaultRetention time.Duration
	// Audit receives the audit trail: a record per decision and per
	// settled call (nil: none).
	Audit audit.Sink
	// Notifier tells the install's sinks of approval questions (nil:
	// nobody); Providers adds it to the manager.
	Notifier *notify.Notifier
}

// defaultWakeBuffer is the room for pending wake-ups when Options leave it
// unset.
const defaultWakeBuffer = 1024

// Setup mounts the providers o chooses under scope and sets the
// controllers up on mgr.
func Setup(mgr ctrl.Manager, scope *lifecycle.Scope, o Options) error {
	cfg, err := Providers(mgr, scope, o)
	if err != nil {
		return err
	}
	return controller.Setup(mgr, cfg)
}

// Providers mounts the providers of each seam under scope and returns the
// controllers' configuration.
func Providers(mgr ctrl.Manager, scope *lifecycle.Scope, o Options) (controller.Config, error) {
	wake := o.WakeBuffer
	if wake == 0 {
		wake = defaultWakeBuffer
	}
	cfg := controller.Config{
		Approvals: &approval.Mounts{}, Sandboxes: &sandbox.Mounts{}, Wake: controller.NewWake(wake),
		PollInterval: o.PollInterval, SessionWorkers: o.SessionWorkers, DefaultRetention: o.DefaultRetention,
	}
	key, err := managerKey(mgr, o)
	if err != nil {
		return cfg, err
	}
	// One wait for sub-calls' results per manager, whichever sandboxes
	// serve them: each listens to every ToolCall event.
	var subCalls sandbox.SubCalls
	if (o.ProcessSandbox && o.ProcessSubCalls) || o.RunnerImage != "" {
		if subCalls, err = controller.SubCalls(mgr); err != nil {
			return cfg, err
		}
	}
	if o.Notifier != nil {
		if err := mgr.Add(o.Notifier); err != nil {
			return cfg, err
		}
	}
	if o.Audit != nil {
		cfg.Audit, cfg.AuditDigests = o.Audit, approvalapiserver.AuditDigests(key.Current.Bytes())
	}
	mount := func(err error) error {
		if err != nil {
			return fmt.Errorf("mounting a provider: %w", err)
		}
		return nil
	}
	for _, name := range o.Approvals {
		var p approval.Provider
		switch name {
		case toolgatev1alpha1.ApprovalProviderAPIServer:
			ap := approvalapiserver.New(mgr.GetClient(), clock.RealClock{}, key.Current.Bytes())
			ap.Audit, ap.Notifier = o.Audit, o.Notifier
			if key.Previous != nil {
				ap.Previous = key.Previous.Bytes()
			}
			p = ap
		case toolgatev1alpha1.ApprovalProviderNone:
			p = approvalnone.Provider{}
		default:
			return cfg, fmt.Errorf("no approval provider %q", name)
		}
		if err := mount(cfg.Approvals.Mount(scope, string(name), p)); err != nil {
			return cfg, err
		}
	}
	if o.ProcessSandbox {
		box := process.New(o.ProcessWorkspaceDir, cfg.Wake.Notify)
		if o.ProcessSubCalls {
			box.SubCalls = subCalls
		}
		if err := mount(cfg.Sandboxes.Mount(scope, string(toolgatev1alpha1.SandboxProviderProcess), box)); err != nil {
			return cfg, err
		}
	}
	if o.RunnerImage != "" {
		provider, err := podProvider(mgr, o, key, cfg.Wake, subCalls)
		if err != nil {
			return cfg, err
		}
		if err := mount(cfg.Sandboxes.Mount(scope, string(toolgatev1alpha1.SandboxProviderPod), provider)); err != nil {
			return cfg, err
		}
	}
	return cfg, nil
}

// managerKey is the manager's secret, shared by every replica and kept
// across restarts: the pod sandbox's channel key, read from (or created
// in) Secret Namespace/ChannelKeySecret. The approval provider seals its
// questions under a key derived from it. A composition without a
// namespace (tests) gets one key per process, so a manager restarted in
// the same process still reads its predecessor's questions.
func managerKey(mgr ctrl.Manager, o Options) (keys.Manager, error) {
	if o.Namespace == "" {
		if o.RunnerImage != "" {
			return keys.Manager{}, fmt.Errorf("the pod sandbox needs the manager's namespace (--namespace, or POD_NAMESPACE) for its channel key")
		}
		return keys.ForProcess()
	}
	// Read directly: the manager's cache is not started, and must never
	// watch Secrets.
	direct, err := client.New(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme()})
	if err != nil {
		return keys.Manager{}, err
	}
	k, err := keys.Load(context.Background(), direct, o.Namespace, o.ChannelKeySecret)
	if err != nil || o.EgressService == "" {
		return k, err
	}
	return k, keys.WriteGrantKeys(context.Background(), direct, o.Namespace, o.EgressKeySecret, k)
}

// podProvider makes the Pod sandbox provider with the channel key, and
// wakes its follower at every change of a tool pod.
func podProvider(mgr ctrl.Manager, o Options, key keys.Manager, wake *controller.Wake, subCalls sandbox.SubCalls) (*pod.Provider, error) {
	provider := &pod.Provider{
		Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Key: key.Current, Previous: key.Previous, Notify: wake.Notify, NetworkPolicyEnforced: o.NetworkPolicyEnforced,
		SubCalls: subCalls,
		Config:   pod.Config{RunnerImage: o.RunnerImage, RunnerImageVolume: o.RunnerImageVolume, ImagePullPolicy: corev1.PullIfNotPresent, ManagerNamespace: o.Namespace, ManagerLabels: o.ManagerLabels, EgressService: o.EgressService},
	}
	// A tool pod's change wakes its follower: a cold pod is handed its
	// call as soon as its runner runs.
	pods, err := mgr.GetCache().GetInformer(context.Background(), &corev1.Pod{})
	if err != nil {
		return nil, err
	}
	if _, err := pods.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    provider.PodChanged,
		UpdateFunc: func(_, obj any) { provider.PodChanged(obj) },
		DeleteFunc: provider.PodChanged,
	}); err != nil {
		return nil, err
	}
	return provider, nil
}
