package egress

import (
	"bufio"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// The first message through a tunnel. A CONNECT names a host the grant
// allows; what travels through the tunnel may name a host again. A server
// that answers for several names on one address (a CDN, a shared ingress)
// answers for the name inside, so a tool granted one host could reach
// another through it. So the proxy reads the client's first message:
//   - a TLS ClientHello naming another host (SNI) than the CONNECT closes
//     the tunnel; one naming none passes;
//   - plain HTTP is answered 403 inside the tunnel and the tunnel closed:
//     HTTP goes through the proxy in absolute form, where every request's
//     host is checked (a tunnel would let a second request name another);
//   - anything else (another protocol, or one whose server speaks first)
//     passes as it is.
// What travels inside TLS is not seen: a Host header inside a TLS session
// whose SNI names the granted host reaches whatever that server routes it
// to (docs/sandbox.md, egress).

// maxFirstMessage bounds what the proxy reads of a tunnel's first message
// (a ClientHello, a request's head) before deciding.
const maxFirstMessage = 64 << 10

// Protocols of a tunnel's first message.
const (
	protoTLS  = "tls"
	protoHTTP = "http"
)

// firstName reads the client's first message from r, when it is a TLS
// ClientHello or the request line of plain HTTP, and returns the host a
// ClientHello names ("": none) and the message's protocol ("": neither).
// read is every byte taken from r, to be forwarded before the rest. An
// error means the message could not be read whole (the client went, it is
// too large, or it is not the TLS it starts as).
func firstName(r *bufio.Reader) (name, proto string, read []byte, err error) {
	first, err := r.Peek(1)
	if err != nil {
		return "", "", nil, err
	}
	rec := &recorder{r: r, max: maxFirstMessage}
	switch {
	case first[0] == 0x16: // a TLS handshake record
		name, err = helloName(rec)
		return name, protoTLS, rec.read, err
	case first[0] >= 'A' && first[0] <= 'Z': // perhaps an HTTP method
		line, err := firstLine(rec)
		if isRequestLine(line) {
			return "", protoHTTP, rec.read, nil
		}
		return "", "", rec.read, err
	}
	return "", "", nil, nil
}

// firstLine reads up to and including the first newline (within 8 KiB)
// through rec, byte by byte (from a buffered reader).
func firstLine(rec *recorder) (string, error) {
	var b [1]byte
	for len(rec.read) < 8<<10 {
		if _, err := io.ReadFull(rec, b[:]); err != nil {
			return string(rec.read), err
		}
		if b[0] == '\n' {
			break
		}
	}
	return string(rec.read), nil
}

// isRequestLine reports whether line is an HTTP/1 request line: a method,
// a target and the protocol's version.
func isRequestLine(line string) bool {
	parts := strings.Split(strings.TrimRight(line, "\r\n"), " ")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" {
		return false
	}
	for _, c := range parts[0] {
		if c < 'A' || c > 'Z' {
			return false
		}
	}
	_, _, ok := http.ParseHTTPVersion(parts[2])
	return ok && strings.HasPrefix(parts[2], "HTTP/1.")
}

// helloName reads a TLS ClientHello from r with the standard library's own
// parser and returns the server name it asks for.
func helloName(r io.Reader) (string, error) {
	var name string
	seen := errors.New("client hello read")
	err := tls.Server(helloConn{r: r}, &tls.Config{
		GetConfigForClient: func(hi *tls.ClientHelloInfo) (*tls.Config, error) {
			name = hi.ServerName
			return nil, seen
		},
	}).Handshake()
	if errors.Is(err, seen) {
		return name, nil
	}
	if err == nil {
		err = errors.New("the TLS handshake went on without a ClientHello")
	}
	return "", err
}

// sameHost reports whether a and b name one host (case and a trailing dot
// aside).
func sameHost(a, b string) bool {
	return strings.EqualFold(strings.TrimSuffix(a, "."), strings.TrimSuffix(b, "."))
}

// recorder reads from r, keeping what it read, up to max bytes.
type recorder struct {
	r    io.Reader
	max  int
	read []byte
}

var errFirstMessageTooLarge = errors.New("the tunnel's first message is larger than the proxy reads before deciding")

func (c *recorder) Read(p []byte) (int, error) {
	if len(c.read) >= c.max {
		return 0, errFirstMessageTooLarge
	}
	if room := c.max - len(c.read); len(p) > room {
		p = p[:room]
	}
	n, err := c.r.Read(p)
	c.read = append(c.read, p[:n]...)
	return n, err
}

// helloConn is the connection a ClientHello is read from: reads come from
// r, writes (the handshake's answer) go nowhere.
type helloConn struct{ r io.Reader }

var errHelloOnly = errors.New("only a ClientHello is read here")

func (c helloConn) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c helloConn) Write([]byte) (int, error)        { return 0, errHelloOnly }
func (c helloConn) Close() error                     { return nil }
func (c helloConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c helloConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c helloConn) SetDeadline(time.Time) error      { return nil }
func (c helloConn) SetReadDeadline(time.Time) error  { return nil }
func (c helloConn) SetWriteDeadline(time.Time) error { return nil }

// inspect reads the tunnel's first message from the client (down's
// buffered reader) and forwards what it read to upstream. It reports
// whether the tunnel is refused (answered or counted, to be closed), and
// whether the client has more to send.
func (p *Proxy) inspect(r *http.Request, g Grant, name string, down net.Conn, in *bufio.Reader, upstream net.Conn) (refused, more bool) {
	said, proto, read, err := firstName(in)
	gone := err != nil && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed))
	why := ""
	switch {
	case proto == protoHTTP:
		p.count(r, g, VerdictTunnelHTTP)
		_, _ = io.WriteString(down, "HTTP/1.1 403 Forbidden\r\nConnection: close\r\nContent-Type: text/plain\r\n\r\n"+
			"toolgate egress: plain HTTP goes through the proxy in absolute form (http://host/path), never through a tunnel\n")
		why = VerdictTunnelHTTP
	case proto == protoTLS && err == nil && said != "" && !sameHost(said, name):
		p.count(r, g, VerdictTunnelHost)
		why = VerdictTunnelHost
	case err != nil && !gone:
		p.count(r, g, VerdictTunnelUnread)
		why = VerdictTunnelUnread
	}
	if why != "" {
		p.Log.Info("tunnel closed", "namespace", g.Namespace, "call", g.Call, "tool", g.Tool, "verdict", why)
		return true, false
	}
	if len(read) > 0 {
		if _, werr := upstream.Write(read); werr != nil {
			return false, false
		}
	}
	return false, err == nil
}
