package pipeline

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/lifecycle"
)

// fakeClock is an injected clock tests move by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// harness is a registry, a scope and counters for one test.
type harness struct {
	t       *testing.T
	reg     *Registry
	scope   *lifecycle.Scope
	clock   *fakeClock
	bodies  atomic.Int32
	results atomic.Int32
	// finalized counts FinalizeContent runs of tools made by echo.
	finalized atomic.Int32
	observed  []ResultView
	mu        sync.Mutex
	seen      []Call // identities seen by stages, for immutability checks
}

func newHarness(t *testing.T) *harness {
	h := &harness{t: t, reg: NewRegistry(), scope: lifecycle.NewScope(), clock: newFakeClock()}
	t.Cleanup(h.scope.Dispose)
	must(t, h.reg.Observe(h.scope, "count", func(v ResultView) {
		h.results.Add(1)
		h.mu.Lock()
		h.observed = append(h.observed, v)
		h.mu.Unlock()
	}))
	return h
}

func (h *harness) see(c Call) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seen = append(h.seen, c)
}

func (h *harness) pipeline(opts Options) *Pipeline {
	opts.Clock = h.clock
	n := 0
	var mu sync.Mutex
	opts.NewToken = func() string {
		mu.Lock()
		defer mu.Unlock()
		n++
		return fmt.Sprintf("tok-%d", n)
	}
	return New(h.reg, opts)
}

const echoParams = `{"type":"object","properties":{"text":{"type":"string"},"delay":{"type":"integer"}},"required":["text"],"additionalProperties":false}`

// echo registers a tool returning its text; body customises the body.
func (h *harness) echo(name string, edit func(*Definition)) {
	def := Definition{
		Name:        name,
		Description: "echo",
		Parameters:  echoParams,
		Output:      Output{Schema: `{"type":"string"}`},
		Execute: func(ctx context.Context, args Arguments, exec *Exec) (any, error) {
			h.bodies.Add(1)
			h.see(exec.Call)
			text, _ := args.Field("text")
			return text, nil
		},
		FinalizeContent: func(content string, _ ResultView) string {
			h.finalized.Add(1)
			return content
		},
	}
	if edit != nil {
		edit(&def)
	}
	must(h.t, h.reg.Register(h.scope, def))
}

func (h *harness) allowAll() {
	must(h.t, h.reg.OnPreExecute(h.scope, "allow-all", 0, func(_ context.Context, c Call) Decision {
		h.see(c)
		return Decision{Action: Allow, Reason: "allow-all"}
	}))
}

func req(tool, args string) Request {
	return Request{CallID: "call-1", Tool: tool, Arguments: args, Requester: "agent", Session: "s"}
}

// trace renders a state's records as "stage:verdict".
func trace(st *State) string {
	parts := make([]string, len(st.Records))
	for i, r := range st.Records {
		parts[i] = string(r.Stage) + ":" + r.Verdict
	}
	return strings.Join(parts, " ")
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// staticApprover answers every question the same way and counts them.
type staticApprover struct {
	answer Answer
	msg    string
	asked  atomic.Int32
}

func (a *staticApprover) Approve(_ context.Context, _ Question) (Answer, string) {
	a.asked.Add(1)
	return a.answer, a.msg
}
