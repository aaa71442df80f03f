package testmanager

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/compose"
	"github.com/toolgate/toolgate/internal/lifecycle"
	"github.com/toolgate/toolgate/internal/testenv"
)

// pollInterval is the controllers' fallback poll, as the controller suite
// sets it.
const pollInterval = 500 * time.Millisecond

// Start runs the controllers against env until ctx ends, with the APIServer
// approval provider; tools run in workspaceDir. The returned channel closes
// once the manager has stopped, carrying its error if it failed.
func Start(ctx context.Context, env *testenv.Env, workspaceDir string) (<-chan error, error) {
	o := compose.Options{
		Approvals:      []toolgatev1alpha1.ApprovalProvider{toolgatev1alpha1.ApprovalProviderAPIServer},
		ProcessSandbox: true, ProcessWorkspaceDir: workspaceDir,
		PollInterval: pollInterval,
	}
	// The manager's cache, as cmd/manager configures it.
	return Run(ctx, env.Config, env.Scheme, compose.Cache(o), o)
}

// Run runs the controllers composed with o against cfg until ctx ends,
// with no metrics or probe endpoints; any number may run in one process.
// The returned channel closes once the manager has stopped and its
// providers' work is gone, carrying its error if it failed.
func Run(ctx context.Context, cfg *rest.Config, scheme *runtime.Scheme, cacheOpts cache.Options, o compose.Options) (<-chan error, error) {
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
		Cache:                  cacheOpts,
	})
	if err != nil {
		return nil, err
	}
	scope := lifecycle.NewScope()
	if err := compose.Setup(mgr, scope, o); err != nil {
		scope.Dispose()
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
