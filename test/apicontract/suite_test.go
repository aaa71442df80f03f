package apicontract

import (
	"context"
	"fmt"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolgate/toolgate/internal/testenv"
)

var (
	env *testenv.Env
	k8s client.Client
	ctx = context.Background()
)

func TestAPIContract(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "API contract (real kube-apiserver)")
}

var _ = BeforeSuite(func() {
	var err error
	env, err = testenv.Start()
	Expect(err).NotTo(HaveOccurred())
	k8s = env.Client
	dc, err := discovery.NewDiscoveryClientForConfig(env.Config)
	Expect(err).NotTo(HaveOccurred())
	info, err := dc.ServerVersion()
	Expect(err).NotTo(HaveOccurred())
	want, err := testenv.KubernetesVersion()
	Expect(err).NotTo(HaveOccurred())
	Expect(info.GitVersion).To(Equal(want))
	// Printed so that a CI log shows the specs ran against a real server.
	fmt.Printf("API contract specs run against kube-apiserver %s at %s (binaries in %s)\n",
		info.GitVersion, env.Config.Host, env.Environment.BinaryAssetsDirectory)
})

var _ = AfterSuite(func() {
	if env != nil {
		Expect(env.Stop()).To(Succeed())
	}
})

// newNamespace creates a namespace for one spec and deletes it afterwards.
func newNamespace() string {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "contract-"}}
	Expect(k8s.Create(ctx, ns)).To(Succeed())
	DeferCleanup(func() { Expect(client.IgnoreNotFound(k8s.Delete(ctx, ns))).To(Succeed()) })
	return ns.Name
}
