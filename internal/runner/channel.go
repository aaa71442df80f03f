package runner

import (
	"bufio"
	"context"
	"crypto/ecdh"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/toolgate/toolgate/internal/codes"
	"github.com/toolgate/toolgate/internal/textutil"
)

// The handover channel. A tool pod starts with no call in it: no
// arguments, no key, nothing secret in its spec. The runner listens on Port
// and greets each connection with a Hello naming its one-time public key
// (X25519, made at start, never written anywhere) and a fresh challenge.
// The manager, the only holder of the private key whose public half is in
// the pod's environment (EnvManagerKey), answers with one Request sealed
// under a key derived from both: only the manager can hand a call over,
// and a recorded request never opens in another runner or connection
// (replay-proof). The runner runs the first "run" it is handed, once, and
// answers every request with the frame, sealed under a second key derived
// the same way, so any manager replica holding the key collects it after a
// restart and nobody else can read or forge it.
const (
	// Port is where the runner listens for the manager.
	Port = 7707
	// EnvManagerKey holds the manager's public key (hex) in the pod.
	EnvManagerKey = "TOOLGATE_MANAGER_KEY"

	helloPrefix     = greetingFamily + channelVersion + " "
	requestPrefix   = "TOOLGATE-REQUEST/1 "
	refusalPrefix   = "TOOLGATE-REFUSED/1 "
	subcallPrefix   = "TOOLGATE-SUBCALL/1 "
	subresultPrefix = "TOOLGATE-SUBRESULT/1 "
	channelLabel    = "toolgate-channel/1"
	subcallLabel    = "toolgate-subcall/1"
	subresultLabel  = "toolgate-subresult/1"

	// MaxRequestBytes bounds a sealed request: the largest arguments
	// (200 KiB) and a tool's spec fit well within it.
	MaxRequestBytes = 1 << 20
	maxHelloBytes   = 4 << 10
)

// Runner states in a Hello.
const (
	StateIdle    = "idle"    // no call handed over yet: nothing ran
	StateRunning = "running" // the body runs
	StateDone    = "done"    // the frame is ready
)

// Operations of a Request.
const (
	OpRun     = "run"     // run this call (once), answer with its frame
	OpCollect = "collect" // answer with the frame of the call already handed over
)

// Hello is the runner's greeting.
type Hello struct {
	// Runner is the runner's one-time public key (hex).
	Runner string `json:"runner"`
	// Challenge is fresh for each connection; the request must carry it.
	Challenge string `json:"challenge"`
	// State is the runner's state; Call the call it was handed, if any.
	State string `json:"state"`
	Call  string `json:"call,omitempty"`
}

// Request is what the manager hands over.
type Request struct {
	Challenge string `json:"challenge"`
	Op        string `json:"op"`
	// Call names the attempt (its sandbox key).
	Call string `json:"call"`
	// Spec and Arguments are the call, for OpRun.
	Spec      Spec   `json:"spec,omitzero"`
	Arguments string `json:"arguments,omitempty"`
}

// ErrRefused is a runner's explicit refusal of a request.
var ErrRefused = errors.New("runner: the request was refused")

// ErrProtocol says the runner greets in another version of the channel
// (a runner of another release, e.g. one a tool image carries): the
// manager hands it nothing.
var ErrProtocol = errors.New("runner: another channel protocol")

// The greeting is greetingFamily, then channelVersion: the version changes
// with any incompatible change of the channel.
const (
	greetingFamily = "TOOLGATE-CHANNEL/"
	channelVersion = "1"
)

// NewManagerKey makes the manager's channel key.
func NewManagerKey() (*ecdh.PrivateKey, error) { return ecdh.X25519().GenerateKey(rand.Reader) }

// ParseManagerKey reads the manager's public key as EnvManagerKey holds it.
func ParseManagerKey(text string) (*ecdh.PublicKey, error) {
	b, err := hex.DecodeString(strings.TrimSpace(text))
	if err != nil {
		return nil, err
	}
	return ecdh.X25519().NewPublicKey(b)
}

// channelKeys derives the request and frame keys of one runner from the
// shared secret and the runner's public key.
func channelKeys(shared, runnerPub []byte) (request, frame []byte) {
	derive := func(use string) []byte {
		h := sha256.New()
		h.Write([]byte(channelLabel + " " + use + "\x00"))
		h.Write(shared)
		h.Write(runnerPub)
		return h.Sum(nil)
	}
	return derive("request"), derive("frame")
}

// Server is the runner's side of the channel: one call, run once.
type Server struct {
	requestKey, frameKey []byte
	pub                  []byte
	// Execute runs the call (ExecuteWith, or a test's stand-in), with the
	// sub-caller that forwards the body's sub-calls to the manager.
	Execute func(ctx context.Context, spec Spec, arguments []byte, sub SubCaller) (Header, []byte, []byte)
	// ArgumentsDir is where the handed arguments are written for the tool.
	ArgumentsDir string

	mu      sync.Mutex
	state   string
	call    string
	frame   []byte
	summary []byte
	done    chan struct{}
	// links are the manager's connections waiting for the frame, the
	// newest last: a body's sub-calls go over the newest.
	links   []*link
	linked  chan struct{} // closed and replaced when a link is added
	pending map[string]chan SubResult
	// handlers counts the connections being answered: Serve returns only
	// once each is done, so a stopped runner's frame still reaches the
	// manager waiting for it.
	handlers sync.WaitGroup
}

// link is one manager connection waiting for the frame.
type link struct {
	mu   sync.Mutex // serializes writes
	conn net.Conn
	gone chan struct{}
}

// NewServer makes the runner's one-time key and the keys it shares with
// the holder of manager's private key.
func NewServer(manager *ecdh.PublicKey) (*Server, error) {
	priv, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	shared, err := priv.ECDH(manager)
	if err != nil {
		return nil, err
	}
	s := &Server{pub: priv.PublicKey().Bytes(), state: StateIdle, done: make(chan struct{}), ArgumentsDir: os.TempDir(),
		linked: make(chan struct{}), pending: map[string]chan SubResult{}}
	s.requestKey, s.frameKey = channelKeys(shared, s.pub)
	return s, nil
}

// Done is closed once the frame is ready.
func (s *Server) Done() <-chan struct{} { return s.done }

// Serve answers connections until ctx ends. The body runs under ctx, so
// stopping the pod (SIGTERM) stops the body; the manager waiting for its
// frame still gets it (within the body's stop grace, shorter than the
// pod's): the frame is what says which came first, the body's own timeout
// or the stop.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	go func() { <-ctx.Done(); _ = ln.Close() }()
	defer s.handlers.Wait()
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		s.handlers.Add(1)
		go func() {
			defer s.handlers.Done()
			s.handle(ctx, conn)
		}()
	}
}

func (s *Server) handle(ctx context.Context, conn net.Conn) {
	connected := time.Now()
	defer func() { _ = conn.Close() }()
	// A connection still being set up when the runner stops is dropped at
	// once; a linked one waits for the frame.
	var setup sync.Mutex
	linked := false
	defer context.AfterFunc(ctx, func() {
		setup.Lock()
		defer setup.Unlock()
		if !linked {
			_ = conn.SetDeadline(time.Now())
		}
	})()
	challenge := make([]byte, 16)
	if _, err := rand.Read(challenge); err != nil {
		return
	}
	s.mu.Lock()
	hello := Hello{Runner: hex.EncodeToString(s.pub), Challenge: hex.EncodeToString(challenge), State: s.state, Call: s.call}
	s.mu.Unlock()
	line, _ := json.Marshal(hello)
	// The manager answers at once; a silent peer does not hold a connection.
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := conn.Write(append(append([]byte(helloPrefix), line...), '\n')); err != nil {
		return
	}
	r := bufio.NewReader(conn)
	req, err := s.readRequest(r, hello.Challenge)
	if err != nil {
		refuse(conn, err.Error())
		return
	}
	if err := s.accept(ctx, req, connected); err != nil {
		refuse(conn, err.Error())
		return
	}
	setup.Lock()
	linked = true
	setup.Unlock()
	_ = conn.SetDeadline(time.Time{}) // the body may run long
	l := &link{conn: conn, gone: make(chan struct{})}
	s.addLink(l)
	defer s.dropLink(l)
	go s.readResults(r, l)
	select {
	case <-s.done:
	case <-l.gone:
		return
	}
	l.mu.Lock()
	_, _ = conn.Write(s.frame)
	l.mu.Unlock()
}

func (s *Server) addLink(l *link) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.links = append(s.links, l)
	close(s.linked)
	s.linked = make(chan struct{})
}

func (s *Server) dropLink(l *link) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, x := range s.links {
		if x == l {
			s.links = append(s.links[:i], s.links[i+1:]...)
			break
		}
	}
}

// readResults reads the manager's answers to sub-calls on l until it
// breaks (then l.gone is closed).
func (s *Server) readResults(r *bufio.Reader, l *link) {
	defer close(l.gone)
	for {
		line, err := readLine(r, maxHelloBytes)
		if err != nil || !strings.HasPrefix(line, subresultPrefix) {
			return
		}
		plain, err := readSealed(r, subresultLabel, s.requestKey, strings.TrimPrefix(line, subresultPrefix), MaxFrameBytes)
		if err != nil {
			return
		}
		var res SubResult
		if json.Unmarshal(plain, &res) != nil {
			return
		}
		s.mu.Lock()
		ch := s.pending[res.ID]
		delete(s.pending, res.ID)
		s.mu.Unlock()
		if ch != nil {
			ch <- res
		}
	}
}

// forward sends a body's sub-call to the manager over the newest link and
// waits for its answer; a link that breaks first is replaced by the next
// one the manager opens (after a restart), and the sub-call sent again
// (the manager answers one ID once).
func (s *Server) forward(ctx context.Context, call SubCall) SubResult {
	for {
		s.mu.Lock()
		var l *link
		if n := len(s.links); n > 0 {
			l = s.links[n-1]
		}
		linked := s.linked
		ch := make(chan SubResult, 1)
		s.pending[call.ID] = ch
		s.mu.Unlock()
		if l == nil {
			select {
			case <-linked:
				continue
			case <-ctx.Done():
				return SubResult{ID: call.ID, Outcome: "Cancelled", Code: codes.Cancelled, Message: "the calling body was stopped"}
			}
		}
		plain, _ := json.Marshal(call)
		l.mu.Lock()
		err := writeSealed(l.conn, subcallPrefix, subcallLabel, s.requestKey, plain)
		l.mu.Unlock()
		if err == nil {
			select {
			case res := <-ch:
				return res
			case <-l.gone:
			case <-ctx.Done():
				return SubResult{ID: call.ID, Outcome: "Cancelled", Code: codes.Cancelled, Message: "the calling body was stopped"}
			}
		}
		s.dropLink(l)
	}
}

func refuse(w io.Writer, msg string) {
	_, _ = io.WriteString(w, refusalPrefix+strings.ReplaceAll(msg, "\n", " ")+"\n")
}

// readRequest opens the one sealed request of a connection.
func (s *Server) readRequest(r *bufio.Reader, challenge string) (*Request, error) {
	line, err := readLine(r, maxHelloBytes)
	if err != nil || !strings.HasPrefix(line, requestPrefix) {
		return nil, errors.New("no request")
	}
	plain, err := readSealed(r, requestLabel, s.requestKey, strings.TrimPrefix(line, requestPrefix), MaxRequestBytes)
	if err != nil {
		return nil, errors.New("the request does not verify")
	}
	var req Request
	if err := json.Unmarshal(plain, &req); err != nil || req.Challenge != challenge {
		return nil, errors.New("the request is not for this connection")
	}
	return &req, nil
}

// accept starts the handed call, once; a collect, or a run of the call
// already handed over, only waits for its frame. connected is when the
// connection that handed it was accepted.
func (s *Server) accept(ctx context.Context, req *Request, connected time.Time) error {
	handed := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.state != StateIdle && req.Call == s.call:
		return nil
	case s.state != StateIdle:
		return errors.New("this runner serves another call")
	case req.Op != OpRun:
		return errors.New("no call was handed over")
	}
	args := filepath.Join(s.ArgumentsDir, "toolgate-arguments.json")
	if err := os.WriteFile(args, []byte(req.Arguments), 0o400); err != nil {
		return fmt.Errorf("the arguments cannot be written: %v", err)
	}
	spec := req.Spec
	spec.ArgumentsFile = args
	s.state, s.call = StateRunning, req.Call
	go func() {
		h, stdout, stderr := s.Execute(ctx, spec, []byte(req.Arguments), s.forward)
		h.ConnectedUnixMicros, h.HandedUnixMicros = connected.UnixMicro(), handed.UnixMicro()
		var b strings.Builder
		if err := WriteFrame(&b, s.frameKey, h, stdout, stderr); err != nil {
			h, stdout, stderr = Header{Error: "the frame could not be sealed", Code: codes.SandboxLost}, nil, nil
			b.Reset()
			_ = WriteFrame(&b, s.frameKey, h, stdout, stderr)
		}
		summary, _ := json.Marshal(Header{ExitCode: h.ExitCode, Signal: h.Signal, StdoutBytes: len(stdout), StderrBytes: len(stderr), Truncated: h.Truncated, BodyMillis: h.BodyMillis, BodyStartedUnixMicros: h.BodyStartedUnixMicros, BodyMicros: h.BodyMicros})
		s.mu.Lock()
		s.frame, s.summary, s.state = []byte(b.String()), summary, StateDone
		s.mu.Unlock()
		close(s.done)
	}()
	return nil
}

// readLine reads one line of at most limit bytes, without its newline.
func readLine(r *bufio.Reader, limit int) (string, error) {
	var b strings.Builder
	for b.Len() <= limit {
		c, err := r.ReadByte()
		if err != nil {
			return "", err
		}
		if c == '\n' {
			return b.String(), nil
		}
		b.WriteByte(c)
	}
	return "", errors.New("line too long")
}

// Exchange is the manager's side of one connection: it reads the runner's
// Hello, hands over req (a run becomes a collect once the runner has a
// call), answers the body's sub-calls with sub while it runs, and returns
// the runner's frame. hello, once read, is reported even
// when the exchange fails, so the caller knows whether the body started.
func Exchange(conn net.Conn, key *ecdh.PrivateKey, req Request, sub func(SubCall) SubResult) (hello *Hello, res *Result, err error) {
	g, err := Greet(conn, key)
	if err != nil {
		return g.Hello(), nil, err
	}
	res, err = g.Exchange(req, sub)
	return g.Hello(), res, err
}

// Greeted is a connection whose runner has greeted the manager, with the
// channel's keys agreed: nothing of a call is sent yet. A manager greets a
// warm pod's runner while the call's dispatch boundary and claim are
// written, and hands the call over on it once both are durable.
type Greeted struct {
	hello                *Hello
	conn                 net.Conn
	r                    *bufio.Reader
	requestKey, frameKey []byte
}

// Greet reads the runner's Hello on conn and agrees the channel's keys.
// A Greeted with the Hello is returned with any error after the Hello was
// read; nil before.
func Greet(conn net.Conn, key *ecdh.PrivateKey) (*Greeted, error) {
	r := bufio.NewReaderSize(conn, 64<<10)
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	line, err := readLine(r, maxHelloBytes)
	if err != nil {
		return nil, fmt.Errorf("runner: no greeting: %v", err)
	}
	if !strings.HasPrefix(line, helloPrefix) {
		if version, ok := strings.CutPrefix(line, greetingFamily); ok {
			version, _, _ = strings.Cut(version, " ")
			return nil, fmt.Errorf("%w: the runner speaks version %q, this manager %q", ErrProtocol, textutil.Truncate(version, 16), channelVersion)
		}
		return nil, errors.New("runner: no greeting")
	}
	hello := &Hello{}
	if err := json.Unmarshal([]byte(strings.TrimPrefix(line, helloPrefix)), hello); err != nil {
		return nil, fmt.Errorf("runner: greeting: %w", err)
	}
	g := &Greeted{hello: hello, conn: conn, r: r}
	pubBytes, err := hex.DecodeString(hello.Runner)
	if err != nil {
		return g, fmt.Errorf("runner: greeting key: %w", err)
	}
	pub, err := ecdh.X25519().NewPublicKey(pubBytes)
	if err != nil {
		return g, fmt.Errorf("runner: greeting key: %w", err)
	}
	shared, err := key.ECDH(pub)
	if err != nil {
		return g, err
	}
	g.requestKey, g.frameKey = channelKeys(shared, pubBytes)
	return g, nil
}

// Hello is the runner's greeting; nil on a nil Greeted.
func (g *Greeted) Hello() *Hello {
	if g == nil {
		return nil
	}
	return g.hello
}

// Close closes the connection.
func (g *Greeted) Close() error { return g.conn.Close() }

// Exchange hands over req on the greeted connection (a run becomes a
// collect if the runner greeted with a call), answers the body's
// sub-calls with sub while it runs, and returns the runner's frame.
func (g *Greeted) Exchange(req Request, sub func(SubCall) SubResult) (*Result, error) {
	conn, r, hello, requestKey, frameKey := g.conn, g.r, g.hello, g.requestKey, g.frameKey
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	if hello.State != StateIdle {
		if hello.Call != req.Call {
			return nil, fmt.Errorf("%w: the runner serves another call", ErrRefused)
		}
		req = Request{Op: OpCollect, Call: req.Call}
	}
	req.Challenge = hello.Challenge
	plain, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	if err := writeSealed(conn, requestPrefix, requestLabel, requestKey, plain); err != nil {
		return nil, err
	}
	_ = conn.SetDeadline(time.Time{}) // the frame comes when the body ends
	var writes sync.Mutex
	for {
		line, err := readLine(r, maxHelloBytes)
		switch {
		case err != nil:
			return nil, fmt.Errorf("runner: %w", err)
		case strings.HasPrefix(line, refusalPrefix):
			return nil, fmt.Errorf("%w: %s", ErrRefused, strings.TrimPrefix(line, refusalPrefix))
		case strings.HasPrefix(line, FramePrefix):
			return openFrame(r, frameKey, strings.TrimPrefix(line, FramePrefix))
		case strings.HasPrefix(line, subcallPrefix):
			plain, err := readSealed(r, subcallLabel, requestKey, strings.TrimPrefix(line, subcallPrefix), MaxRequestBytes)
			var call SubCall
			if err != nil || json.Unmarshal(plain, &call) != nil {
				return nil, ErrForged
			}
			go func() {
				res := SubResult{Outcome: "Failed", Code: codes.SandboxUnavailable, Message: "this manager serves no sub-calls"}
				if sub != nil {
					res = sub(call)
				}
				res.ID = call.ID
				answer, _ := json.Marshal(res)
				writes.Lock()
				defer writes.Unlock()
				_ = writeSealed(conn, subresultPrefix, subresultLabel, requestKey, answer)
			}()
		}
	}
}
