package runner

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdh"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/codes"
)

// channel starts a runner serving on a loopback port, with the real
// Execute (counting its runs), and returns its address and the manager key.
func channel(t *testing.T) (addr string, manager *ecdh.PrivateKey, runs *atomic.Int32) {
	t.Helper()
	addr, manager, runs, _ = stoppableChannel(t)
	return addr, manager, runs
}

// stoppableChannel is channel, with the function that stops the runner
// (its SIGTERM) and waits until Serve returned.
func stoppableChannel(t *testing.T) (addr string, manager *ecdh.PrivateKey, runs *atomic.Int32, stop func()) {
	t.Helper()
	manager, err := NewManagerKey()
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewServer(manager.PublicKey())
	if err != nil {
		t.Fatal(err)
	}
	s.ArgumentsDir = t.TempDir()
	runs = &atomic.Int32{}
	s.Execute = func(ctx context.Context, spec Spec, arguments []byte, sub SubCaller) (Header, []byte, []byte) {
		runs.Add(1)
		self, _ := os.Executable()
		return ExecuteWith(ctx, spec, arguments, time.Second, Calls{Caller: sub, Runner: self})
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan struct{})
	stop = func() { cancel(); <-served }
	t.Cleanup(stop)
	go func() { defer close(served); _ = s.Serve(ctx, ln) }()
	return ln.Addr().String(), manager, runs, stop
}

// TestStoppedRunnerStillSendsItsFrame: the runner stopped (its pod
// deleted: the call was cancelled) while its body, past its budget,
// ignores SIGTERM during the grace: the manager waiting on the channel
// still gets the frame, which says the timeout came first, and Serve
// returns only after it was sent.
func TestStoppedRunnerStillSendsItsFrame(t *testing.T) {
	addr, manager, _, stop := stoppableChannel(t)
	req := runRequest("uid-1/1", "trap '' TERM; sleep 30", "{}")
	req.Spec.TimeoutMillis = 200
	type answer struct {
		res *Result
		err error
	}
	got := make(chan answer, 1)
	go func() {
		_, res, err := exchange(t, addr, manager, req)
		got <- answer{res, err}
	}()
	time.Sleep(500 * time.Millisecond) // the budget fired; the body is in its grace
	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	select {
	case a := <-got:
		if a.err != nil || a.res.Code != codes.Timeout {
			t.Fatalf("frame %+v, error %v: want the timeout", a.res, a.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no frame")
	}
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return")
	}
}

// TestABodyStoppedWithItsPodIsNotTheTools: the runner stopped (its pod
// deleted or evicted by someone else) while the body runs within its
// budget: the body dies of the stop (SIGTERM, exit 143), and the frame
// says the sandbox was lost, not that the tool failed (hack/chaos found
// "tool_error: exit code 143" for a call whose pod a fault deleted).
func TestABodyStoppedWithItsPodIsNotTheTools(t *testing.T) {
	addr, manager, _, stop := stoppableChannel(t)
	req := runRequest("uid-1/1", "sleep 30", "{}")
	req.Spec.TimeoutMillis = 60_000
	got := make(chan *Result, 1)
	go func() {
		_, res, err := exchange(t, addr, manager, req)
		if err != nil {
			t.Error(err)
		}
		got <- res
	}()
	time.Sleep(500 * time.Millisecond) // the body runs
	stop()
	select {
	case res := <-got:
		if res == nil || res.Code != codes.SandboxLost || !strings.Contains(res.Error, "stopped") {
			t.Fatalf("frame %+v: want sandbox_lost, the body stopped with its pod", res)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no frame")
	}
}

func exchange(t *testing.T, addr string, key *ecdh.PrivateKey, req Request) (*Hello, *Result, error) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	return Exchange(conn, key, req, nil)
}

func runRequest(call, script, args string) Request {
	return Request{Op: OpRun, Call: call, Arguments: args, Spec: Spec{Argv: []string{"/bin/sh", "-c", script}, Workspace: os.TempDir()}}
}

// TestChannelRunsTheHandedCallOnce: the runner runs the call it is handed
// (arguments on stdin and in the file it names), once; handing the same
// call again, or collecting it from a new connection (a restarted
// manager), returns the same frame without running it again; another call
// is refused.
func TestChannelRunsTheHandedCallOnce(t *testing.T) {
	addr, manager, runs := channel(t)
	req := runRequest("uid-1/1", `cat; echo; cat "$TOOLGATE_ARGUMENTS_FILE"`, `{"n":1}`)
	hello, res, err := exchange(t, addr, manager, req)
	if err != nil {
		t.Fatal(err)
	}
	if hello.State != StateIdle || string(res.Stdout) != "{\"n\":1}\n{\"n\":1}" || res.ExitCode != 0 {
		t.Fatalf("hello %+v result %+v %q", hello, res.Header, res.Stdout)
	}
	for _, again := range []Request{req, {Op: OpCollect, Call: "uid-1/1"}} {
		hello, res, err := exchange(t, addr, manager, again)
		if err != nil || hello.State != StateDone || hello.Call != "uid-1/1" || string(res.Stdout) != "{\"n\":1}\n{\"n\":1}" {
			t.Fatalf("%s again: %+v %v %v", again.Op, hello, res, err)
		}
	}
	if _, _, err := exchange(t, addr, manager, runRequest("uid-2/1", "echo other", "{}")); !errors.Is(err, ErrRefused) {
		t.Fatalf("another call: %v", err)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("the body ran %d times", n)
	}
}

// TestTheFrameTimesTheHandOver: the frame says when the runner accepted
// the connection that handed the call over, when it had opened the
// request, and when the body started, in that order, all within the
// exchange: the hand-over's hops in the call's trace.
func TestTheFrameTimesTheHandOver(t *testing.T) {
	addr, manager, _ := channel(t)
	before := time.Now().Truncate(time.Microsecond)
	_, res, err := exchange(t, addr, manager, runRequest("uid-1/1", "true", "{}"))
	if err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	connected, handed, started := time.UnixMicro(res.ConnectedUnixMicros), time.UnixMicro(res.HandedUnixMicros), time.UnixMicro(res.BodyStartedUnixMicros)
	if connected.Before(before) || handed.Before(connected) || started.Before(handed) || started.After(after) {
		t.Fatalf("exchange %v–%v: connected %v, handed %v, body started %v", before, after, connected, handed, started)
	}
}

// TestChannelOnlyTheManagerHandsOver: a request sealed under any other key,
// a recorded request replayed on a new connection, or a collect before
// anything was handed over runs nothing.
func TestChannelOnlyTheManagerHandsOver(t *testing.T) {
	addr, manager, runs := channel(t)
	impostor, err := NewManagerKey()
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := exchange(t, addr, impostor, runRequest("uid-1/1", "echo forged", "{}")); !errors.Is(err, ErrRefused) {
		t.Fatalf("impostor: %v", err)
	}
	if _, _, err := exchange(t, addr, manager, Request{Op: OpCollect, Call: "uid-1/1"}); !errors.Is(err, ErrRefused) {
		t.Fatalf("collect before a run: %v", err)
	}

	// Record what the manager sends on one connection, then replay it on
	// another: the challenge differs, so it is refused.
	recorded := recordRequest(t, addr, manager, runRequest("uid-1/1", "echo once", "{}"))
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	r := bufio.NewReader(conn)
	if _, err := r.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write(recorded); err != nil {
		t.Fatal(err)
	}
	answer, _ := r.ReadString('\n')
	if !strings.HasPrefix(answer, refusalPrefix) {
		t.Fatalf("a replayed request was answered %q", answer)
	}
	if n := runs.Load(); n != 0 {
		t.Fatalf("the body ran %d times", n)
	}
}

// recordRequest performs a handshake as the manager but, instead of
// sending the request, returns its bytes (and closes the connection).
func recordRequest(t *testing.T, addr string, manager *ecdh.PrivateKey, req Request) []byte {
	t.Helper()
	client, server := net.Pipe()
	defer func() { _ = client.Close() }()
	real, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	hello, err := bufio.NewReader(real).ReadString('\n')
	_ = real.Close()
	if err != nil {
		t.Fatal(err)
	}
	var sent bytes.Buffer
	read := make(chan struct{})
	go func() {
		defer close(read)
		_, _ = server.Write([]byte(hello))
		buf := make([]byte, 64<<10)
		for {
			n, err := server.Read(buf)
			sent.Write(buf[:n])
			if err != nil {
				return
			}
		}
	}()
	// Exchange waits for a frame that never comes: end it once the request
	// is out.
	time.AfterFunc(500*time.Millisecond, func() { _ = client.Close() })
	_, _, _ = Exchange(client, manager, req, nil)
	<-read
	return sent.Bytes()
}

// TestChannelFrameIsSealed: what crosses the network shows sizes, never
// the arguments, the output or the contexts.
func TestChannelFrameIsSealed(t *testing.T) {
	addr, manager, _ := channel(t)
	recorded := recordRequest(t, addr, manager, runRequest("uid-1/1", "echo out-SECRET", `{"a":"arg-SECRET"}`))
	if bytes.Contains(recorded, []byte("SECRET")) {
		t.Fatalf("the request shows the call: %q", recorded)
	}
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	var wire bytes.Buffer
	tap := &tapConn{Conn: conn, read: &wire}
	_, res, err := Exchange(tap, manager, runRequest("uid-1/1", "echo out-SECRET", `{"a":"arg-SECRET"}`), nil)
	_ = conn.Close()
	if err != nil || !strings.Contains(string(res.Stdout), "out-SECRET") {
		t.Fatalf("%v %v", res, err)
	}
	if bytes.Contains(wire.Bytes(), []byte("SECRET")) {
		t.Fatalf("the runner's answer shows the output: %q", wire.String())
	}
}

type tapConn struct {
	net.Conn
	read *bytes.Buffer
}

func (c *tapConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.read.Write(p[:n])
	return n, err
}

// TestBudgetCountsFromTheBodyStart: the timeout is the body's own budget,
// measured by the runner; a body within it gets its result however late it
// is collected, one beyond it is stopped and says timeout.
func TestBudgetCountsFromTheBodyStart(t *testing.T) {
	ws := t.TempDir()
	before := time.Now()
	h, out, _ := Execute(context.Background(), Spec{Workspace: ws, TimeoutMillis: 2000, Argv: []string{"/bin/sh", "-c", "sleep 0.2; echo ok"}}, nil, time.Second)
	if h.Code != "" || string(out) != "ok\n" || h.BodyMillis < 200 {
		t.Fatalf("within budget: %+v %q", h, out)
	}
	// When the body started and how long it ran, for its span.
	if began := time.UnixMicro(h.BodyStartedUnixMicros); began.Before(before.Truncate(time.Microsecond)) || began.After(time.Now()) || h.BodyMicros < 200_000 {
		t.Errorf("body timing: started %v (execute at %v), %d µs", began, before, h.BodyMicros)
	}
	start := time.Now()
	h, _, _ = Execute(context.Background(), Spec{Workspace: ws, TimeoutMillis: 300, Argv: []string{"/bin/sh", "-c", "trap '' TERM; sleep 30"}}, nil, 200*time.Millisecond)
	if h.Code != codes.Timeout || !strings.Contains(h.Error, "300ms timeout") || time.Since(start) > 3*time.Second {
		t.Fatalf("beyond budget: %+v after %s", h, time.Since(start))
	}
}

// TestChannelServesSubCalls: a body calls other tools through
// "$TOOLGATE_RUNNER call" while it runs; each sub-call reaches the manager
// over the channel (sealed, like everything on it) and its answer comes back
// to the body, which combines them; a failed sub-call fails the command.
func TestChannelServesSubCalls(t *testing.T) {
	addr, manager, _ := channel(t)
	var calls []SubCall
	var mu sync.Mutex
	sub := func(c SubCall) SubResult {
		mu.Lock()
		calls = append(calls, c)
		mu.Unlock()
		if c.Tool == "broken" {
			return SubResult{Outcome: "Denied", Code: "policy_denied", Message: "not allowed"}
		}
		return SubResult{Outcome: "Succeeded", Value: fmt.Sprintf("%q", c.Tool+c.Arguments)}
	}
	script := `a=$("$TOOLGATE_RUNNER" call add '{"n":1}'); b=$("$TOOLGATE_RUNNER" call add '{"n":2}'); ` +
		`"$TOOLGATE_RUNNER" call broken 2>&1 >/dev/null; echo "exit $?"; echo "$a,$b"`
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	_, res, err := Exchange(conn, manager, runRequest("uid-1/1", script, "{}"), sub)
	if err != nil {
		t.Fatal(err)
	}
	want := "Denied policy_denied: not allowed\nexit 1\n" + `"add{\"n\":1}","add{\"n\":2}"` + "\n"
	if string(res.Stdout) != want {
		t.Fatalf("stdout %q, want %q", res.Stdout, want)
	}
	if len(calls) != 3 || calls[0].ID != "1" || calls[1].ID != "2" || calls[2].Tool != "broken" {
		t.Fatalf("sub-calls %+v", calls)
	}
}

// TestSubCallOutlivesTheManagerConnection: a sub-call in flight when the
// manager's connection breaks (a restart) is sent again, with the same ID,
// on the next connection, and the body gets its answer.
func TestSubCallOutlivesTheManagerConnection(t *testing.T) {
	addr, manager, runs := channel(t)
	script := `"$TOOLGATE_RUNNER" call add '{"n":1}'`
	first, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	var mu sync.Mutex
	_, _, err = Exchange(first, manager, runRequest("uid-1/1", script, "{}"), func(c SubCall) SubResult {
		mu.Lock()
		ids = append(ids, c.ID)
		mu.Unlock()
		_ = first.Close() // the manager dies before it answers
		return SubResult{}
	})
	if err == nil {
		t.Fatal("the broken connection gave a frame")
	}
	second, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = second.Close() }()
	_, res, err := Exchange(second, manager, Request{Op: OpCollect, Call: "uid-1/1"}, func(c SubCall) SubResult {
		mu.Lock()
		ids = append(ids, c.ID)
		mu.Unlock()
		return SubResult{Outcome: "Succeeded", Value: `"answered"`}
	})
	if err != nil || string(res.Stdout) != "\"answered\"\n" {
		t.Fatalf("%v %+v", err, res)
	}
	if len(ids) != 2 || ids[0] != ids[1] || runs.Load() != 1 {
		t.Fatalf("sub-call IDs %v, body runs %d", ids, runs.Load())
	}
}

// TestChannelRefusesAnotherProtocol: a runner greeting in another version
// of the channel (one of another release, as a tool image may carry) is
// told apart from a runner not listening yet: the manager gets
// ErrProtocol naming both versions, and sends it nothing.
func TestChannelRefusesAnotherProtocol(t *testing.T) {
	key, err := NewManagerKey()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		greeting string
		protocol bool
	}{
		{"TOOLGATE-CHANNEL/2 {\"runner\":\"00\"}\n", true},
		{"SSH-2.0-OpenSSH_9.6\n", false},
	} {
		manager, runnerSide := net.Pipe()
		sent := make(chan int, 1)
		go func() {
			_, _ = runnerSide.Write([]byte(tc.greeting))
			buf := make([]byte, 1)
			n, _ := runnerSide.Read(buf)
			sent <- n
			_ = runnerSide.Close()
		}()
		_, _, err := Exchange(manager, key, Request{Op: OpRun, Call: "c"}, nil)
		_ = manager.Close()
		if errors.Is(err, ErrProtocol) != tc.protocol {
			t.Errorf("%q: %v, want ErrProtocol %v", tc.greeting, err, tc.protocol)
		}
		if tc.protocol && (err == nil || !strings.Contains(err.Error(), `"2"`) || !strings.Contains(err.Error(), `"1"`)) {
			t.Errorf("%q: %v, want both versions named", tc.greeting, err)
		}
		if n := <-sent; n != 0 {
			t.Errorf("%q: the manager sent %d bytes", tc.greeting, n)
		}
	}
}
