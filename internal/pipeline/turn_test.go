package pipeline

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// turnHarness registers "read" (parallel when consistency is "snapshot")
// and "update" (exclusive) over shared state, and records what happened.
type turnHarness struct {
	*harness
	mu        sync.Mutex
	store     map[string]string
	events    []string // body start/finish and pre-execute, in real order
	inflight  atomic.Int32
	maxFlight atomic.Int32
}

func newTurnHarness(t *testing.T) *turnHarness {
	th := &turnHarness{harness: newHarness(t), store: map[string]string{"a": "1", "b": "2", "c": "3", "d": "4"}}
	params := `{"type":"object","properties":{"key":{"type":"string"},"value":{"type":"string"},` +
		`"consistency":{"type":"string"},"delayMs":{"type":"integer"}},"required":["key"],"additionalProperties":false}`
	body := func(write bool) func(context.Context, Arguments, *Exec) (any, error) {
		return func(ctx context.Context, a Arguments, e *Exec) (any, error) {
			n := th.inflight.Add(1)
			defer th.inflight.Add(-1)
			for {
				m := th.maxFlight.Load()
				if n <= m || th.maxFlight.CompareAndSwap(m, n) {
					break
				}
			}
			th.bodies.Add(1)
			var args struct {
				Key, Value string
				DelayMs    int
			}
			if err := a.Decode(&args); err != nil {
				return nil, err
			}
			th.event("start " + e.Call.CallID)
			select {
			case <-time.After(time.Duration(args.DelayMs) * time.Millisecond):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			th.mu.Lock()
			defer th.mu.Unlock()
			if write {
				th.store[args.Key] = args.Value
			}
			e.DeferContext(Context{Message: "ctx " + e.Call.CallID})
			th.events = append(th.events, "finish "+e.Call.CallID)
			return th.store[args.Key], nil
		}
	}
	must(t, th.reg.Register(th.scope, Definition{
		Name: "read", Parameters: params, Output: Output{Schema: `{"type":"string"}`},
		Execute: body(false),
		IsConcurrencySafe: func(a Arguments) any {
			c, _ := a.Field("consistency")
			return c == "snapshot"
		},
	}))
	must(t, th.reg.Register(th.scope, Definition{
		Name: "update", Parameters: params, Output: Output{Schema: `{"type":"string"}`},
		Execute: body(true),
	}))
	must(t, th.reg.OnPreExecute(th.scope, "allow", 0, func(_ context.Context, c Call) Decision {
		th.event("pre " + c.CallID)
		return Decision{Action: Allow}
	}))
	must(t, th.reg.OnPostExecute(th.scope, "post", 0, func(c Call, _ PostInput) PostDecision {
		th.event("post " + c.CallID)
		return PostDecision{Contexts: []string{"policy " + c.CallID}}
	}))
	return th
}

func (th *turnHarness) event(e string) {
	th.mu.Lock()
	defer th.mu.Unlock()
	th.events = append(th.events, e)
}

func (th *turnHarness) index(e string) int {
	th.mu.Lock()
	defer th.mu.Unlock()
	return slices.Index(th.events, e)
}

// inOrder reports whether the events happened, in this order.
func (th *turnHarness) inOrder(events ...string) bool {
	last := -1
	for _, e := range events {
		i := th.index(e)
		if i <= last {
			return false
		}
		last = i
	}
	return true
}

func call(id, tool, args string) Request {
	return Request{CallID: id, Tool: tool, Arguments: args, Session: "s", Turn: 1}
}

func ids(rs []Result) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.CallID
	}
	return out
}

// TestTurnCommitsInModelOrderWhenTheFirstBodyIsSlowest is the seed's
// example: read A, read B, update C, read D.
func TestTurnCommitsInModelOrderWhenTheFirstBodyIsSlowest(t *testing.T) {
	th := newTurnHarness(t)
	p := th.pipeline(Options{})
	var committed []string
	res := p.RunTurn(context.Background(), []Request{
		call("A", "read", `{"key":"a","consistency":"snapshot","delayMs":80}`),
		call("B", "read", `{"key":"b","consistency":"snapshot"}`),
		call("C", "update", `{"key":"a","value":"written"}`),
		call("D", "read", `{"key":"a","consistency":"snapshot"}`),
	}, TurnOptions{MaxParallel: 4, Commit: func(r Result) {
		committed = append(committed, r.CallID)
	}})

	if want := []string{"A", "B", "C", "D"}; !slices.Equal(ids(res.Results), want) || !slices.Equal(committed, want) {
		t.Fatalf("committed %v / results %v, want %v", committed, ids(res.Results), want)
	}
	if want := []Mode{Parallel, Parallel, Exclusive, Parallel}; !slices.Equal(res.Modes, want) {
		t.Errorf("modes %v, want %v", res.Modes, want)
	}
	// B finished before A: the bodies overlapped...
	if th.index("finish B") > th.index("finish A") {
		t.Errorf("B did not finish first: %v", th.events)
	}
	// ...yet post-execute followed model order.
	if !th.inOrder("post A", "post B", "post C", "post D") {
		t.Errorf("post-execute out of model order: %v", th.events)
	}
	// Pre-execute followed model order.
	if !th.inOrder("pre A", "pre B", "pre C", "pre D") {
		t.Errorf("pre-execute out of model order: %v", th.events)
	}
	// C is a barrier: it starts after A and B committed, D after C.
	if !th.inOrder("post B", "pre C") || !th.inOrder("post C", "pre D") {
		t.Errorf("the exclusive call was not a barrier: %v", th.events)
	}
	// D reads what C wrote: read-after-write ordering held.
	if res.Results[3].Value != `"written"` || res.Results[0].Value != `"1"` {
		t.Errorf("values %q %q", res.Results[0].Value, res.Results[3].Value)
	}
	// Contexts are released after the turn, in call order, tool first.
	var got []string
	for _, c := range res.Contexts {
		got = append(got, c.Message)
	}
	want := []string{"ctx A", "policy A", "ctx B", "policy B", "ctx C", "policy C", "ctx D", "policy D"}
	if !slices.Equal(got, want) {
		t.Errorf("contexts %v, want %v", got, want)
	}
	if th.bodies.Load() != 4 || th.results.Load() != 4 {
		t.Errorf("bodies %d results %d", th.bodies.Load(), th.results.Load())
	}
}

// TestTurnPoolBound: 12 parallel reads with maxParallel 3 never have more
// than 3 bodies in flight, and do overlap.
func TestTurnPoolBound(t *testing.T) {
	th := newTurnHarness(t)
	p := th.pipeline(Options{})
	var reqs []Request
	for i := range 12 {
		reqs = append(reqs, call(fmt.Sprintf("r%02d", i), "read", fmt.Sprintf(`{"key":"a","consistency":"snapshot","delayMs":%d}`, 5+(11-i)*2)))
	}
	res := p.RunTurn(context.Background(), reqs, TurnOptions{MaxParallel: 3})
	if got := th.maxFlight.Load(); got > 3 || got < 2 {
		t.Fatalf("max bodies in flight %d, want 2..3", got)
	}
	want := make([]string, 12)
	for i := range want {
		want[i] = fmt.Sprintf("r%02d", i)
	}
	if !slices.Equal(ids(res.Results), want) {
		t.Errorf("order %v", ids(res.Results))
	}
}

// TestTurnReclassifiesImmediatelyBeforeStart: the classifier's answer can
// change while the turn runs; each call is classified when it starts.
func TestTurnReclassifiesImmediatelyBeforeStart(t *testing.T) {
	h := newHarness(t)
	var safe atomic.Bool
	safe.Store(true)
	must(t, h.reg.Register(h.scope, Definition{
		Name: "toggle", Parameters: `{"type":"object"}`, Output: Output{Schema: `{"type":"string"}`},
		IsConcurrencySafe: func(Arguments) any { return safe.Load() },
		Execute: func(context.Context, Arguments, *Exec) (any, error) {
			safe.Store(false) // e.g. a policy change after the first body
			return "ok", nil
		},
	}))
	h.allowAll()
	res := h.pipeline(Options{}).RunTurn(context.Background(), []Request{
		call("1", "toggle", `{}`), call("2", "toggle", `{}`), call("3", "toggle", `{}`),
	}, TurnOptions{MaxParallel: 1})
	if want := []Mode{Parallel, Exclusive, Exclusive}; !slices.Equal(res.Modes, want) {
		t.Errorf("modes %v, want %v", res.Modes, want)
	}
}

// TestClassification: only the exact value true is parallel.
func TestClassification(t *testing.T) {
	h := newHarness(t)
	reg := func(name string, fn func(Arguments) any) {
		must(t, h.reg.Register(h.scope, Definition{
			Name: name, Parameters: echoParams, Output: Output{Schema: `{}`}, IsConcurrencySafe: fn,
			Execute: func(context.Context, Arguments, *Exec) (any, error) { return nil, nil },
		}))
	}
	reg("true", func(Arguments) any { return true })
	reg("truthy-string", func(Arguments) any { return "true" })
	reg("one", func(Arguments) any { return 1 })
	reg("false", func(Arguments) any { return false })
	reg("panics", func(Arguments) any { panic("boom") })
	reg("undeclared", nil)
	p := h.pipeline(Options{})
	for tool, want := range map[string]Mode{
		"true": Parallel, "truthy-string": Exclusive, "one": Exclusive, "false": Exclusive,
		"panics": Exclusive, "undeclared": Exclusive, "unknown": Exclusive,
	} {
		if got := p.Classify(req(tool, `{"text":"x"}`)); got != want {
			t.Errorf("%s: %s, want %s", tool, got, want)
		}
	}
	if got := p.Classify(req("true", `{"text":1}`)); got != Exclusive {
		t.Errorf("invalid arguments classified %s", got)
	}
}

// TestTurnSettlesDeniedAndFailedCallsInOrder: a denial in the middle of a
// parallel group still yields one result per call, in order.
func TestTurnSettlesDeniedAndFailedCallsInOrder(t *testing.T) {
	th := newTurnHarness(t)
	must(t, th.reg.AddGuard(th.scope, "no-key-b", func(c Call) (string, bool) {
		k, _ := c.Args.Field("key")
		return "b is off limits", k == "b"
	}))
	res := th.pipeline(Options{}).RunTurn(context.Background(), []Request{
		call("1", "read", `{"key":"a","consistency":"snapshot","delayMs":30}`),
		call("2", "read", `{"key":"b","consistency":"snapshot"}`),
		call("3", "read", `{"bad":true}`),
		call("4", "nope", `{}`),
	}, TurnOptions{MaxParallel: 4})
	got := make([]string, len(res.Results))
	for i, r := range res.Results {
		got[i] = r.CallID + ":" + string(r.Code)
	}
	want := []string{"1:", "2:guard_denied", "3:invalid_arguments", "4:unknown_tool"}
	if !slices.Equal(got, want) {
		t.Fatalf("results %v, want %v", got, want)
	}
}
