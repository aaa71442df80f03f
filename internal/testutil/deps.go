package testutil

import (
	"os/exec"
	"strings"
	"testing"
)

// ForbidDeps fails t for every package pkg links (go list -deps) whose
// import path starts with one of forbidden: how the package boundaries of
// docs/architecture.md are kept. It skips when go is not on PATH.
func ForbidDeps(t *testing.T, pkg string, forbidden ...string) {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("go is not on PATH")
	}
	out, err := exec.Command("go", "list", "-deps", pkg).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, f := range forbidden {
			if strings.HasPrefix(dep, f) {
				t.Errorf("%s links %s", pkg, dep)
			}
		}
	}
}
