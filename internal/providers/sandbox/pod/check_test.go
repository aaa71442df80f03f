package pod

import (
	"context"
	"strings"
	"testing"

	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// A profile whose tools name their hosts where no egress proxy runs, or
// whose RuntimeClass does not exist, is not enforced as written: its
// calls fail, and its status says so before the first one does.
func TestCheckProfileNamesWhatThisInstallCannotRun(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	reader := fake.NewClientBuilder().WithScheme(scheme).WithObjects(&nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "gvisor"}, Handler: "runsc"}).Build()
	spec := &toolgatev1alpha1.ToolProfileSpec{
		Tools: []toolgatev1alpha1.ToolDefinition{
			{Name: "fetch", Egress: &toolgatev1alpha1.ToolEgress{Hosts: []toolgatev1alpha1.EgressHost{{Host: "api.example.test"}}}},
			{Name: "plain"},
		},
		Sandbox: toolgatev1alpha1.SandboxPolicy{RuntimeClassName: ptr.To("gvisor")},
	}
	p := &Provider{Reader: reader}
	got, recheck := p.CheckProfile(context.Background(), spec)
	if recheck {
		t.Error("a configuration that cannot change under a running manager asks to be checked again")
	}
	if len(got) != 1 || !strings.Contains(got[0], "tools fetch name the hosts") || !strings.Contains(got[0], "--egress-proxy-service") {
		t.Errorf("no proxy: %q", got)
	}

	p.Config.EgressService, p.Config.ManagerNamespace = "toolgate-egress", "toolgate-system"
	if got, _ := p.CheckProfile(context.Background(), spec); len(got) != 0 {
		t.Errorf("a proxy and an existing RuntimeClass: %q", got)
	}

	spec.Sandbox.RuntimeClassName = ptr.To("kata")
	got, recheck = p.CheckProfile(context.Background(), spec)
	if len(got) != 1 || !strings.Contains(got[0], "RuntimeClass kata does not exist") || !recheck {
		t.Errorf("a missing RuntimeClass: %q, checked again %v", got, recheck)
	}
}
