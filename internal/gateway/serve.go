package gateway

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"sync"
	"time"
)

// Timeouts of the gateway's HTTP server. A request's answer may take as
// long as its call (CallTimeout), so there is no write timeout; reading a
// request, and an idle connection, are bounded so that clients holding
// connections open cost nothing for long.
const (
	readHeaderTimeout = 10 * time.Second
	// readTimeout covers a whole request body (MaxRequestBytes).
	readTimeout    = 30 * time.Second
	idleTimeout    = 90 * time.Second
	maxHeaderBytes = 64 << 10
)

// NewServer is the HTTP server of handler at addr, with the gateway's
// timeouts and header bound.
func NewServer(addr string, handler http.Handler) *http.Server {
	return &http.Server{
		Addr: addr, Handler: handler,
		ReadHeaderTimeout: readHeaderTimeout, ReadTimeout: readTimeout, IdleTimeout: idleTimeout,
		MaxHeaderBytes: maxHeaderBytes,
	}
}

// CertReloader serves the certificate in certFile and keyFile, read again
// when either file changes (a Secret's mounted files are replaced when the
// certificate is renewed), so renewal needs no restart. A pair that cannot
// be read keeps the last good one.
type CertReloader struct {
	certFile, keyFile string

	mu     sync.Mutex
	cert   *tls.Certificate
	stamps [2]time.Time
}

// NewCertReloader reads the pair once; an unreadable pair is an error.
func NewCertReloader(certFile, keyFile string) (*CertReloader, error) {
	r := &CertReloader{certFile: certFile, keyFile: keyFile}
	if err := r.load(); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *CertReloader) load() error {
	stamps, err := r.modified()
	if err != nil {
		return err
	}
	cert, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		return fmt.Errorf("loading the TLS certificate: %w", err)
	}
	r.cert, r.stamps = &cert, stamps
	return nil
}

func (r *CertReloader) modified() ([2]time.Time, error) {
	var stamps [2]time.Time
	for i, f := range []string{r.certFile, r.keyFile} {
		st, err := os.Stat(f)
		if err != nil {
			return stamps, fmt.Errorf("reading the TLS certificate: %w", err)
		}
		stamps[i] = st.ModTime()
	}
	return stamps, nil
}

// GetCertificate is a tls.Config's GetCertificate.
func (r *CertReloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if stamps, err := r.modified(); err == nil && stamps != r.stamps {
		_ = r.load() // a half-written pair: the last good one until it is whole
	}
	return r.cert, nil
}

// TLSConfig is the gateway's TLS configuration: TLS 1.2 at least, the
// certificate from r.
func (r *CertReloader) TLSConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: r.GetCertificate}
}
