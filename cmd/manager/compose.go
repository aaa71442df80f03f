package main

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/controller"
	"github.com/toolgate/toolgate/internal/lifecycle"
	"github.com/toolgate/toolgate/internal/providers/approval"
	approvalapiserver "github.com/toolgate/toolgate/internal/providers/approval/apiserver"
	approvalnone "github.com/toolgate/toolgate/internal/providers/approval/none"
	"github.com/toolgate/toolgate/internal/providers/sandbox"
	"github.com/toolgate/toolgate/internal/providers/sandbox/pod"
	"github.com/toolgate/toolgate/internal/providers/sandbox/process"
)

// options are what the manager's flags choose.
type options struct {
	// processSandbox mounts the Process sandbox provider, which runs tools
	// as processes of the manager itself: for tests and development only.
	processSandbox        bool
	processWorkspaceDir   string
	runnerImage           string
	networkPolicyEnforced bool
	// The pod sandbox's channel key lives in Secret namespace/channelKeySecret;
	// managerLabels select the manager's pods (the only ingress tool pods
	// allow).
	namespace        string
	channelKeySecret string
	managerLabels    map[string]string
	// watchNamespaces, when not empty, are the only namespaces the
	// manager's cache lists and watches (cacheOptions).
	watchNamespaces []string
}

// compose mounts the providers of each seam under scope and returns the
// controllers' configuration: the one place that names concrete providers.
func compose(mgr ctrl.Manager, scope *lifecycle.Scope, o options) (controller.Config, error) {
	cfg := controller.Config{Approvals: &approval.Mounts{}, Sandboxes: &sandbox.Mounts{}, Wake: controller.NewWake(1024)}
	mount := func(err error) error {
		if err != nil {
			return fmt.Errorf("mounting a provider: %w", err)
		}
		return nil
	}
	if err := mount(cfg.Approvals.Mount(scope, string(toolgatev1alpha1.ApprovalProviderAPIServer), approvalapiserver.New(mgr.GetClient(), clock.RealClock{}))); err != nil {
		return cfg, err
	}
	if err := mount(cfg.Approvals.Mount(scope, string(toolgatev1alpha1.ApprovalProviderNone), approvalnone.Provider{})); err != nil {
		return cfg, err
	}
	if o.processSandbox {
		box := process.New(o.processWorkspaceDir, cfg.Wake.Notify)
		box.SubCalls = controller.SubCalls(mgr.GetClient())
		if err := mount(cfg.Sandboxes.Mount(scope, string(toolgatev1alpha1.SandboxProviderProcess), box)); err != nil {
			return cfg, err
		}
	}
	if o.runnerImage != "" {
		if o.namespace == "" {
			return cfg, fmt.Errorf("the pod sandbox needs the manager's namespace (--namespace, or POD_NAMESPACE) for its channel key")
		}
		// Read directly: the manager's cache is not started, and must never
		// watch Secrets.
		direct, err := client.New(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme()})
		if err != nil {
			return cfg, err
		}
		key, err := pod.LoadChannelKey(context.Background(), direct, o.namespace, o.channelKeySecret)
		if err != nil {
			return cfg, err
		}
		provider := &pod.Provider{
			Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Key: key, Notify: cfg.Wake.Notify, NetworkPolicyEnforced: o.networkPolicyEnforced,
			SubCalls: controller.SubCalls(mgr.GetClient()),
			Config:   pod.Config{RunnerImage: o.runnerImage, ImagePullPolicy: corev1.PullIfNotPresent, ManagerNamespace: o.namespace, ManagerLabels: o.managerLabels},
		}
		// A tool pod's change wakes its follower: a cold pod is handed its
		// call as soon as its runner runs.
		pods, err := mgr.GetCache().GetInformer(context.Background(), &corev1.Pod{})
		if err != nil {
			return cfg, err
		}
		if _, err := pods.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc:    provider.PodChanged,
			UpdateFunc: func(_, obj any) { provider.PodChanged(obj) },
			DeleteFunc: provider.PodChanged,
		}); err != nil {
			return cfg, err
		}
		if err := mount(cfg.Sandboxes.Mount(scope, string(toolgatev1alpha1.SandboxProviderPod), provider)); err != nil {
			return cfg, err
		}
	}
	return cfg, nil
}
