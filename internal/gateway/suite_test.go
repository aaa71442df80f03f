package gateway_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/toolgate/toolgate/internal/gateway"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/internal/testmanager"
)

// audience is the audience callers' tokens are issued for in these specs.
const audience = "toolgate-gateway-test"

var (
	env          *testenv.Env
	k8s          client.Client
	clientset    *kubernetes.Clientset
	ctx          = context.Background()
	workspaceDir string
	stop         context.CancelFunc
	managerDone  <-chan error
	server       *httptest.Server
	// metrics holds the suite's gateway's metrics.
	metrics = prometheus.NewRegistry()
	// gatewayCtx lives as long as the suite's manager and gateway.
	gatewayCtx context.Context
)

func TestGateway(t *testing.T) {
	RegisterFailHandler(Fail)
	// Eventually bounds liveness, not speed.
	SetDefaultEventuallyTimeout(30 * time.Second)
	RunSpecs(t, "Gateway (real kube-apiserver, manager with the process sandbox, go-sdk MCP client over HTTP)")
}

var _ = BeforeSuite(func() {
	ctrl.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	var err error
	env, err = testenv.Start()
	Expect(err).NotTo(HaveOccurred())
	k8s = env.Client
	clientset, err = kubernetes.NewForConfig(env.Config)
	Expect(err).NotTo(HaveOccurred())
	workspaceDir, err = os.MkdirTemp("", "toolgate-gw-")
	Expect(err).NotTo(HaveOccurred())
	installObjects(
		filepath.Join("config", "admission", "approval_policy.yaml"),
		filepath.Join("config", "admission", "approver_role.yaml"),
		filepath.Join("config", "rbac", "user_roles.yaml"),
		filepath.Join("config", "gateway", "role.yaml"),
	)

	var sctx context.Context
	sctx, stop = context.WithCancel(ctx)
	managerDone, err = testmanager.Start(sctx, env, workspaceDir)
	Expect(err).NotTo(HaveOccurred())
	installGatewayIdentity()
	server = startGateway(sctx, gateway.Options{Registerer: metrics})
	gatewayCtx = sctx
})

var _ = AfterSuite(func() {
	if server != nil {
		// Streams a failed spec left open must not hold Close.
		server.CloseClientConnections()
		server.Close()
	}
	if stop != nil {
		stop()
		Expect(<-managerDone).NotTo(HaveOccurred())
	}
	if env != nil {
		Expect(env.Stop()).To(Succeed())
	}
	_ = os.RemoveAll(workspaceDir)
})

// installObjects creates the objects of the repository's YAML files as
// shipped (cluster-scoped roles and policies keep their unprefixed names).
func installObjects(files ...string) {
	for i := range files {
		files[i] = filepath.Join(testenv.RepoRoot(), files[i])
	}
	objs, err := testenv.ReadObjects(files...)
	Expect(err).NotTo(HaveOccurred())
	for _, u := range objs {
		Expect(k8s.Create(ctx, u)).To(Succeed(), u.GetKind()+" "+u.GetName())
	}
}

// installGatewayIdentity makes the gateway's ServiceAccount, holding only
// the roles config/gateway ships: tokenreviews cluster-wide, impersonation
// in the namespaces bound per spec.
func installGatewayIdentity() {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "toolgate-system"}}
	Expect(k8s.Create(ctx, ns)).To(Succeed())
	Expect(k8s.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "gateway"}})).To(Succeed())
	Expect(k8s.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "gateway"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "gateway"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns.Name, Name: "gateway"}},
	})).To(Succeed())
}

// startGateway serves a gateway over HTTP as its own ServiceAccount.
func startGateway(sctx context.Context, opts gateway.Options) *httptest.Server {
	cfg := &rest.Config{
		Host:            env.Config.Host,
		TLSClientConfig: rest.TLSClientConfig{CAData: env.Config.CAData},
		BearerToken:     token("toolgate-system", "gateway"),
	}
	opts.Log = ctrl.Log.WithName("gateway")
	gw, err := gateway.Build(sctx, cfg, audience, gateway.DefaultReviewTTL, opts)
	Expect(err).NotTo(HaveOccurred())
	return httptest.NewServer(gw.Handler())
}

// token issues a ServiceAccount token; audiences default to the API
// server's own.
func token(ns, sa string, audiences ...string) string {
	tr, err := clientset.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{Audiences: audiences, ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	return tr.Status.Token
}

// as returns a client acting as user.
func as(user string) client.Client {
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	Expect(err).NotTo(HaveOccurred())
	return c
}

func bind(ns string, subject rbacv1.Subject, clusterRole string) {
	Expect(k8s.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: clusterRole + "-"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: clusterRole},
		Subjects:   []rbacv1.Subject{subject},
	})).To(Succeed())
}

// agentNamespace makes a namespace with a ServiceAccount "agent" holding
// the shipped agent role, a user "alice" holding the approver role, and the
// gateway allowed to act as the namespace's ServiceAccounts. It returns the
// namespace and the agent's username.
func agentNamespace() (string, string) {
	n := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "gw-"}}
	Expect(k8s.Create(ctx, n)).To(Succeed())
	Expect(k8s.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: n.Name, Name: "agent"}})).To(Succeed())
	bind(n.Name, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: n.Name, Name: "agent"}, "agent")
	bind(n.Name, rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "alice"}, "approver")
	bind(n.Name, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: "toolgate-system", Name: "gateway"}, "gateway-impersonator")
	return n.Name, fmt.Sprintf("system:serviceaccount:%s:agent", n.Name)
}

// bearer adds a token to every request.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}
