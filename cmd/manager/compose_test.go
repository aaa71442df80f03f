package main

import (
	"testing"

	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/compose"
	"github.com/toolgate/toolgate/internal/lifecycle"
	"github.com/toolgate/toolgate/internal/testenv"
)

// TestProcessSandboxOnlyWhenAsked: the Process provider runs tools inside
// the manager with no isolation, so a production manager never mounts it
// unless a flag asks; a profile selecting it is then not Ready (the
// ToolProfile controller reports ProviderNotMounted).
func TestProcessSandboxOnlyWhenAsked(t *testing.T) {
	env, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.Stop() }()
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: env.Scheme, Metrics: metricsserver.Options{BindAddress: "0"}})
	if err != nil {
		t.Fatal(err)
	}
	process := string(toolgatev1alpha1.SandboxProviderProcess)
	for _, tt := range []struct {
		opts    compose.Options
		mounted bool
	}{
		{opts: compose.Options{Approvals: approvals}, mounted: false},
		{opts: compose.Options{Approvals: approvals, ProcessSandbox: true, ProcessWorkspaceDir: t.TempDir(), ProcessSubCalls: true}, mounted: true},
	} {
		scope := lifecycle.NewScope()
		cfg, err := compose.Providers(mgr, scope, tt.opts)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := cfg.Sandboxes.Get(process); ok != tt.mounted {
			t.Errorf("with %+v the Process provider is mounted: %v, want %v", tt.opts, ok, tt.mounted)
		}
		for _, name := range []toolgatev1alpha1.ApprovalProvider{toolgatev1alpha1.ApprovalProviderAPIServer, toolgatev1alpha1.ApprovalProviderNone} {
			if _, ok := cfg.Approvals.Get(string(name)); !ok {
				t.Errorf("approval provider %s not mounted", name)
			}
		}
		scope.Dispose()
	}
}
