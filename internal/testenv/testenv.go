package testenv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// Env is a running API server with the toolgate CRDs installed.
type Env struct {
	Environment *envtest.Environment
	Config      *rest.Config
	Client      client.Client
	Scheme      *k8sruntime.Scheme
}

// RepoRoot is the checkout's root directory.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// KubernetesVersion is the Kubernetes release matching the k8s.io/api
// version the checkout's go.mod requires (k8s.io/api v0.X.Y belongs to
// v1.X.Y), the same derivation hack/versions.sh makes.
func KubernetesVersion() (string, error) {
	data, err := os.ReadFile(filepath.Join(RepoRoot(), "go.mod"))
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		if len(fields) >= 2 && fields[0] == "k8s.io/api" && strings.HasPrefix(fields[1], "v0.") {
			return "v1." + strings.TrimPrefix(fields[1], "v0."), nil
		}
	}
	return "", fmt.Errorf("go.mod does not require k8s.io/api")
}

// BinaryAssetsDir finds kube-apiserver and etcd: KUBEBUILDER_ASSETS if set,
// else the cache hack/build-k8s.sh fills.
func BinaryAssetsDir() (string, error) {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir, checkBinaries(dir)
	}
	version, err := KubernetesVersion()
	if err != nil {
		return "", err
	}
	cache := os.Getenv("TOOLGATE_CACHE")
	if cache == "" {
		base := os.Getenv("XDG_CACHE_HOME")
		if base == "" {
			home, err := os.UserHomeDir()
			if err != nil {
				return "", err
			}
			base = filepath.Join(home, ".cache")
		}
		cache = filepath.Join(base, "toolgate")
	}
	dir := filepath.Join(cache, "k8s", version)
	return dir, checkBinaries(dir)
}

// Kubectl is the kubectl built beside kube-apiserver (make envtest-bins),
// for tests that render the kustomize overlays of config/.
func Kubectl() (string, error) {
	dir, err := BinaryAssetsDir()
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "kubectl")
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("kubectl not found in %s: run `make envtest-bins` (hack/build-k8s.sh) first", dir)
	}
	return path, nil
}

func checkBinaries(dir string) error {
	for _, name := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("%s not found in %s: run `make envtest-bins` (hack/build-k8s.sh) first", name, dir)
		}
	}
	return nil
}

// Start starts the API server and etcd and installs the CRDs from
// config/crd/bases.
func Start() (*Env, error) {
	dir, err := BinaryAssetsDir()
	if err != nil {
		return nil, err
	}
	scheme := k8sruntime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := toolgatev1alpha1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: dir,
		CRDDirectoryPaths:     []string{filepath.Join(RepoRoot(), "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		Scheme:                scheme,
	}
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("starting the API server from %s: %w", dir, err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		_ = env.Stop()
		return nil, err
	}
	if err := waitServed(c); err != nil {
		_ = env.Stop()
		return nil, err
	}
	return &Env{Environment: env, Config: cfg, Client: c, Scheme: scheme}, nil
}

// waitServed waits until the API server answers a create of each toolgate
// kind with anything but 503: envtest returns once discovery lists the
// CRDs, but a create may still be refused for a moment ("Resource kind …
// not found"), which once failed a spec's first create. The probe is a
// server-side dry run of an empty object: refused by validation, written
// nowhere.
func waitServed(c client.Client) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, kind := range []string{"ToolProfile", "AgentSession", "ToolCall", "ApprovalRequest"} {
		probe := &unstructured.Unstructured{}
		probe.SetGroupVersionKind(GVK(kind))
		probe.SetNamespace("default")
		probe.SetName("testenv-probe")
		for {
			err := c.Create(ctx, probe.DeepCopy(), client.DryRunAll)
			if !apierrors.IsServiceUnavailable(err) {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("the API server does not serve %s after 30 s: %w", kind, err)
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}

// Stop stops the API server and etcd.
func (e *Env) Stop() error { return e.Environment.Stop() }

// GVK returns the GroupVersionKind of a toolgate kind.
func GVK(kind string) schema.GroupVersionKind {
	return toolgatev1alpha1.GroupVersion.WithKind(kind)
}
