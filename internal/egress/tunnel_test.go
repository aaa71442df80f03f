package egress

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// openTunnel CONNECTs to host:port through the fixture's proxy with the
// call's grant and returns the tunnel (after its 200).
func (f *fixture) openTunnel(t *testing.T, host string, port int32) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(f.proxyURL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	auth := base64.StdEncoding.EncodeToString([]byte("x:" + f.mint(t, f.grant())))
	fmt.Fprintf(conn, "CONNECT %s:%d HTTP/1.1\r\nHost: %s:%d\r\nProxy-Authorization: Basic %s\r\n\r\n", host, port, host, port, auth)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT %s:%d: %v %v", host, port, resp, err)
	}
	return conn, br
}

// TestATunnelCarriesOnlyTheHostItsConnectNamed: the upstream answers for
// every name of its certificate on one address, as a CDN does. TLS
// through a tunnel to other.example.test naming api.example.test (a host
// the grant gives only with its credential, never in a tunnel) is closed
// before the upstream hears of it; naming other.example.test, it is
// served. Plain HTTP in a tunnel is answered 403 (absolute form is the
// way); another protocol passes.
func TestATunnelCarriesOnlyTheHostItsConnectNamed(t *testing.T) {
	f := newFixture(t)
	handshake := func(serverName string) error {
		conn, br := f.openTunnel(t, "other.example.test", f.otherPort)
		tc := tls.Client(&bufferedConn{Conn: conn, r: br}, &tls.Config{ServerName: serverName, RootCAs: f.pool})
		if err := tc.Handshake(); err != nil {
			return err
		}
		fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", serverName)
		resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		return nil
	}
	before := len(f.other.seen())
	if err := handshake("api.example.test"); err == nil {
		t.Fatal("TLS naming another host than the CONNECT went through")
	}
	if len(f.other.seen()) != before {
		t.Fatal("the upstream heard a request naming another host")
	}
	if got := f.counted("fetch", VerdictTunnelHost); got != 1 {
		t.Errorf("%s counted %v, want 1", VerdictTunnelHost, got)
	}
	if err := handshake("other.example.test"); err != nil {
		t.Fatalf("TLS naming the CONNECT's host: %v", err)
	}
	if err := handshake("OTHER.example.test."); err != nil {
		t.Fatalf("the same host, another case and a trailing dot: %v", err)
	}

	conn, br := f.openTunnel(t, "other.example.test", f.otherPort)
	fmt.Fprint(conn, "GET http://api.example.test/ HTTP/1.1\r\nHost: api.example.test\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), "absolute form") {
		t.Errorf("plain HTTP in a tunnel: %d %q", resp.StatusCode, body)
	}
	if got := f.counted("fetch", VerdictTunnelHTTP); got != 1 {
		t.Errorf("%s counted %v, want 1", VerdictTunnelHTTP, got)
	}

	conn, br = f.openTunnel(t, "other.example.test", f.otherPort)
	fmt.Fprint(conn, "\x16\x03\x01\x00\x05hello")
	if _, err := br.ReadByte(); err == nil {
		t.Error("a first message that starts as TLS and is not was answered")
	}
	if got := f.counted("fetch", VerdictTunnelUnread); got != 1 {
		t.Errorf("%s counted %v, want 1", VerdictTunnelUnread, got)
	}
}

// TestAServerThatSpeaksFirstIsTunnelled: a protocol whose server greets
// first, and whose client then sends a line that is not HTTP, passes.
func TestAServerThatSpeaksFirstIsTunnelled(t *testing.T) {
	f := newFixture(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer func() { _ = c.Close() }()
		fmt.Fprint(c, "220 greetings\r\n")
		line, _ := bufio.NewReader(c).ReadString('\n')
		fmt.Fprintf(c, "250 you said %s", line)
	}()
	port := int32(l.Addr().(*net.TCPAddr).Port)
	// other.example.test on this port too.
	f.otherPort = port
	conn, br := f.openTunnel(t, "other.example.test", port)
	greeting, err := br.ReadString('\n')
	if err != nil || greeting != "220 greetings\r\n" {
		t.Fatalf("greeting %q, %v", greeting, err)
	}
	fmt.Fprint(conn, "EHLO tool.example\r\n")
	answer, err := br.ReadString('\n')
	if err != nil || answer != "250 you said EHLO tool.example\r\n" {
		t.Fatalf("answer %q, %v", answer, err)
	}
}

// bufferedConn reads what a bufio.Reader over Conn already holds first.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// FuzzTunnelFirstMessage: whatever a client sends first through a tunnel,
// reading it neither panics nor hangs, takes no more than the bound, and
// keeps every byte it took, in order, to forward.
func FuzzTunnelFirstMessage(f *testing.F) {
	var hello bytes.Buffer
	c := tls.Client(&recordConn{w: &hello}, &tls.Config{ServerName: "api.example.test"})
	_ = c.Handshake() // writes its ClientHello, then fails to read
	for _, seed := range [][]byte{hello.Bytes(), hello.Bytes()[:20], []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), []byte("EHLO x\r\n"),
		[]byte("\x16\x03\x01\xff\xff"), []byte("SSH-2.0-x\r\n"), {}, []byte("G"), bytes.Repeat([]byte("A"), 10000)} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bufio.NewReader(bytes.NewReader(data))
		_, _, read, _ := firstName(r)
		if len(read) > maxFirstMessage {
			t.Fatalf("read %d bytes, beyond the bound", len(read))
		}
		rest, _ := io.ReadAll(r)
		if !bytes.Equal(append(append([]byte{}, read...), rest...), data) {
			t.Fatal("bytes taken are not the message's, in order")
		}
	})
}

// recordConn records what is written to it and reads nothing.
type recordConn struct {
	net.Conn
	w io.Writer
}

func (c *recordConn) Write(p []byte) (int, error)      { return c.w.Write(p) }
func (c *recordConn) Read([]byte) (int, error)         { return 0, io.EOF }
func (c *recordConn) Close() error                     { return nil }
func (c *recordConn) SetDeadline(time.Time) error      { return nil }
func (c *recordConn) SetReadDeadline(time.Time) error  { return nil }
func (c *recordConn) SetWriteDeadline(time.Time) error { return nil }
