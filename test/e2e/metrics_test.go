//go:build e2e

package e2e

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolgate/toolgate/internal/testenv"
)

// scrape GETs a manager pod's metrics with token ("" for none), as a
// scraper on the pod network would (the manager's certificate is its own,
// made at start).
func scrape(podIP, token string) (int, string) {
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the manager's self-made certificate
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("https://%s:8080/metrics", podIP), nil)
	Expect(err).NotTo(HaveOccurred())
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	Expect(err).NotTo(HaveOccurred())
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	Expect(err).NotTo(HaveOccurred())
	return resp.StatusCode, string(body)
}

// managerPods are the manager's pods' addresses.
func managerPods() []string {
	pods := &corev1.PodList{}
	Expect(clients[userAdmin].List(ctx, pods, client.InNamespace(systemNamespace), client.MatchingLabels{"control-plane": "controller-manager"})).To(Succeed())
	var ips []string
	for _, p := range pods.Items {
		if p.Status.PodIP != "" && p.DeletionTimestamp == nil {
			ips = append(ips, p.Status.PodIP)
		}
	}
	Expect(ips).NotTo(BeEmpty())
	return ips
}

// seriesRead are the metric names the shipped alerts and dashboard query
// (but up, which Prometheus makes, and the egress proxy's, scraped from
// its own pods).
func seriesRead() []string {
	seen := map[string]bool{}
	var names []string
	for _, f := range []string{"alerts.yaml", "dashboard.json"} {
		raw, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "charts", "toolgate", "files", f))
		Expect(err).NotTo(HaveOccurred())
		for _, n := range regexp.MustCompile(`\b(toolgate_[a-z_]+|leader_election_master_status|workqueue_depth)\b`).FindAllString(string(raw), -1) {
			if !seen[n] && !strings.HasPrefix(n, "toolgate_egress_") {
				seen[n] = true
				names = append(names, n)
			}
		}
	}
	return names
}

// Metrics are on in the local install, as in every install: served over
// HTTPS to scrapers the API server authenticates and authorizes, and
// every series the shipped alerts and dashboard read is there.
var _ = Describe("the manager's metrics", func() {
	It("are served to a scraper allowed get /metrics only, and carry every series the alerts and the dashboard read", func() {
		ns := newAgentNamespace("metrics")
		for _, sa := range []string{"scraper", "nosy"} {
			Expect(ns.Admin.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}})).To(Succeed())
		}
		binding := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: ns.Name + "-scraper"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "toolgate-metrics-reader"},
			Subjects:   []rbacv1.Subject{serviceAccountSubject(ns.Name, "scraper")},
		}
		Expect(clients[userAdmin].Create(ctx, binding)).To(Succeed())
		DeferCleanup(func() { _ = clients[userAdmin].Delete(ctx, binding) })
		token := func(sa string) string {
			tr, err := clientset.CoreV1().ServiceAccounts(ns.Name).CreateToken(ctx, sa, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
			Expect(err).NotTo(HaveOccurred())
			return tr.Status.Token
		}
		scraper, nosy := token("scraper"), token("nosy")

		By("nobody else reads them")
		ip := managerPods()[0]
		code, _ := scrape(ip, "")
		Expect(code).To(Equal(http.StatusUnauthorized), "no token")
		Eventually(func() int { code, _ := scrape(ip, nosy); return code }, 30*time.Second, time.Second).Should(Equal(http.StatusForbidden), "a token without the role")
		Eventually(func() int { code, _ := scrape(ip, scraper); return code }, 30*time.Second, time.Second).Should(Equal(http.StatusOK), "toolgate-metrics-reader")

		By("a question waiting shows, by namespace")
		ns.Apply(userAdmin, `
apiVersion: toolgate.dev/v1alpha1
kind: ToolProfile
metadata: {name: e2e-metrics}
spec:
  permissionPreset: Restricted
  tools:
    - name: write_note
      description: Print the arguments.
      parameters: {type: object}
      output: {schema: {type: string}, render: {format: Text}}
      container: {image: toolgate.dev/tools:dev, command: [/bin/cat]}
  preExecute:
    - {name: ask-all, action: Ask}
  sandbox: {mode: WorkspaceWrite, provider: Pod, resources: {memory: 64Mi}}
`)
		ns.ProfileReady("e2e-metrics")
		ns.OpenSession("m", "e2e-metrics")
		ns.Submit(call{"asked", "write_note", `{"note":"hello"}`})
		all := func() string {
			var b strings.Builder
			for _, ip := range managerPods() {
				code, body := scrape(ip, scraper)
				Expect(code).To(Equal(http.StatusOK))
				b.WriteString(body)
			}
			return b.String()
		}
		var waiting string
		Eventually(func() string { waiting = all(); return waiting }, 60*time.Second, time.Second).Should(
			MatchRegexp(`(?m)^toolgate_approval_requests_pending\{namespace="%s"\} 1$`, ns.Name))
		Expect(waiting).To(MatchRegexp(`(?m)^toolgate_approval_oldest_pending_seconds\{namespace="%s"\} \d`, ns.Name))

		By("once the call ran, every series the alerts and the dashboard read is served")
		Eventually(func() error {
			_, err := kubectl(userApprover, "", "toolgate", "approve", "asked", "--question", ns.Question("asked"), "-n", ns.Name, "--kubeconfig", kubeconfig(userApprover))
			return err
		}, 60*time.Second, time.Second).Should(Succeed())
		Expect(ns.Committed("asked").Status.Result.Outcome).To(BeEquivalentTo("Succeeded"))
		Eventually(func() []string {
			// The series of a waiting question, as scraped while it waited.
			body := waiting + all()
			var missing []string
			for _, n := range seriesRead() {
				if !regexp.MustCompile(`(?m)^` + n + `[{ ]`).MatchString(body) {
					missing = append(missing, n)
				}
			}
			return missing
		}, 60*time.Second, 2*time.Second).Should(BeEmpty(), "series the alerts or the dashboard read, not served")
		Expect(all()).To(MatchRegexp(`(?m)^leader_election_master_status\{name="toolgate-manager.toolgate.dev"\} 1$`), "one replica leads")
	})
})
