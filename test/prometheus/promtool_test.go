package prometheus

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/testenv"
)

// promtool is the cached promtool's path (built once).
func promtool(t *testing.T) string {
	t.Helper()
	out, err := exec.Command(filepath.Join(testenv.RepoRoot(), "hack", "build-promtool.sh")).Output()
	if err != nil {
		t.Fatalf("hack/build-promtool.sh: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1]
}

func TestTheAlertsLoadAndFireAsTested(t *testing.T) {
	bin := promtool(t)
	dir := filepath.Join(testenv.RepoRoot(), "test", "prometheus")
	for _, args := range [][]string{
		{"check", "rules", "--lint=all", "--lint-fatal", "../../charts/toolgate/files/alerts.yaml"},
		{"test", "rules", "alerts_test.yaml"},
	} {
		cmd := exec.Command(bin, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}
