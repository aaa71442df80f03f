package testmanager

import (
	"context"
	"time"

	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/controller"
	"github.com/toolgate/toolgate/internal/lifecycle"
	"github.com/toolgate/toolgate/internal/providers/approval"
	approvalapiserver "github.com/toolgate/toolgate/internal/providers/approval/apiserver"
	"github.com/toolgate/toolgate/internal/providers/sandbox"
	"github.com/toolgate/toolgate/internal/providers/sandbox/process"
	"github.com/toolgate/toolgate/internal/testenv"
)

// pollInterval is the controllers' fallback poll, as the controller suite
// sets it.
const pollInterval = 500 * time.Millisecond

// Start runs the controllers against env until ctx ends; tools run in
// workspaceDir. The returned channel closes once the manager has stopped,
// carrying its error if it failed.
func Start(ctx context.Context, env *testenv.Env, workspaceDir string) (<-chan error, error) {
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:                 env.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		return nil, err
	}
	scope := lifecycle.NewScope()
	cfg := controller.Config{Approvals: &approval.Mounts{}, Sandboxes: &sandbox.Mounts{}, Wake: controller.NewWake(1024), PollInterval: pollInterval}
	if err := cfg.Approvals.Mount(scope, string(toolgatev1alpha1.ApprovalProviderAPIServer), approvalapiserver.New(mgr.GetClient(), clock.RealClock{})); err != nil {
		return nil, err
	}
	box := process.New(workspaceDir, cfg.Wake.Notify)
	if err := cfg.Sandboxes.Mount(scope, string(toolgatev1alpha1.SandboxProviderProcess), box); err != nil {
		return nil, err
	}
	if err := controller.Setup(mgr, cfg); err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	go func() {
		defer close(done)
		defer scope.Dispose()
		if err := mgr.Start(ctx); err != nil {
			done <- err
		}
	}()
	return done, nil
}
