// Command standin-api stands in, inside the local cluster, for an external
// HTTPS API that a tool calls through toolgate's egress proxy (the e2e
// suite): it issues itself a certificate for its pod's address from the CA
// it is given, and answers "authorized" only to the bearer token it is
// given, "who are you" (401) to anything else. It logs nothing of what it
// is sent.
package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"flag"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

func main() {
	var caCert, caKey, tokenFile, addr, ip string
	flag.StringVar(&caCert, "ca-cert", "/etc/standin/ca/tls.crt", "the CA's certificate (PEM)")
	flag.StringVar(&caKey, "ca-key", "/etc/standin/ca/tls.key", "the CA's key (PEM)")
	flag.StringVar(&tokenFile, "token-file", "/etc/standin/token/token", "the bearer token it accepts")
	flag.StringVar(&addr, "bind-address", ":8443", "where it serves HTTPS")
	flag.StringVar(&ip, "ip", os.Getenv("POD_IP"), "the address its certificate names (default $POD_IP)")
	flag.Parse()
	if err := run(caCert, caKey, tokenFile, addr, ip); err != nil {
		fmt.Fprintln(os.Stderr, "standin-api:", err)
		os.Exit(1)
	}
}

func run(caCert, caKey, tokenFile, addr, ip string) error {
	ca, err := tls.LoadX509KeyPair(caCert, caKey)
	if err != nil {
		return err
	}
	caX509, err := x509.ParseCertificate(ca.Certificate[0])
	if err != nil {
		return err
	}
	token, err := os.ReadFile(tokenFile)
	if err != nil {
		return err
	}
	want := "Bearer " + strings.TrimSpace(string(token))
	addrIP := net.ParseIP(ip)
	if addrIP == nil {
		return fmt.Errorf("no address to certify (-ip or $POD_IP): %q", ip)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "standin-api"},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{addrIP}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, leaf, caX509, &key.PublicKey, ca.PrivateKey)
	if err != nil {
		return err
	}
	srv := &http.Server{
		Addr:              addr,
		ReadHeaderTimeout: 10 * time.Second,
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}, MinVersion: tls.VersionTLS12},
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), []byte(want)) == 1 {
				_, _ = io.WriteString(w, "authorized\n")
				return
			}
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, "who are you\n")
		}),
	}
	return srv.ListenAndServeTLS("", "")
}
