package gateway

import (
	"context"
	"fmt"
	"mime"
	"net/http"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/pkg/agent"
)

// DefaultKeepAlive is how often a tools/call's response stream carries
// something while its call waits. HTTP clients end a response that stays
// silent: Node's fetch (undici) after 300 s without headers or without a
// body byte, proxies after their idle timeout (often 60 s). A person's
// approval takes longer than any of them.
const DefaultKeepAlive = 15 * time.Second

// streamKey carries a request's streamWriter to its tools/call handler.
type streamKey struct{}

// streamWriter is a request's response writer, shared by the SDK (its
// events) and the call's keeper (its keep-alives). Each SDK event is one
// Write, so serializing the writes keeps events whole.
type streamWriter struct {
	http.ResponseWriter

	mu    sync.Mutex
	ended bool // the handler returned: nothing may be written any more
}

func (s *streamWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ResponseWriter.Write(p)
}

func (s *streamWriter) WriteHeader(code int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ResponseWriter.WriteHeader(code)
}

// FlushError flushes under the lock (http.ResponseController asks for it
// before unwrapping).
func (s *streamWriter) FlushError() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return http.NewResponseController(s.ResponseWriter).Flush()
}

// Unwrap lets http.ResponseController reach the connection's other controls.
func (s *streamWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// end marks the response finished.
func (s *streamWriter) end() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ended = true
}

// comment writes an SSE comment line, which every SSE reader skips, and
// flushes it: the response's headers reach the client at once, and then its
// body is never silent for long. It writes nothing unless the response is
// an open event stream (the SDK chose it and set its headers before the
// handler was called).
func (s *streamWriter) comment() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return
	}
	if mt, _, err := mime.ParseMediaType(s.Header().Get("Content-Type")); err != nil || mt != "text/event-stream" {
		return
	}
	if _, err := s.ResponseWriter.Write([]byte(": waiting\n\n")); err != nil {
		return
	}
	_ = http.NewResponseController(s.ResponseWriter).Flush()
}

// withStream wraps w for the request's handlers; the returned function ends
// it, once the request is answered.
func withStream(w http.ResponseWriter, r *http.Request) (http.ResponseWriter, *http.Request, func()) {
	s := &streamWriter{ResponseWriter: w}
	return s, r.WithContext(context.WithValue(r.Context(), streamKey{}, s)), s.end
}

// waiter keeps one tools/call's client informed while its call goes on: a
// progress notification at each phase (when the client asked for progress)
// and, every interval, either the same again with how long it has lasted or
// an SSE comment, so that no client's or proxy's idle timeout ends the wait.
type waiter struct {
	ctx    context.Context
	req    *mcp.CallToolRequest
	stream *streamWriter // nil when the request did not come through Handler
	log    logr.Logger

	// The call's name: the object AwaitCall updates is read only by
	// observe, on its goroutine.
	name, namespace string

	mu    sync.Mutex
	phase toolgatev1alpha1.ToolCallPhase // the last phase told, "" for none
	since time.Time                      // when the call entered it
	step  float64
}

func (g *Gateway) waiter(ctx context.Context, r *mcp.CallToolRequest, tc *toolgatev1alpha1.ToolCall) *waiter {
	s, _ := ctx.Value(streamKey{}).(*streamWriter)
	return &waiter{ctx: ctx, req: r, stream: s, log: g.opts.Log, name: tc.Name, namespace: tc.Namespace, since: time.Now()}
}

// keep writes at once, then beats every interval until the returned
// function is called (it returns once the waiter writes no more).
func (w *waiter) keep(interval time.Duration) func() {
	if w.stream != nil {
		w.stream.comment()
	}
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-w.ctx.Done():
				return
			case <-t.C:
				w.beat()
			}
		}
	}()
	return func() {
		close(stop)
		<-stopped
	}
}

// observe is told of every version of the call (agent.AwaitCall's
// observer, which may hand the same object updated in place); a new phase
// is a progress notification.
func (w *waiter) observe(tc *toolgatev1alpha1.ToolCall) {
	phase := tc.Status.Phase
	w.mu.Lock()
	defer w.mu.Unlock()
	if phase == w.phase || phase == "" {
		return
	}
	w.phase, w.since = phase, time.Now()
	w.notify("")
}

// beat repeats the call's phase with how long it has lasted, or writes a
// comment when the client asked for no progress.
func (w *waiter) beat() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.req.Params.GetProgressToken() == nil || w.req.Session == nil || w.phase == "" {
		if w.stream != nil {
			w.stream.comment()
		}
		return
	}
	w.notify(fmt.Sprintf(" (for %s)", time.Since(w.since).Round(time.Second)))
}

// notify sends a progress notification of the call's phase, naming the
// ApprovalRequest while the call waits for a person. Progress only grows,
// as the protocol asks. Called with w.mu held.
func (w *waiter) notify(lasted string) {
	token := w.req.Params.GetProgressToken()
	if token == nil || w.req.Session == nil {
		return
	}
	name, ns := w.name, w.namespace
	w.step++
	p := &mcp.ProgressNotificationParams{ProgressToken: token, Progress: w.step,
		Message: fmt.Sprintf("toolcall %s: %s%s", name, w.phase, lasted),
		Meta:    mcp.Meta{agent.MetaToolCall: name},
	}
	if w.phase == toolgatev1alpha1.PhaseAwaitingApproval {
		// The ApprovalRequest is named after its call.
		p.Message = fmt.Sprintf("toolcall %s waits for a person to approve approvalrequest/%s in namespace %s (kubectl toolgate approve %s -n %s)%s",
			name, name, ns, name, ns, lasted)
		p.Meta[agent.MetaApprovalRequest] = name
	}
	if err := w.req.Session.NotifyProgress(w.ctx, p); err != nil {
		w.log.V(1).Info("progress notification not delivered", "namespace", ns, "toolcall", name)
	}
}
