package runner

import (
	"testing"

	tu "github.com/toolgate/toolgate/internal/testutil"
)

// TestRunnerLinksNoControlPlane keeps the in-pod binary small: it is copied
// into every tool pod, so it must not link the API machinery, the schema
// compiler or the pipeline and providers that pull them in.
func TestRunnerLinksNoControlPlane(t *testing.T) {
	const self = "github.com/toolgate/toolgate/internal/"
	tu.ForbidDeps(t, "github.com/toolgate/toolgate/cmd/toolgate-runner",
		"k8s.io/", "sigs.k8s.io/", "github.com/santhosh-tekuri/", self+"pipeline", self+"providers")
}
