package egress

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
)

// upstream is a TLS server standing in for an external API: it answers
// "authorized" only to the credential, and records what it was sent.
type upstream struct {
	*httptest.Server
	mu      sync.Mutex
	headers []http.Header
}

func (u *upstream) seen() []http.Header {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]http.Header(nil), u.headers...)
}

func newUpstream(t *testing.T, cert tls.Certificate) *upstream {
	u := &upstream{}
	u.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.headers = append(u.headers, r.Header.Clone())
		u.mu.Unlock()
		if r.Header.Get("Authorization") == "Bearer s3cret" {
			_, _ = io.WriteString(w, "authorized")
			return
		}
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, "who are you")
	}))
	u.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	u.StartTLS()
	t.Cleanup(u.Close)
	return u
}

// testCert is a self-signed certificate for names, and a pool trusting it.
func testCert(t *testing.T, names ...string) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "egress test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		DNSNames: names, IsCA: true, BasicConstraintsValid: true,
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(c)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pool
}

type fixedKeys [][]byte

func (k fixedKeys) Keys(context.Context, bool) [][]byte { return k }

type livePods map[string]bool // pod UID → live

func (l livePods) Live(_ context.Context, _ netip.Addr, uid string) bool { return l[uid] }

type secretMap map[string]string // namespace/name/key → value

func (s secretMap) Value(_ context.Context, ns, name, key string) ([]byte, error) {
	v, ok := s[ns+"/"+name+"/"+key]
	if !ok {
		return nil, errors.New("secrets \"" + name + "\" is forbidden")
	}
	return []byte(v), nil
}

type hostsResolver map[string]string

func (h hostsResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	a, ok := h[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return []netip.Addr{netip.MustParseAddr(a)}, nil
}

type fixture struct {
	key        []byte
	proxy      *Proxy
	proxyURL   string
	api, other *upstream
	apiPort    int32
	otherPort  int32
	pool       *x509.CertPool
	reg        *prometheus.Registry
	now        time.Time
}

func newFixture(t *testing.T) *fixture {
	cert, pool := testCert(t, "api.example.test", "other.example.test", "deep.wild.example.test", "private.example.test")
	f := &fixture{key: testKey("the test manager"), pool: pool, now: time.Now(), reg: prometheus.NewRegistry()}
	f.api, f.other = newUpstream(t, cert), newUpstream(t, cert)
	f.apiPort, f.otherPort = portOf(t, f.api.URL), portOf(t, f.other.URL)
	f.proxy = &Proxy{
		Keys: fixedKeys{f.key}, Pods: livePods{"pod-1": true, "pod-gone": false},
		Secrets:  secretMap{"agents/api-token/token": "s3cret\n"},
		Resolver: hostsResolver{"api.example.test": "127.0.0.1", "other.example.test": "127.0.0.1", "deep.wild.example.test": "127.0.0.1", "private.example.test": "10.1.2.3", "meta.example.test": "169.254.169.254"},
		Allowed:  []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("169.254.0.0/16")},
		RootCAs:  pool, Now: func() time.Time { return f.now }, Metrics: NewMetrics(f.reg), Log: logr.Discard(),
	}
	srv := httptest.NewServer(f.proxy)
	t.Cleanup(srv.Close)
	f.proxyURL = srv.URL
	return f
}

func portOf(t *testing.T, raw string) int32 {
	u, _ := url.Parse(raw)
	p, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatal(err)
	}
	return int32(p)
}

// grant is the call's grant: api.example.test with a credential, and
// other.example.test and *.wild.example.test without, on the test ports.
func (f *fixture) grant() Grant {
	return Grant{
		Namespace: "agents", Call: "c1", CallUID: "uid-1", Tool: "fetch", PodUID: "pod-1", PodIP: "127.0.0.1",
		Expires: f.now.Add(time.Minute).Unix(),
		Hosts: []Host{
			{Name: "api.example.test", Ports: []int32{f.apiPort}, Credential: &Credential{Header: "Authorization", Secret: "api-token", Key: "token", Format: "Bearer {{value}}"}},
			{Name: "other.example.test", Ports: []int32{f.otherPort}},
			{Name: "*.wild.example.test", Ports: []int32{f.otherPort}},
			{Name: "private.example.test", Ports: []int32{f.otherPort}},
			{Name: "meta.example.test", Ports: []int32{80}},
		},
	}
}

// client is a body's HTTP client with proxy credentials token ("": none).
func (f *fixture) client(t *testing.T, token string) *http.Client {
	u, _ := url.Parse(f.proxyURL)
	if token != "" {
		u.User = url.UserPassword("toolgate", token)
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		Proxy: http.ProxyURL(u), TLSClientConfig: &tls.Config{RootCAs: f.pool},
	}}
}

func (f *fixture) mint(t *testing.T, g Grant) string {
	t.Helper()
	tok, err := Mint(f.key, g)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// get is what a body sees for a GET of raw: the status and body, or the
// client's error (a refused CONNECT is one).
func get(c *http.Client, raw string, header ...string) (int, string, error) {
	req, err := http.NewRequest(http.MethodGet, raw, nil)
	if err != nil {
		return 0, "", err
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

func (f *fixture) counted(tool, verdict string) float64 {
	return promtest.ToFloat64(f.proxy.Metrics.requests.WithLabelValues(tool, verdict))
}

func TestACredentialIsAddedOnTheProxysOwnTLSToItsHostOnly(t *testing.T) {
	f := newFixture(t)
	c := f.client(t, f.mint(t, f.grant()))
	// The body asks in absolute form; a header it forges is replaced.
	status, body, err := get(c, fmt.Sprintf("http://api.example.test:%d/v1/things", f.apiPort), "Authorization", "Bearer forged")
	if err != nil || status != http.StatusOK || body != "authorized" {
		t.Fatalf("credentialed request: %d %q %v, want 200 authorized", status, body, err)
	}
	seen := f.api.seen()
	if len(seen) != 1 {
		t.Fatalf("the API saw %d requests, want 1", len(seen))
	}
	for _, h := range []string{"Proxy-Authorization", "X-Forwarded-For", "Forwarded", "Proxy-Connection"} {
		if v := seen[0].Get(h); v != "" {
			t.Errorf("the API was sent %s: %q", h, v)
		}
	}
	// Another host, through the same proxy and grant, never gets it.
	status, _, err = get(c, fmt.Sprintf("http://other.example.test:%d/", f.otherPort))
	if err != nil || status != http.StatusUnauthorized {
		t.Fatalf("other host: %d %v, want its own 401", status, err)
	}
	status, _, err = get(c, fmt.Sprintf("https://other.example.test:%d/", f.otherPort))
	if err != nil || status != http.StatusUnauthorized {
		t.Fatalf("other host tunnelled: %d %v, want its own 401", status, err)
	}
	for _, h := range f.other.seen() {
		if strings.Contains(fmt.Sprint(h), "s3cret") {
			t.Errorf("the other host was sent the credential: %v", h)
		}
	}
	if got := f.counted("fetch", VerdictInjected); got != 1 {
		t.Errorf("injected counted %v, want 1", got)
	}
	if got := f.counted("fetch", VerdictTunnelled); got != 1 {
		t.Errorf("tunnelled counted %v, want 1", got)
	}
}

func TestACredentialedHostIsNeverTunnelled(t *testing.T) {
	f := newFixture(t)
	c := f.client(t, f.mint(t, f.grant()))
	_, _, err := get(c, fmt.Sprintf("https://api.example.test:%d/", f.apiPort))
	if err == nil || !strings.Contains(err.Error(), "Forbidden") {
		t.Fatalf("CONNECT to a credentialed host: %v, want refused", err)
	}
	if len(f.api.seen()) != 0 {
		t.Fatal("the API was reached through a tunnel")
	}
	if got := f.counted("fetch", VerdictTunnelCred); got != 1 {
		t.Errorf("tunnel_refused counted %v, want 1", got)
	}
}

func TestOnlyTheGrantsHostsAndPortsAreReached(t *testing.T) {
	f := newFixture(t)
	c := f.client(t, f.mint(t, f.grant()))
	cases := []struct {
		name, url, verdict string
		want               int
	}{
		{"a wildcard's name", fmt.Sprintf("http://deep.wild.example.test:%d/", f.otherPort), "", http.StatusUnauthorized},
		{"a wildcard does not cover its own name", fmt.Sprintf("http://wild.example.test:%d/", f.otherPort), VerdictHost, http.StatusForbidden},
		{"an undeclared host", fmt.Sprintf("http://elsewhere.example.test:%d/", f.otherPort), VerdictHost, http.StatusForbidden},
		{"an address instead of the name", fmt.Sprintf("http://127.0.0.1:%d/", f.otherPort), VerdictHost, http.StatusForbidden},
		{"a declared host on another port", fmt.Sprintf("http://other.example.test:%d/", f.apiPort), VerdictPort, http.StatusForbidden},
		{"a name that resolves to a private address", fmt.Sprintf("http://private.example.test:%d/", f.otherPort), VerdictAddress, http.StatusForbidden},
		{"a name that resolves to the metadata address, allowed or not", "http://meta.example.test:80/", VerdictAddress, http.StatusForbidden},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := f.counted("fetch", tc.verdict)
			status, body, err := get(c, tc.url)
			if err != nil || status != tc.want {
				t.Fatalf("%s: %d %q %v, want %d", tc.url, status, body, err, tc.want)
			}
			if tc.verdict != "" {
				if !strings.HasPrefix(body, "toolgate egress: ") {
					t.Errorf("refusal body %q does not say who refused", body)
				}
				if got := f.counted("fetch", tc.verdict) - before; got != 1 {
					t.Errorf("%s counted %v more, want 1", tc.verdict, got)
				}
			}
			// The same destination tunnelled is refused the same way.
			u, _ := url.Parse(tc.url)
			u.Scheme = "https"
			_, _, err = get(c, u.String())
			if tc.verdict != "" && err == nil {
				t.Errorf("CONNECT %s was let through", u.Host)
			}
		})
	}
}

func TestAGrantIsBelievedOnlyFromItsLivePodBeforeItExpires(t *testing.T) {
	f := newFixture(t)
	other := testKey("another manager")
	wrongIP, gone, expired := f.grant(), f.grant(), f.grant()
	wrongIP.PodIP = "10.244.0.9"
	gone.PodUID = "pod-gone"
	expired.Expires = f.now.Add(-time.Second).Unix()
	forged, err := Mint(other, f.grant())
	if err != nil {
		t.Fatal(err)
	}
	tampered := f.mint(t, f.grant())
	tampered = tampered[:len(tampered)-2] + "AA"
	cases := []struct {
		name, token, verdict string
	}{
		{"no credentials", "", VerdictNoGrant},
		{"signed by another key", forged, VerdictNoGrant},
		{"tampered", tampered, VerdictNoGrant},
		{"from another address than its pod's", f.mint(t, wrongIP), VerdictWrongSource},
		{"its pod is gone", f.mint(t, gone), VerdictPodGone},
		{"expired", f.mint(t, expired), VerdictExpired},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := f.client(t, tc.token)
			status, _, err := get(c, fmt.Sprintf("http://api.example.test:%d/", f.apiPort))
			if err != nil || status != http.StatusProxyAuthRequired {
				t.Fatalf("absolute form: %d %v, want 407", status, err)
			}
			if _, _, err := get(c, fmt.Sprintf("https://other.example.test:%d/", f.otherPort)); err == nil {
				t.Fatal("CONNECT was let through")
			}
		})
	}
	if n := len(f.api.seen()) + len(f.other.seen()); n != 0 {
		t.Fatalf("the hosts saw %d requests of refused grants", n)
	}
}

func TestAnUnreadableCredentialSaysWhichSecret(t *testing.T) {
	f := newFixture(t)
	g := f.grant()
	g.Hosts[0].Credential.Secret = "missing"
	status, body, err := get(f.client(t, f.mint(t, g)), fmt.Sprintf("http://api.example.test:%d/", f.apiPort))
	if err != nil || status != http.StatusBadGateway || !strings.Contains(body, "Secret agents/missing, key token") {
		t.Fatalf("%d %q %v, want 502 naming the Secret", status, body, err)
	}
	if len(f.api.seen()) != 0 {
		t.Fatal("the request went on without its credential")
	}
}

func TestARequestNotForAProxyIsRefused(t *testing.T) {
	f := newFixture(t)
	req, _ := http.NewRequest(http.MethodGet, f.proxyURL+"/", nil)
	req.Header.Set("Proxy-Authorization", "Bearer "+f.mint(t, f.grant()))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("origin-form request: %d, want 400", resp.StatusCode)
	}
}

func TestPermitted(t *testing.T) {
	allowed := []netip.Prefix{netip.MustParsePrefix("10.96.200.0/24"), netip.MustParsePrefix("169.254.0.0/16"), netip.MustParsePrefix("fe80::/10")}
	for addr, want := range map[string]bool{
		"93.184.215.14": true, "2606:4700::1111": true, "10.96.200.7": true, "::ffff:10.96.200.7": true,
		"10.96.0.1": false, "192.0.2.2": false, "100.64.1.1": false, "172.20.0.1": false, "192.168.1.1": false,
		"127.0.0.1": false, "::1": false, "0.0.0.0": false, "169.254.169.254": false, "fe80::1": false,
		"fd00:ec2::254": false, "64:ff9b::a00:1": false, "224.0.0.1": false, "::ffff:169.254.169.254": false,
	} {
		if got := Permitted(netip.MustParseAddr(addr), allowed); got != want {
			t.Errorf("Permitted(%s) = %v, want %v", addr, got, want)
		}
	}
}

func TestAHostsOwnCABundleIsTrustedForItAlone(t *testing.T) {
	f := newFixture(t)
	f.proxy.RootCAs = x509.NewCertPool() // trusts nothing of its own
	ca := pemOf(t, f.api)
	g := f.grant()
	g.Hosts[0].CABundle = ca
	status, body, err := get(f.client(t, f.mint(t, g)), fmt.Sprintf("http://api.example.test:%d/", f.apiPort))
	if err != nil || status != http.StatusOK || body != "authorized" {
		t.Fatalf("with the host's CA bundle: %d %q %v, want 200 authorized", status, body, err)
	}
	// Without it the proxy's own roots decide, and they trust nothing.
	g.Hosts[0].CABundle = ""
	status, _, err = get(f.client(t, f.mint(t, g)), fmt.Sprintf("http://api.example.test:%d/", f.apiPort))
	if err != nil || status != http.StatusBadGateway {
		t.Fatalf("without it: %d %v, want 502", status, err)
	}
	g.Hosts[0].CABundle = "not a certificate"
	status, body, err = get(f.client(t, f.mint(t, g)), fmt.Sprintf("http://api.example.test:%d/", f.apiPort))
	if err != nil || status != http.StatusBadGateway || !strings.Contains(body, "caBundle") {
		t.Fatalf("a bundle with no certificate: %d %q %v, want 502 naming it", status, body, err)
	}
}

// pemOf is the PEM of the certificate u serves.
func pemOf(t *testing.T, u *upstream) string {
	t.Helper()
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: u.TLS.Certificates[0].Certificate[0]}))
}

// TestARefusalClosesTheConnection: a client refused is not kept waiting on
// a connection it has nothing more to send on (a tool's nc waited until
// its timeout).
func TestARefusalClosesTheConnection(t *testing.T) {
	f := newFixture(t)
	u, _ := url.Parse(f.proxyURL)
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	req := fmt.Sprintf("CONNECT other.example.test:1 HTTP/1.1\r\nHost: other.example.test:1\r\nProxy-Authorization: Bearer %s\r\n\r\n", f.mint(t, f.grant()))
	if _, err := io.WriteString(conn, req); err != nil {
		t.Fatal(err)
	}
	all, err := io.ReadAll(conn) // until the proxy closes it
	if err != nil {
		t.Fatalf("the proxy kept the connection open after its refusal: %v (read %q)", err, all)
	}
	if !strings.HasPrefix(string(all), "HTTP/1.1 403") {
		t.Fatalf("answer %q, want 403", all)
	}
}

// An IPv6 address is a host like a name: reached however the body writes
// it, and only the address the grant names.
func TestAnIPv6HostIsReachedByItsAddress(t *testing.T) {
	ln, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback here: %v", err)
	}
	defer func() { _ = ln.Close() }()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = io.WriteString(c, "hello over v6\n")
			_ = c.Close()
		}
	}()
	port := int32(ln.Addr().(*net.TCPAddr).Port)
	f := newFixture(t)
	f.proxy.Allowed = append(f.proxy.Allowed, netip.MustParsePrefix("::1/128"))
	g := f.grant()
	g.Hosts = append(g.Hosts, Host{Name: "::1", Ports: []int32{port}})
	token := f.mint(t, g)
	u, _ := url.Parse(f.proxyURL)
	connect := func(target string) string {
		conn, err := net.Dial("tcp", u.Host)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = conn.Close() }()
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: Bearer %s\r\n\r\n", target, target, token)
		all, _ := io.ReadAll(conn)
		return string(all)
	}
	for _, target := range []string{fmt.Sprintf("[::1]:%d", port), fmt.Sprintf("[0:0::1]:%d", port)} {
		if got := connect(target); !strings.HasPrefix(got, "HTTP/1.1 200") || !strings.Contains(got, "hello over v6") {
			t.Errorf("CONNECT %s: %q", target, got)
		}
	}
	if got := connect(fmt.Sprintf("[::2]:%d", port)); !strings.HasPrefix(got, "HTTP/1.1 403") {
		t.Errorf("CONNECT to an address the grant does not name: %q", got)
	}
}

// TestNoMethodThatMayEchoGetsACredential: TRACE and TRACK (in any case)
// are refused whatever the host, and a credential is added only to the
// standard methods: a host that echoes a request (TRACE, or a method of
// its own) never returns the credential to the body.
func TestNoMethodThatMayEchoGetsACredential(t *testing.T) {
	f := newFixture(t)
	c := f.client(t, f.mint(t, f.grant()))
	api, other := fmt.Sprintf("http://api.example.test:%d/", f.apiPort), fmt.Sprintf("http://other.example.test:%d/", f.otherPort)
	refused := func(m, host string) {
		t.Helper()
		req, err := http.NewRequest(m, host, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("%s %s: %d, want 405", m, host, resp.StatusCode)
		}
	}
	for _, m := range []string{"TRACE", "trace", "Track", "TRACK"} {
		refused(m, api)
		refused(m, other)
	}
	for _, m := range []string{"ECHO", "PROPFIND", "DEBUG"} {
		refused(m, api) // a credentialed host
	}
	for _, h := range append(f.api.seen(), f.other.seen()...) {
		if strings.Contains(fmt.Sprint(h), "s3cret") {
			t.Fatalf("a host was sent the credential: %v", h)
		}
	}
	if len(f.api.seen()) != 0 {
		t.Fatalf("the credentialed host saw %d requests", len(f.api.seen()))
	}
	if got := f.counted("fetch", VerdictMethod); got != 11 {
		t.Errorf("method_refused counted %v, want 11", got)
	}
}

// TestOneCallHoldsABoundedShareOfTheProxy: a call's pod holds at most
// MaxPerCall tunnels and requests at once; the next is refused (429, busy)
// while another call's pod is still served, and a closed tunnel frees its
// place.
func TestOneCallHoldsABoundedShareOfTheProxy(t *testing.T) {
	f := newFixture(t)
	f.proxy.MaxPerCall = 3
	grant := f.grant()
	token := f.mint(t, grant)
	open := func(tok string) (net.Conn, int) {
		t.Helper()
		conn, err := net.Dial("tcp", strings.TrimPrefix(f.proxyURL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		auth := base64.StdEncoding.EncodeToString([]byte("x:" + tok))
		fmt.Fprintf(conn, "CONNECT other.example.test:%d HTTP/1.1\r\nHost: other.example.test:%d\r\nProxy-Authorization: Basic %s\r\n\r\n", f.otherPort, f.otherPort, auth)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		return conn, resp.StatusCode
	}
	var held []net.Conn
	for range 3 {
		c, status := open(token)
		if status != http.StatusOK {
			t.Fatalf("tunnel %d: %d", len(held)+1, status)
		}
		held = append(held, c)
	}
	c, status := open(token)
	_ = c.Close()
	if status != http.StatusTooManyRequests {
		t.Fatalf("a fourth tunnel of one call: %d, want 429", status)
	}
	if got := f.counted("fetch", VerdictBusy); got != 1 {
		t.Errorf("busy counted %v, want 1", got)
	}
	// Another call's pod is served meanwhile.
	other := grant
	other.PodUID, other.Call = "pod-2", "other-call"
	f.proxy.Pods = livePods{"pod-1": true, "pod-2": true}
	c, status = open(f.mint(t, other))
	_ = c.Close()
	if status != http.StatusOK {
		t.Fatalf("another call's tunnel: %d", status)
	}
	// A closed tunnel frees its place.
	_ = held[0].Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, status = open(token)
		_ = c.Close()
		if status == http.StatusOK || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if status != http.StatusOK {
		t.Fatalf("after one closed: %d", status)
	}
	for _, c := range held[1:] {
		_ = c.Close()
	}
}
