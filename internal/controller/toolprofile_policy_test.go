package controller

import (
	"errors"
	"strings"
	"testing"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/lifecycle"
	"github.com/toolgate/toolgate/internal/providers/sandbox"
)

// validatingSandbox is a sandbox provider refusing every policy.
type validatingSandbox struct{ sandbox.Provider }

func (validatingSandbox) Validate(toolgatev1alpha1.SandboxPolicy) error {
	return errors.New("cpu 8 exceeds the cap 4")
}

// TestRefusedPolicy: a profile whose policy the mounted provider refuses
// is not Ready, with the provider's reason.
func TestRefusedPolicy(t *testing.T) {
	scope := lifecycle.NewScope()
	defer scope.Dispose()
	mounts := &sandbox.Mounts{}
	if err := mounts.Mount(scope, "Pod", validatingSandbox{}); err != nil {
		t.Fatal(err)
	}
	spec := &toolgatev1alpha1.ToolProfileSpec{Sandbox: toolgatev1alpha1.SandboxPolicy{Provider: toolgatev1alpha1.SandboxProviderPod}}
	if got := refusedPolicy(spec, mounts); !strings.Contains(got, "cpu 8 exceeds the cap 4") {
		t.Errorf("refusal %q", got)
	}
	spec.Sandbox.Provider = toolgatev1alpha1.SandboxProviderProcess // not mounted: reported elsewhere
	if got := refusedPolicy(spec, mounts); got != "" {
		t.Errorf("an unmounted provider refused: %q", got)
	}
}
