package egress

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
)

// Port is where the proxy listens.
const Port = 3128

// Verdicts, the metric's verdict label: what became of a request.
const (
	VerdictTunnelled    = "tunnelled"       // a CONNECT tunnel opened
	VerdictForwarded    = "forwarded"       // a request sent on, no credential
	VerdictInjected     = "injected"        // a request sent on with its credential
	VerdictNoGrant      = "no_grant"        // no proxy credentials, or not a grant toolgate signed
	VerdictExpired      = "expired"         // the grant expired
	VerdictWrongSource  = "wrong_source"    // the grant came from another address than its pod's
	VerdictPodGone      = "pod_gone"        // the grant's pod is gone or being deleted
	VerdictHost         = "host_refused"    // a host the grant does not name
	VerdictPort         = "port_refused"    // a named host, on a port it does not allow
	VerdictAddress      = "address_refused" // the host resolved to an address that is not public
	VerdictTunnelCred   = "tunnel_refused"  // a CONNECT to a host with a credential
	VerdictNotProxy     = "not_proxy"       // neither CONNECT nor a request in absolute form
	VerdictMethod       = "method_refused"  // TRACE or TRACK, or a method a credential is never added to
	VerdictBusy         = "busy"            // the call already holds as many connections as one may
	VerdictCredential   = "credential_unreadable"
	VerdictTunnelHost   = "tunnel_other_host" // a tunnel's TLS named another host than its CONNECT
	VerdictTunnelHTTP   = "tunnel_http"       // plain HTTP sent through a tunnel
	VerdictTunnelUnread = "tunnel_unreadable" // a tunnel's first message started as TLS and was not, or was too large
	VerdictUpstream     = "upstream_error"
)

// Pods tells whether the pod of a grant still serves it: the pod with
// that UID exists at that address and is not being deleted.
type Pods interface {
	Live(ctx context.Context, ip netip.Addr, uid string) bool
}

// Secrets reads a credential's value.
type Secrets interface {
	Value(ctx context.Context, namespace, name, key string) ([]byte, error)
}

// Keys are the grant-signing keys (current first); refresh asks for them
// to be read again (a grant signed by a key rotated in since).
type Keys interface {
	Keys(ctx context.Context, refresh bool) [][]byte
}

// Resolver resolves a host name (*net.Resolver is one).
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Proxy is the egress proxy's HTTP handler.
type Proxy struct {
	Keys    Keys
	Pods    Pods
	Secrets Secrets
	// Resolver resolves names (nil: net.DefaultResolver).
	Resolver Resolver
	// Allowed are ranges that are not public which the operator lets tools
	// reach (an in-cluster API).
	Allowed []netip.Prefix
	// RootCAs verify the hosts the proxy opens TLS to (nil: the system's).
	RootCAs *x509.CertPool
	// Now is the clock (nil: time.Now).
	Now     func() time.Time
	Metrics *Metrics
	// Events records verdicts on the call (nil: metrics only).
	Events Recorder
	Log    logr.Logger
	// MaxPerCall bounds the requests and tunnels one call's pod holds open
	// at once (0: DefaultMaxPerCall): the proxy is every tenant's, and
	// one call must not hold all its connections.
	MaxPerCall int

	once       sync.Once
	forwarder  *httputil.ReverseProxy
	mu         sync.Mutex
	transports map[[32]byte]*http.Transport // by the CA bundle's digest
	open       map[string]int               // connections held, by the grant's pod
}

// DefaultMaxPerCall is MaxPerCall's default: far more than a tool's body
// needs at once, far fewer than the proxy serves.
const DefaultMaxPerCall = 64

// hold counts one more connection of g's pod, unless it holds as many as
// one may; release gives it back.
func (p *Proxy) hold(g Grant) (release func(), ok bool) {
	limit := p.MaxPerCall
	if limit <= 0 {
		limit = DefaultMaxPerCall
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.open[g.PodUID] >= limit {
		return nil, false
	}
	if p.open == nil {
		p.open = map[string]int{}
	}
	p.open[g.PodUID]++
	return func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.open[g.PodUID]--; p.open[g.PodUID] <= 0 {
			delete(p.open, g.PodUID)
		}
	}, true
}

// errNotPermitted: a host's address is not one the proxy may reach.
var errNotPermitted = errors.New("not a public address")

func (p *Proxy) now() time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now()
}

// ServeHTTP serves one proxied request of a tool's body.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.once.Do(p.build)
	g, verdict, why := p.authorize(r)
	if verdict != "" {
		w.Header().Set("Proxy-Authenticate", `Basic realm="toolgate-egress"`)
		p.refuse(w, r, g, verdict, http.StatusProxyAuthRequired, why)
		return
	}
	release, ok := p.hold(g)
	if !ok {
		p.refuse(w, r, g, VerdictBusy, http.StatusTooManyRequests, fmt.Sprintf("tool %s's call already holds as many connections through the proxy as one call may; close one first", g.Tool))
		return
	}
	defer release()
	switch {
	case echoes(r.Method):
		// A host that answers TRACE (or TRACK) echoes the request it got,
		// headers included: with a credential added, the body would read it.
		p.refuse(w, r, g, VerdictMethod, http.StatusMethodNotAllowed, "TRACE and TRACK are refused: a host that answers them echoes the request, credentials included")
	case r.Method == http.MethodConnect:
		p.tunnel(w, r, g)
	case r.URL.IsAbs() && r.URL.Host != "":
		p.forward(w, r, g)
	default:
		p.refuse(w, r, g, VerdictNotProxy, http.StatusBadRequest, "this is toolgate's egress proxy: send CONNECT, or a request in absolute form (http://host/path)")
	}
}

// authorize finds the request's grant and checks it came from its pod.
func (p *Proxy) authorize(r *http.Request) (Grant, string, string) {
	token := proxyToken(r.Header.Get("Proxy-Authorization"))
	if token == "" {
		return Grant{}, VerdictNoGrant, "no proxy credentials: only a tool's body, with the HTTP_PROXY toolgate gave it, may use this proxy"
	}
	g, err := Verify(p.Keys.Keys(r.Context(), false), token, p.now())
	if errors.Is(err, ErrBadToken) {
		g, err = Verify(p.Keys.Keys(r.Context(), true), token, p.now())
	}
	switch {
	case errors.Is(err, ErrExpired):
		return Grant{}, VerdictExpired, "the call's egress grant has expired"
	case err != nil:
		return Grant{}, VerdictNoGrant, err.Error()
	}
	host, _, _ := net.SplitHostPort(r.RemoteAddr)
	src, err := netip.ParseAddr(host)
	want, err2 := netip.ParseAddr(g.PodIP)
	if err != nil || err2 != nil || src.Unmap() != want.Unmap() {
		return g, VerdictWrongSource, "the call's egress grant is not valid from this address"
	}
	if !p.Pods.Live(r.Context(), want, g.PodUID) {
		return g, VerdictPodGone, "the call's pod is gone: its egress grant is worth nothing"
	}
	return g, "", ""
}

// proxyToken is the grant in Proxy-Authorization: the password of Basic
// credentials (what clients send for http://user:token@proxy), or a
// Bearer token.
func proxyToken(h string) string {
	scheme, v, _ := strings.Cut(h, " ")
	switch strings.ToLower(scheme) {
	case "bearer":
		return strings.TrimSpace(v)
	case "basic":
		raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(v))
		if err != nil {
			return ""
		}
		_, pass, _ := strings.Cut(string(raw), ":")
		return pass
	}
	return ""
}

// hostOf is the grant's host for name and port, or the refusal.
func (p *Proxy) hostOf(g Grant, name string, port int32) (*Host, string, string) {
	if h := g.Match(name, port); h != nil {
		return h, "", ""
	}
	if g.Named(name) {
		return nil, VerdictPort, fmt.Sprintf("tool %s may not reach port %d of this host", g.Tool, port)
	}
	return nil, VerdictHost, fmt.Sprintf("tool %s may not reach this host: its egress names the hosts it may", g.Tool)
}

// tunnel opens a CONNECT tunnel to a host without a credential.
func (p *Proxy) tunnel(w http.ResponseWriter, r *http.Request, g Grant) {
	name, portText, err := net.SplitHostPort(r.Host)
	port, err2 := strconv.ParseUint(portText, 10, 16)
	if err != nil || err2 != nil {
		p.refuse(w, r, g, VerdictNotProxy, http.StatusBadRequest, "CONNECT needs host:port")
		return
	}
	h, verdict, why := p.hostOf(g, name, int32(port))
	if verdict != "" {
		p.refuse(w, r, g, verdict, http.StatusForbidden, why)
		return
	}
	if h.Credential != nil {
		p.refuse(w, r, g, VerdictTunnelCred, http.StatusForbidden,
			"this host takes requests in absolute form only (http://host/path through the proxy, which adds the tool's credential over its own TLS), never a tunnel")
		return
	}
	upstream, err := p.dial(r.Context(), name, int32(port))
	if err != nil {
		p.refuseDial(w, r, g, err)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		_ = upstream.Close()
		p.refuse(w, r, g, VerdictUpstream, http.StatusInternalServerError, "the connection cannot be tunnelled")
		return
	}
	down, buf, err := hj.Hijack()
	if err != nil {
		_ = upstream.Close()
		return
	}
	p.count(r, g, VerdictTunnelled)
	// A tunnel lives no longer than its grant.
	deadline := time.Unix(g.Expires, 0)
	_ = down.SetDeadline(deadline)
	_ = upstream.SetDeadline(deadline)
	if _, err := down.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n")); err != nil {
		_ = down.Close()
		_ = upstream.Close()
		return
	}
	done := make(chan struct{}, 2)
	go func() {
		// Bytes the client sent after its CONNECT are in buf. Its first
		// message decides whether the tunnel goes on (tunnel.go); closing
		// both ends the other copy too.
		refused, more := p.inspect(r, g, name, down, buf.Reader, upstream)
		switch {
		case refused:
			_ = down.Close()
			_ = upstream.Close()
		case more:
			_, _ = io.Copy(upstream, buf)
			closeWrite(upstream)
		default:
			closeWrite(upstream)
		}
		done <- struct{}{}
	}()
	go func() {
		_, _ = io.Copy(down, upstream)
		closeWrite(down)
		done <- struct{}{}
	}()
	<-done
	<-done
	_ = down.Close()
	_ = upstream.Close()
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
}

// forwardKey carries a request's grant host to the forwarder's Rewrite.
type forwardKey struct{}

type forwardTo struct {
	grant     Grant
	verdict   string // counted once the host answers
	transport *http.Transport
	host      string
	port      int32
	header    string
	value     string
}

// forward sends a request in absolute form on over the proxy's own TLS,
// with the host's credential when it has one.
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, g Grant) {
	name := r.URL.Hostname()
	port := int32(DefaultPort)
	if t := r.URL.Port(); t != "" {
		n, err := strconv.ParseUint(t, 10, 16)
		if err != nil {
			p.refuse(w, r, g, VerdictNotProxy, http.StatusBadRequest, "a request's port must be a number")
			return
		}
		port = int32(n)
	}
	h, verdict, why := p.hostOf(g, name, port)
	if verdict != "" {
		p.refuse(w, r, g, verdict, http.StatusForbidden, why)
		return
	}
	transport, err := p.transportFor(h.CABundle)
	if err != nil {
		p.refuse(w, r, g, VerdictUpstream, http.StatusBadGateway, fmt.Sprintf("the caBundle tool %s names for this host holds no certificate", g.Tool))
		return
	}
	to := forwardTo{grant: g, host: name, port: port, transport: transport}
	verdict = VerdictForwarded
	if c := h.Credential; c != nil {
		v, err := p.Secrets.Value(r.Context(), g.Namespace, c.Secret, c.Key)
		if err != nil {
			p.Log.Info("credential not read", "namespace", g.Namespace, "call", g.Call, "tool", g.Tool, "secret", c.Secret, "error", err.Error())
			p.refuse(w, r, g, VerdictCredential, http.StatusBadGateway, fmt.Sprintf(
				"the credential of tool %s for this host cannot be read (Secret %s/%s, key %s): ask the operator to grant toolgate's egress proxy get on it",
				g.Tool, g.Namespace, c.Secret, c.Key))
			return
		}
		value := strings.TrimRight(string(v), "\r\n")
		if c.Format != "" {
			value = strings.ReplaceAll(c.Format, "{{value}}", value)
		}
		if !credentialMethods[r.Method] {
			// What a method beyond the standard ones does with a request's
			// headers is unknown: it may echo them as TRACE does.
			p.refuse(w, r, g, VerdictMethod, http.StatusMethodNotAllowed, fmt.Sprintf("tool %s's credential for this host is added only to GET, HEAD, POST, PUT, PATCH, DELETE and OPTIONS requests", g.Tool))
			return
		}
		to.header, to.value, verdict = c.Header, value, VerdictInjected
	}
	to.verdict = verdict
	p.forwarder.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), forwardKey{}, to)))
}

// echoes reports whether method is one whose answer repeats the request
// (methods are case-sensitive, but servers are known to take "trace" for
// TRACE).
func echoes(method string) bool {
	return strings.EqualFold(method, http.MethodTrace) || strings.EqualFold(method, "TRACK")
}

// credentialMethods are the methods a host's credential is added to.
var credentialMethods = map[string]bool{
	http.MethodGet: true, http.MethodHead: true, http.MethodPost: true, http.MethodPut: true,
	http.MethodPatch: true, http.MethodDelete: true, http.MethodOptions: true,
}

// build makes the forwarder: TLS to the host verified with the host's
// CA bundle or RootCAs (transportFor), connections only to permitted
// addresses, no X-Forwarded-* (the pod's address is nobody's business),
// hop-by-hop and proxy headers dropped.
func (p *Proxy) build() {
	p.forwarder = &httputil.ReverseProxy{
		Transport: roundTripper(func(r *http.Request) (*http.Response, error) {
			to, _ := r.Context().Value(forwardKey{}).(forwardTo)
			return to.transport.RoundTrip(r)
		}),
		Rewrite: func(pr *httputil.ProxyRequest) {
			to, _ := pr.In.Context().Value(forwardKey{}).(forwardTo)
			hostport := to.host
			if strings.Contains(hostport, ":") {
				hostport = "[" + hostport + "]" // an IPv6 address
			}
			if to.port != DefaultPort {
				hostport = net.JoinHostPort(to.host, strconv.Itoa(int(to.port)))
			}
			pr.Out.URL.Scheme, pr.Out.URL.Host, pr.Out.Host = "https", hostport, hostport
			pr.Out.Header.Del("Proxy-Authorization")
			pr.Out.Header.Del("Proxy-Connection")
			if to.header != "" {
				pr.Out.Header.Set(to.header, to.value)
			}
		},
		ModifyResponse: func(resp *http.Response) error {
			to, _ := resp.Request.Context().Value(forwardKey{}).(forwardTo)
			p.count(resp.Request, to.grant, to.verdict)
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			to, _ := r.Context().Value(forwardKey{}).(forwardTo)
			p.refuseDial(w, r, to.grant, err)
		},
	}
}

// dial connects to name:port, resolving the name itself; every address of
// the answer must be permitted, so no answer mixes a public address with
// an in-cluster one.
func (p *Proxy) dial(ctx context.Context, name string, port int32) (net.Conn, error) {
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(name); err == nil {
		addrs = []netip.Addr{a}
	} else {
		res := p.Resolver
		if res == nil {
			res = net.DefaultResolver
		}
		if addrs, err = res.LookupNetIP(ctx, "ip", name); err != nil {
			return nil, err
		}
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("%s has no address", name)
	}
	for _, a := range addrs {
		if !Permitted(a, p.Allowed) {
			return nil, errNotPermitted
		}
	}
	d := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	var err error
	for _, a := range addrs {
		var c net.Conn
		if c, err = d.DialContext(ctx, "tcp", netip.AddrPortFrom(a.Unmap(), uint16(port)).String()); err == nil {
			return c, nil
		}
	}
	return nil, err
}

func (p *Proxy) refuseDial(w http.ResponseWriter, r *http.Request, g Grant, err error) {
	if errors.Is(err, errNotPermitted) {
		p.refuse(w, r, g, VerdictAddress, http.StatusForbidden, "the host resolves to an address that is not public, which the operator does not allow")
		return
	}
	p.Log.Info("host not reached", "namespace", g.Namespace, "call", g.Call, "tool", g.Tool, "error", err.Error())
	p.refuse(w, r, g, VerdictUpstream, http.StatusBadGateway, "the host could not be reached")
}

// refuse answers a request that is not served, says why, and counts it.
func (p *Proxy) refuse(w http.ResponseWriter, r *http.Request, g Grant, verdict string, status int, why string) {
	// The connection ends with the answer: a client refused has nothing
	// more to send on it, and one that waits is not kept waiting.
	w.Header().Set("Connection", "close")
	p.count(r, g, verdict)
	p.Log.Info("request refused", "namespace", g.Namespace, "call", g.Call, "tool", g.Tool, "verdict", verdict)
	http.Error(w, "toolgate egress: "+why, status)
}

// count counts a request's verdict, and records it on the call when the
// request carried a grant.
func (p *Proxy) count(r *http.Request, g Grant, verdict string) {
	p.Metrics.inc(g.Tool, verdict)
	if p.Events != nil && g.CallUID != "" {
		host, port := destination(r)
		p.Events.Record(g, verdict, host, port)
	}
}

// destination is the host and port a request asks for (port 0: none
// could be read).
func destination(r *http.Request) (string, int32) {
	hostport := r.Host
	if r.Method != http.MethodConnect && r.URL.IsAbs() {
		hostport = r.URL.Host
	}
	host, portText, err := net.SplitHostPort(hostport)
	if err != nil {
		if r.Method == http.MethodConnect {
			return hostport, 0
		}
		return strings.Trim(hostport, "[]"), DefaultPort
	}
	port, err := strconv.ParseUint(portText, 10, 16)
	if err != nil {
		return host, 0
	}
	return host, int32(port)
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// transportFor is the transport that trusts ca (PEM; "": the proxy's
// roots), one per bundle: its connections are verified with it alone.
func (p *Proxy) transportFor(ca string) (*http.Transport, error) {
	roots := p.RootCAs
	if ca != "" {
		roots = x509.NewCertPool()
		if !roots.AppendCertsFromPEM([]byte(ca)) {
			return nil, errors.New("no certificate in the CA bundle")
		}
	}
	key := sha256.Sum256([]byte(ca))
	p.mu.Lock()
	defer p.mu.Unlock()
	if t, ok := p.transports[key]; ok {
		return t, nil
	}
	if p.transports == nil {
		p.transports = map[[32]byte]*http.Transport{}
	}
	t := &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			name, portText, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			port, err := strconv.ParseUint(portText, 10, 16)
			if err != nil {
				return nil, err
			}
			return p.dial(ctx, name, int32(port))
		},
		TLSClientConfig:       &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2:     true,
		MaxIdleConnsPerHost:   8,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: 5 * time.Minute,
	}
	p.transports[key] = t
	return t, nil
}
