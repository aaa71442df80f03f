package gateway

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// writePair writes a self-signed certificate for 127.0.0.1 named cn, and
// returns it.
func writePair(t *testing.T, dir, cn string) *x509.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// TestServesTLSAndPicksUpARenewedCertificate: the gateway's server speaks
// TLS with the mounted pair, and a renewed pair is served on the next
// connection without a restart; a pair half written keeps the last one.
func TestServesTLSAndPicksUpARenewedCertificate(t *testing.T) {
	dir := t.TempDir()
	first := writePair(t, dir, "first")
	r, err := NewCertReloader(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer("127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }))
	srv.TLSConfig = r.TLSConfig()
	ln, err := net.Listen("tcp", srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() { _ = srv.Close() })
	served := func(trusted *x509.Certificate) string {
		t.Helper()
		pool := x509.NewCertPool()
		pool.AddCert(trusted)
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, DisableKeepAlives: true}}
		resp, err := c.Get("https://" + ln.Addr().String() + "/")
		if err != nil {
			t.Fatalf("a client trusting %s: %v", trusted.Subject.CommonName, err)
		}
		defer func() { _ = resp.Body.Close() }()
		return resp.TLS.PeerCertificates[0].Subject.CommonName
	}
	if cn := served(first); cn != "first" {
		t.Fatalf("served %s, want first", cn)
	}
	// Renewed: new files (a later modification time).
	time.Sleep(10 * time.Millisecond)
	second := writePair(t, dir, "second")
	if cn := served(second); cn != "second" {
		t.Fatalf("served %s after renewal, want second", cn)
	}
	// Half written: the key file is garbage for a moment.
	if err := os.WriteFile(filepath.Join(dir, "tls.key"), []byte("partial"), 0o600); err != nil {
		t.Fatal(err)
	}
	if cn := served(second); cn != "second" {
		t.Fatalf("served %s while the pair is half written, want the last good one", cn)
	}
	if srv.ReadTimeout == 0 || srv.IdleTimeout == 0 || srv.ReadHeaderTimeout == 0 || srv.MaxHeaderBytes == 0 {
		t.Fatalf("the server leaves a connection unbounded: %+v", srv)
	}
}
