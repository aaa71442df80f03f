//go:build e2e

package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"regexp"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// egressProfile's tools name hosts (fmt verbs: the API's address, its CA
// bundle, the API's address again, then the plain server's address four
// times). fetch asks the API in absolute form through the proxy, which
// adds the credential over its own TLS, and prints its own environment;
// fetch_unnamed asks the API from a tool that names only the plain
// server; tunnel sends CONNECT for the target it is given, with or
// without its grant, and prints the proxy's first answer line; direct
// bypasses the proxy.
const egressProfile = `
apiVersion: toolgate.dev/v1alpha1
kind: ToolProfile
metadata: {name: e2e-egress}
spec:
  permissionPreset: Trusted
  mcpServers:
    # An MCP server whose one tool GETs the API: wget honours the proxy
    # environment the body is handed with its call.
    - name: fetcher
      container:
        image: toolgate.dev/tools:dev
        command:
          - /bin/sh
          - -c
          - |
            while IFS= read -r line; do
              id=$(printf '%%s' "$line" | sed -n 's/^{"jsonrpc":"2.0","id":\([0-9]*\).*/\1/p')
              case "$line" in
              *'"method":"initialize"'*) printf '{"jsonrpc":"2.0","id":%%s,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"fetcher","version":"1"}}}\n' "$id" ;;
              *'"method":"tools/list"'*) printf '{"jsonrpc":"2.0","id":%%s,"result":{"tools":[{"name":"fetch","description":"GET the API.","inputSchema":{"type":"object"}}]}}\n' "$id" ;;
              *'"method":"tools/call"'*) r=$(wget -q -O - http://%[1]s:8443/ 2>&1 | head -n 1 | tr -cd 'a-z0-9 '); printf '{"jsonrpc":"2.0","id":%%s,"result":{"content":[{"type":"text","text":"%%s"}]}}\n' "$id" "$r" ;;
              esac
            done
  tools:
    - name: fetch_mcp
      description: GET the API through the egress proxy, from an MCP server's tool.
      mcp: {server: fetcher, tool: fetch}
      parameters: {type: object}
      output: {schema: {type: string}, render: {format: Text}}
      timeoutSeconds: 30
      egress:
        hosts:
          - host: "%[1]s"
            ports: [8443]
            caBundle: |
%[2]s
        credentials:
          - host: "%[1]s"
            secretRef: {name: api-token, key: token}
            format: "Bearer {{value}}"
    - name: fetch
      description: GET the API through the egress proxy, then print the environment.
      parameters: {type: object}
      output: {schema: {type: string}, render: {format: Text}}
      container:
        image: toolgate.dev/tools:dev
        command: [/bin/sh, -c, 'wget -q -O - http://%[1]s:8443/ 2>&1; echo ---; env']
      timeoutSeconds: 30
      egress:
        hosts:
          - host: "%[1]s"
            ports: [8443]
            caBundle: |
%[2]s
        credentials:
          - host: "%[1]s"
            secretRef: {name: api-token, key: token}
            format: "Bearer {{value}}"
    - name: fetch_unnamed
      description: GET the API from a tool that does not name it.
      parameters: {type: object}
      output: {schema: {type: string}, render: {format: Text}}
      container:
        image: toolgate.dev/tools:dev
        command: [/bin/sh, -c, 'wget -q -O - http://%[1]s:8443/ 2>&1; true']
      timeoutSeconds: 30
      egress:
        hosts: [{host: "%[3]s", ports: [8080]}]
    - name: tunnel
      description: CONNECT to a target through the egress proxy and print the first line of its answer.
      parameters: {type: object}
      output: {schema: {type: string}, render: {format: Text}}
      container:
        image: toolgate.dev/tools:dev
        command:
          - /bin/sh
          - -c
          - |
            a=$(cat)
            t=$(echo "$a" | sed -n 's/.*"target":"\([^"]*\)".*/\1/p')
            p=${http_proxy#http://toolgate:}; tok=${p%%@*}; hp=${p##*@}
            auth="Proxy-Authorization: Bearer $tok"
            case "$a" in *'"auth":false'*) auth="X-Nothing: 1";; esac
            # The connection stays open while the proxy answers, as a
            # client's does: one closed at once is a client gone. What is
            # checked is the proxy's answer; a connection that got none at
            # all is made once more (a CI run on the two-node cluster once
            # saw one call's CONNECT never reach the proxy, the tool's
            # await of it passed; not reproduced). So is one the proxy
            # could not connect on (502): a CI run saw the target, a pod
            # started a few seconds before on the other node, not reached
            # yet.
            for try in 1 2 3; do
              r=$({ printf 'CONNECT %%s HTTP/1.1\r\nHost: %%s\r\n%%s\r\n\r\n' "$t" "$t" "$auth"; sleep 2; } | nc -w 3 "${hp%%:*}" "${hp##*:}" | head -n 1 | tr -d '\r')
              [ -n "$r" ] && [ "$r" != "HTTP/1.1 502 Bad Gateway" ] && break
              sleep 1
            done
            echo "$r"
      isConcurrencySafe: "true"
      timeoutSeconds: 30
      egress:
        hosts: [{host: "%[3]s", ports: [8080]}]
    - name: direct
      description: Open a TCP connection to the plain server without the proxy, and say whether it connected.
      parameters: {type: object}
      output: {schema: {type: string}, render: {format: Text}}
      container:
        image: toolgate.dev/tools:dev
        command: [/bin/sh, -c, 'if nc -w 3 %[3]s 8080 -e /bin/true 2>/dev/null; then echo reached; else echo unreachable; fi']
      timeoutSeconds: 30
      egress:
        hosts: [{host: "%[3]s", ports: [8080]}]
`

// The egress proxy on a cluster that enforces NetworkPolicy: an in-cluster
// HTTPS API (test/standin-api, with a CA of its own) stands in for an
// external one, and a plain HTTP server for another host. Every address
// involved is a pod this spec made, or the proxy's.
var _ = Describe("egress per tool, by host, through the egress proxy", func() {
	It("reaches the hosts a tool names and nothing else, and adds a credential its pod never holds", func() {
		By("the proxy is ready")
		Eventually(func() int32 {
			d := &appsv1.Deployment{}
			if err := clients[userAdmin].Get(ctx, client.ObjectKey{Namespace: "toolgate-system", Name: "toolgate-egress"}, d); err != nil {
				return 0
			}
			return d.Status.ReadyReplicas
		}, 120*time.Second, time.Second).Should(BeNumerically(">=", 1), "the egress proxy's Deployment has a ready replica")

		By("an HTTPS API that answers only its bearer token, and a plain server, each a pod of another namespace")
		const secretToken = "e2e-egress-credential-7f3a"
		caPEM, caKeyPEM := newCA()
		target := newNamespace("egress-target")
		Expect(target.Admin.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "ca"}, Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{corev1.TLSCertKey: caPEM, corev1.TLSPrivateKeyKey: caKeyPEM}})).To(Succeed())
		Expect(target.Admin.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "token"},
			Data: map[string][]byte{"token": []byte(secretToken)}})).To(Succeed())
		api := restrictedPod("api", "/bin/standin-api")
		api.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}}}
		api.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "ca", MountPath: "/etc/standin/ca"}, {Name: "token", MountPath: "/etc/standin/token"}}
		api.Spec.Containers[0].ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8443)}}, PeriodSeconds: 1}
		api.Spec.Volumes = []corev1.Volume{
			{Name: "ca", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "ca", DefaultMode: ptr.To[int32](0o444)}}},
			{Name: "token", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "token", DefaultMode: ptr.To[int32](0o444)}}},
		}
		Expect(target.Admin.Create(ctx, api)).To(Succeed())
		plain := restrictedPod("plain", "/bin/httpd", "-f", "-p", "8080", "-h", "/")
		plain.Spec.Containers[0].ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8080)}}, PeriodSeconds: 1}
		Expect(target.Admin.Create(ctx, plain)).To(Succeed())
		apiIP, plainIP := runningIP(target, "api"), runningIP(target, "plain")
		for _, name := range []string{"api", "plain"} {
			Eventually(func() bool {
				for _, c := range target.Pod(name).Status.Conditions {
					if c.Type == corev1.PodReady {
						return c.Status == corev1.ConditionTrue
					}
				}
				return false
			}, 60*time.Second, 200*time.Millisecond).Should(BeTrue(), "%s serves", name)
		}

		By("a profile whose tools name them, and the credential's Secret, which only the proxy may read")
		ns := newAgentNamespace("egress")
		ns.Apply(userAdmin, fmt.Sprintf(`
apiVersion: v1
kind: Secret
metadata: {name: api-token}
stringData: {token: %q}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: egress-credentials}
rules:
  - {apiGroups: [""], resources: [secrets], resourceNames: [api-token], verbs: [get]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: egress-credentials}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: egress-credentials}
subjects: [{kind: ServiceAccount, name: toolgate-egress, namespace: toolgate-system}]
`, secretToken))
		ns.Apply(userAdmin, fmt.Sprintf(egressProfile, apiIP, indent(string(caPEM), 14), plainIP))
		ns.ProfileReady("e2e-egress")
		p := &toolgatev1alpha1.ToolProfile{}
		Expect(ns.Admin.Get(ctx, client.ObjectKey{Name: "e2e-egress"}, p)).To(Succeed())
		Expect(p.Status.Tools).To(HaveLen(5))
		for _, tool := range p.Status.Tools {
			Expect(tool.Network).To(Equal("hosts"), "tool %s", tool.Name)
			if tool.Name == "fetch" {
				Expect(tool.EgressHosts).To(Equal([]string{apiIP + ":8443 (credential)"}))
			}
		}

		ns.OpenSession("eg", "e2e-egress")
		ns.Submit(call{"fetch", "fetch", `{}`})
		ns.Submit(call{"fetch-mcp", "fetch_mcp", `{}`})
		ns.Submit(call{"fetch-unnamed", "fetch_unnamed", `{}`})
		ns.Submit(
			call{"tunnel-named", "tunnel", fmt.Sprintf(`{"target":"%s:8080","auth":true}`, plainIP)},
			call{"tunnel-other-port", "tunnel", fmt.Sprintf(`{"target":"%s:8081","auth":true}`, plainIP)},
			call{"tunnel-unnamed", "tunnel", fmt.Sprintf(`{"target":"%s:8443","auth":true}`, apiIP)},
			call{"tunnel-no-grant", "tunnel", fmt.Sprintf(`{"target":"%s:8080","auth":false}`, plainIP)},
		)
		ns.Submit(call{"direct", "direct", `{}`})

		By("the credentialed host answers the proxy's request, and the pod never held the credential")
		res := ns.Committed("fetch").Status.Result
		Expect(res.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded), res.Message)
		Expect(res.Content).To(HavePrefix("authorized\n---\n"), "the API answered the proxy's request with its credential")
		Expect(res.Content).NotTo(ContainSubstring(secretToken), "the tool's environment holds the credential")
		Expect(res.Content).To(ContainSubstring("http_proxy=http://toolgate:"), "the body was handed its proxy")

		mcp := ns.Committed("fetch-mcp").Status.Result
		Expect(mcp.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded), mcp.Message)
		Expect(mcp.Content).To(Equal("authorized"), "an MCP server's tool reaches its API with the credential the proxy adds")

		By("a host the tool does not name is refused, by the proxy or by the tool pod's NetworkPolicy")
		Expect(ns.Committed("fetch-unnamed").Status.Result.Content).To(ContainSubstring("403"), "the API, from a tool that does not name it")
		for name, want := range map[string]string{
			"tunnel-named":      "HTTP/1.1 200 Connection established",
			"tunnel-other-port": "HTTP/1.1 403 Forbidden",
			"tunnel-unnamed":    "HTTP/1.1 403 Forbidden",
			"tunnel-no-grant":   "HTTP/1.1 407 Proxy Authentication Required",
		} {
			r := ns.Committed(name).Status.Result
			Expect(r.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded), "%s: %s", name, r.Message)
			Expect(strings.TrimSpace(r.Content)).To(Equal(want), name)
		}
		Expect(ns.Committed("direct").Status.Result.Content).To(Equal("unreachable\n"), "a tool that names its hosts reaches nothing but the proxy")

		By("each call's trace holds the proxy's record of its requests")
		for name, want := range map[string][2]string{
			"fetch":             {"CredentialInjected", fmt.Sprintf("injected: %s port 8443, the tool's credential added by the proxy (tool fetch)", apiIP)},
			"fetch-mcp":         {"CredentialInjected", fmt.Sprintf("injected: %s port 8443, the tool's credential added by the proxy (tool fetch_mcp)", apiIP)},
			"fetch-unnamed":     {"EgressRefused", fmt.Sprintf("host_refused: %s port 8443 (tool fetch_unnamed)", apiIP)},
			"tunnel-named":      {"EgressReached", fmt.Sprintf("tunnelled: %s port 8080 (tool tunnel)", plainIP)},
			"tunnel-other-port": {"EgressRefused", fmt.Sprintf("port_refused: %s port 8081 (tool tunnel)", plainIP)},
		} {
			Eventually(func() string {
				out, _ := kubectl(userAdmin, "", "toolgate", "--kubeconfig", kubeconfig(userAdmin), "-n", ns.Name, "trace", name)
				return out
			}, 30*time.Second, time.Second).Should(MatchRegexp(`\b1\s+`+regexp.QuoteMeta(want[0])+`\s+`+regexp.QuoteMeta(want[1])), name)
		}
		out, err := kubectl(userAdmin, "", "toolgate", "--kubeconfig", kubeconfig(userAdmin), "-n", ns.Name, "trace", "fetch")
		Expect(err).NotTo(HaveOccurred())
		Expect(out).NotTo(ContainSubstring(secretToken), "the trace holds the credential")
	})
})

// newCA is a CA certificate and key (PEM) for the stand-in API.
func newCA() ([]byte, []byte) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	Expect(err).NotTo(HaveOccurred())
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "e2e egress CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	Expect(err).NotTo(HaveOccurred())
	keyDER, err := x509.MarshalECPrivateKey(key)
	Expect(err).NotTo(HaveOccurred())
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}

// indent prefixes every line of s with n spaces (a YAML block scalar).
func indent(s string, n int) string {
	pad := strings.Repeat(" ", n)
	return pad + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n"+pad)
}
