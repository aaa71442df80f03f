//go:build e2e

package quickstart

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/testenv"
)

// blocks returns the page's ```sh blocks, split at the heading "## Clean up":
// the ones before it and the ones after.
func blocks(t *testing.T) (before, after []string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "docs", "quickstart.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	cut := strings.Index(doc, "\n## Clean up")
	if cut < 0 {
		t.Fatal("docs/quickstart.md has no section \"## Clean up\"")
	}
	re := regexp.MustCompile("(?s)\n```sh\n(.*?)\n```")
	for _, m := range re.FindAllStringSubmatchIndex(doc, -1) {
		block := doc[m[2]:m[3]]
		if m[0] < cut {
			before = append(before, block)
		} else {
			after = append(after, block)
		}
	}
	if len(before) == 0 || len(after) == 0 {
		t.Fatalf("docs/quickstart.md: %d blocks before the clean-up, %d after", len(before), len(after))
	}
	return before, after
}

func TestQuickstart(t *testing.T) {
	clusterDir := os.Getenv("TOOLGATE_CLUSTER_DIR")
	if clusterDir == "" {
		clusterDir = "/var/tmp/toolgate-cluster"
	}
	kubeconfig := filepath.Join(clusterDir, "kubeconfig", "admin.kubeconfig")
	if _, err := os.Stat(kubeconfig); err != nil {
		t.Fatalf("no local cluster (%v): run hack/cluster-up.sh and hack/images.sh first (make test-quickstart does)", err)
	}
	sh := shell(t, kubeconfig)
	before, after := blocks(t)

	// The local cluster has no volume provisioner: a class-less volume for
	// the session's workspace claim to bind to.
	pv := filepath.Join(clusterDir, "pv", "quickstart")
	must(t, os.MkdirAll(pv, 0o777))
	must(t, os.Chmod(pv, 0o777))
	sh(fmt.Sprintf(`kubectl apply -f - <<'EOF'
apiVersion: v1
kind: PersistentVolume
metadata: {name: quickstart-workspace}
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Delete
  storageClassName: ""
  hostPath: {path: %s, type: DirectoryOrCreate}
EOF`, pv))
	t.Cleanup(func() { _ = run(kubeconfig, "kubectl delete pv quickstart-workspace --ignore-not-found") })

	// One shell for the page, as one reader's: its exports carry on.
	var script strings.Builder
	for i, b := range before {
		fmt.Fprintf(&script, "echo '== block %d' >&2\n%s\n", i+1, b)
	}
	t.Logf("output:\n%s", sh(script.String()))
	out := sh("kubectl toolgate transcript demo -n quickstart")
	if !strings.Contains(out, "written after a person approved it") || strings.Count(out, "Succeeded") != 2 {
		t.Fatalf("transcript:\n%s", out)
	}

	// An upgrade with a changed value rolls out, one replica at a time
	// (the default two, under their PodDisruptionBudget).
	sh(`helm upgrade toolgate charts/toolgate --namespace toolgate-system --reuse-values --set callRetention=72h --wait --timeout 5m
kubectl -n toolgate-system rollout status deployment/toolgate-controller-manager --timeout=180s`)
	if got := strings.TrimSpace(sh(`kubectl -n toolgate-system get deployment toolgate-controller-manager -o jsonpath='{.status.readyReplicas} {.spec.template.spec.containers[0].args}'`)); !strings.HasPrefix(got, "2 ") || !strings.Contains(got, "--default-call-retention=72h") {
		t.Fatalf("ready replicas and arguments after the upgrade: %q", got)
	}

	sh(strings.Join(after, "\n"))
	// Nothing of toolgate's is left.
	left := sh(`kubectl get crd -o name | grep toolgate.dev || true
kubectl get clusterrole,clusterrolebinding -o name | grep toolgate || true
kubectl get validatingadmissionpolicy,validatingadmissionpolicybinding -o name | grep toolgate || true
kubectl get mutatingadmissionpolicy,mutatingadmissionpolicybinding -o name 2>/dev/null | grep toolgate || true
kubectl -n default get role,rolebinding -o name | grep toolgate || true
kubectl get namespace toolgate-system quickstart -o name --ignore-not-found`)
	if strings.TrimSpace(left) != "" {
		t.Fatalf("left behind after helm uninstall:\n%s", left)
	}
}

// shell returns a runner of bash scripts (set -euo pipefail) at the
// checkout's root, as the page's reader runs them: kubectl and helm on
// PATH, the admin kubeconfig, the local cluster's settings of the page.
func shell(t *testing.T, kubeconfig string) func(string) string {
	return func(script string) string {
		t.Helper()
		var out, errb bytes.Buffer
		cmd := exec.Command("bash", "-euo", "pipefail", "-c", script)
		cmd.Dir = testenv.RepoRoot()
		cmd.Env = env(t, kubeconfig)
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			t.Fatalf("%v\nscript:\n%s\nstdout:\n%s\nstderr:\n%s", err, script, out.String(), errb.String())
		}
		return out.String()
	}
}

func run(kubeconfig, script string) error {
	cmd := exec.Command("bash", "-c", script)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	return cmd.Run()
}

var binDir string

// env is the reader's environment: HOME is a temporary directory (the
// page installs the plugin under it), Go keeps its caches.
func env(t *testing.T, kubeconfig string) []string {
	t.Helper()
	if binDir == "" {
		binDir = t.TempDir()
		k8s, err := testenv.BinaryAssetsDir()
		must(t, err)
		must(t, os.Symlink(filepath.Join(k8s, "kubectl"), filepath.Join(binDir, "kubectl")))
		helm, err := exec.Command(filepath.Join(testenv.RepoRoot(), "hack", "build-helm.sh")).Output()
		must(t, err)
		lines := strings.Split(strings.TrimSpace(string(helm)), "\n")
		must(t, os.Symlink(lines[len(lines)-1], filepath.Join(binDir, "helm")))
		must(t, os.MkdirAll(filepath.Join(binDir, "home"), 0o755))
	}
	goenv := func(k string) string {
		v, err := exec.Command("go", "env", k).Output()
		must(t, err)
		return k + "=" + strings.TrimSpace(string(v))
	}
	return append(os.Environ(),
		"HOME="+filepath.Join(binDir, "home"), goenv("GOCACHE"), goenv("GOMODCACHE"), goenv("GOPATH"),
		// The page installs the plugin in ~/.local/bin.
		"PATH="+binDir+":"+filepath.Join(binDir, "home", ".local", "bin")+":"+os.Getenv("PATH"),
		"KUBECONFIG="+kubeconfig,
		"TOOLGATE_HELM_ARGS=-f hack/local-values.yaml",
		"TOOLGATE_POD_SECURITY=privileged",
	)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
