package runner

import (
	"os/exec"
	"strings"
	"testing"
)

// TestRunnerLinksNoControlPlane keeps the in-pod binary small: it is copied
// into every tool pod, so it must not link the API machinery, the schema
// compiler or the pipeline and providers that pull them in.
func TestRunnerLinksNoControlPlane(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("go is not on PATH")
	}
	out, err := exec.Command("go", "list", "-deps", "github.com/toolgate/toolgate/cmd/toolgate-runner").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const self = "github.com/toolgate/toolgate/internal/"
	forbidden := []string{"k8s.io/", "sigs.k8s.io/", "github.com/santhosh-tekuri/", self + "pipeline", self + "providers"}
	for _, pkg := range strings.Fields(string(out)) {
		for _, f := range forbidden {
			if strings.HasPrefix(pkg, f) {
				t.Errorf("toolgate-runner links %s", pkg)
			}
		}
	}
}
