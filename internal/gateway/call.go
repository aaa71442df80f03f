package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/codes"
	"github.com/toolgate/toolgate/pkg/agent"
)

// The gateway's own codes, for answers given without a ToolCall result
// (beside the pipeline's codes in internal/codes).
const (
	// CodeConcurrencyLimit: the identity has MaxCallsPerIdentity calls in
	// flight; nothing was created, retry once one returns.
	CodeConcurrencyLimit = "concurrency_limit"
	// CodeGatewayTimeout: the call did not commit within the gateway's
	// CallTimeout; it goes on, and resubmitting it with the same _meta
	// attaches to it.
	CodeGatewayTimeout = "gateway_timeout"
	// CodeRefused: the API server refused to create the call (RBAC or
	// admission); its message says why.
	CodeRefused = "refused"
	// CodeCallDeleted: the ToolCall was deleted before it committed.
	CodeCallDeleted = "call_deleted"
)

// maxTurnProbes bounds the turns tried for a call without a turn in its
// _meta (each try is one create that found the turn taken).
const maxTurnProbes = 64

// cancelTimeout bounds the cancellation written for a client that went away.
const cancelTimeout = 10 * time.Second

// call answers one tools/call: one ToolCall, created as the caller, watched
// until it commits.
func (g *Gateway) call(ctx context.Context, c *caller, r *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	start := time.Now()
	ctx, gone := requestGone(ctx)
	defer gone()
	name := r.Params.Name
	release, ok := g.limiter.acquire(c.user)
	if !ok {
		g.metrics.rejected.WithLabelValues(CodeConcurrencyLimit).Inc()
		return g.answer(start, toolUnlisted, refusal(CodeConcurrencyLimit,
			fmt.Sprintf("you already have %d tools/call requests in flight, the gateway's limit per identity; nothing was created: retry once one returns", g.opts.MaxCallsPerIdentity))), nil
	}
	defer release()

	session, l, err := g.profile(ctx, c)
	if err != nil {
		return nil, err
	}
	label := name
	if !l.has(name) {
		label = toolUnlisted
	}
	meta, err := withHeaders(r.Params.Meta, r.Extra)
	if err != nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: err.Error()}
	}
	pos, err := placement(meta)
	if err != nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: err.Error()}
	}
	args := string(r.Params.Arguments)
	if len(r.Params.Arguments) == 0 || string(r.Params.Arguments) == "null" {
		args = "{}"
	}
	if len(args) > toolgatev1alpha1.MaxArgumentsBytes {
		return g.answer(start, label, refusal(codes.InvalidArguments,
			fmt.Sprintf("the arguments are %d bytes, more than a call may carry (%d); nothing was created", len(args), toolgatev1alpha1.MaxArgumentsBytes))), nil
	}
	if !l.has(name) && !validToolName(name) {
		// The API server would refuse the name; answer as for any tool the
		// session does not list.
		return g.answer(start, label, refusal(codes.UnknownTool, unknownTool(name))), nil
	}

	traceparent, end := callSpan(ctx, r, c, label)
	defer end()
	tc, res := g.submit(ctx, c, session, pos, name, args, traceparent)
	if res != nil {
		return g.answer(start, label, res), nil
	}
	waitCtx, cancel := context.WithTimeout(ctx, g.opts.CallTimeout)
	defer cancel()
	w := g.waiter(ctx, r, tc)
	stop := w.keep(g.opts.KeepAlive)
	tc, err = agent.AwaitCall(waitCtx, c.client, tc, w.observe)
	stop()
	switch {
	case err == nil:
	case errors.Is(err, agent.ErrCallDeleted):
		return g.answer(start, label, refusal(CodeCallDeleted, fmt.Sprintf("toolcall %s was deleted before it committed", tc.Name))), nil
	case ctx.Err() != nil:
		// The client is gone (it cancelled, or dropped the request): nobody
		// waits for this call any more, so it is cancelled, unless it is the
		// gateway that is going away.
		if g.shutdown.Err() == nil {
			g.cancel(ctx, c, tc)
		}
		g.metrics.calls.WithLabelValues(label, "ClientGone").Inc()
		return nil, ctx.Err()
	case waitCtx.Err() != nil:
		return g.answer(start, label, refusal(CodeGatewayTimeout,
			fmt.Sprintf("toolcall %s did not commit within %s; it goes on: call again with the same _meta to receive its result", tc.Name, g.opts.CallTimeout))), nil
	default:
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "watching the call failed: " + err.Error()}
	}
	return g.answer(start, label, toResult(tc, l)), nil
}

// answer records the metrics of a result and returns it.
func (g *Gateway) answer(start time.Time, tool string, res *mcp.CallToolResult) *mcp.CallToolResult {
	outcome, _ := res.Meta[agent.MetaOutcome].(string)
	if code, _ := res.Meta[agent.MetaCode].(string); outcome == "" {
		outcome = code
	}
	g.metrics.calls.WithLabelValues(tool, outcome).Inc()
	g.metrics.duration.WithLabelValues(tool, outcome).Observe(time.Since(start).Seconds())
	return res
}

// position is where a call goes in its session's model order.
type position struct {
	turn     int64
	index    int32
	turnSize int32
	callID   string
	// auto: no turn was given; the call is a turn of its own after the
	// session's current one.
	auto bool
}

// placement reads a call's position from its _meta. Without a turn, the
// call is a turn of its own (index 0, size 1) placed after the session's
// current turn, so such calls run one after another in the order they
// arrive.
func placement(m mcp.Meta) (position, error) {
	p := position{turnSize: 1}
	// A misspelt key would otherwise place the call somewhere the client
	// did not mean, silently.
	for key := range m {
		if strings.HasPrefix(key, agent.MetaPrefix) && !slices.Contains(placementKeys, key) {
			return p, fmt.Errorf("unknown _meta key %q: toolgate reads %s", key, strings.Join(placementKeys, ", "))
		}
	}
	turn, hasTurn, err := metaInt(m, agent.MetaTurn, 0, 1_000_000_000)
	if err != nil {
		return p, err
	}
	size, hasSize, err := metaInt(m, agent.MetaTurnSize, 1, 1024)
	if err != nil {
		return p, err
	}
	index, hasIndex, err := metaInt(m, agent.MetaIndex, 0, 1023)
	if err != nil {
		return p, err
	}
	if !hasTurn {
		if hasSize || hasIndex {
			return p, fmt.Errorf("_meta %q and %q need %q", agent.MetaIndex, agent.MetaTurnSize, agent.MetaTurn)
		}
		p.auto = true
	}
	p.turn, p.index = turn, int32(index)
	if hasSize {
		p.turnSize = int32(size)
	}
	if p.index >= p.turnSize {
		return p, fmt.Errorf("_meta %q (%d) must be below %q (%d)", agent.MetaIndex, p.index, agent.MetaTurnSize, p.turnSize)
	}
	if v, ok := m[agent.MetaCallID]; ok {
		s, isString := v.(string)
		if !isString || s == "" {
			return p, fmt.Errorf("_meta %q must be a non-empty string", agent.MetaCallID)
		}
		p.callID = s
	}
	return p, nil
}

// placementHeaders carry a call's position for clients that can set HTTP
// headers on a call but not its _meta (LangChain's MCP adapters): each
// header stands for the _meta key it maps to.
var placementHeaders = map[string]string{
	"Toolgate-Turn":      agent.MetaTurn,
	"Toolgate-Index":     agent.MetaIndex,
	"Toolgate-Turn-Size": agent.MetaTurnSize,
	"Toolgate-Call-Id":   agent.MetaCallID,
}

// withHeaders returns the call's _meta with the position its request's
// headers carry, if any. A call gives its position in one of the two, never
// both.
func withHeaders(m mcp.Meta, extra *mcp.RequestExtra) (mcp.Meta, error) {
	if extra == nil {
		return m, nil
	}
	fromHeaders := mcp.Meta{}
	for header, key := range placementHeaders {
		v := extra.Header.Get(header)
		if v == "" {
			continue
		}
		fromHeaders[key] = v
		if key != agent.MetaCallID {
			// Numbers arrive as text; one that does not parse stays text, so
			// that placement refuses it as it refuses any other.
			if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				fromHeaders[key] = float64(n)
			}
		}
	}
	if len(fromHeaders) == 0 {
		return m, nil
	}
	for key, v := range m {
		if strings.HasPrefix(key, agent.MetaPrefix) {
			return nil, fmt.Errorf("the call's position is in both its _meta (%q) and its Toolgate- headers: give it in one", key)
		}
		fromHeaders[key] = v
	}
	return fromHeaders, nil
}

// placementKeys are the _meta keys of toolgate's prefix a request may carry.
var placementKeys = []string{agent.MetaTurn, agent.MetaIndex, agent.MetaTurnSize, agent.MetaCallID}

// metaInt reads an integer in [lo, hi] from _meta (JSON numbers arrive as
// float64).
func metaInt(m mcp.Meta, key string, lo, hi int64) (int64, bool, error) {
	v, ok := m[key]
	if !ok {
		return 0, false, nil
	}
	var n float64
	switch x := v.(type) {
	case float64:
		n = x
	case json.Number:
		f, err := x.Float64()
		if err != nil {
			return 0, true, fmt.Errorf("_meta %q must be an integer", key)
		}
		n = f
	default:
		return 0, true, fmt.Errorf("_meta %q must be an integer", key)
	}
	if n != math.Trunc(n) || n < float64(lo) || n > float64(hi) {
		return 0, true, fmt.Errorf("_meta %q must be an integer from %d to %d", key, lo, hi)
	}
	return int64(n), true, nil
}

// submit creates the call as the caller, or finds the one a previous
// attempt of the same request created. A non-nil result answers the request
// instead (nothing to wait for).
func (g *Gateway) submit(ctx context.Context, c *caller, s *toolgatev1alpha1.AgentSession, pos position, tool, args, traceparent string) (*toolgatev1alpha1.ToolCall, *mcp.CallToolResult) {
	turn := pos.turn
	if pos.auto {
		turn = agent.StartTurn(s)
	}
	for range maxTurnProbes {
		place := agent.Place{Turn: turn, Index: pos.index, TurnSize: pos.turnSize, CallID: pos.callID}
		tc := agent.NewCall(c.namespace, c.session, place, tool, args, c.user)
		if traceparent != "" {
			tc.Annotations = map[string]string{toolgatev1alpha1.AnnotationTraceparent: traceparent}
		}
		// A transient error is sent again; the same request again (a
		// retry, or a client attaching after a timeout) finds its call,
		// and a create that landed before its error is the same call too.
		found, err := agent.CreateCall(ctx, c.client, tc, !pos.auto)
		switch {
		case err == nil:
			return found, nil
		case !apierrors.IsAlreadyExists(err):
			return nil, createRefusal(err)
		case pos.auto:
			turn++
			continue
		}
		return nil, refusal(codes.DuplicateCall, fmt.Sprintf("turn %d index %d of the session already holds another call (toolcall %s)", turn, pos.index, found.Name))
	}
	return nil, refusal(codes.DuplicateCall, fmt.Sprintf("no free turn found after %d tries; send the turn in _meta %q", maxTurnProbes, agent.MetaTurn))
}

// createRefusal answers an API server's refusal to create a call.
func createRefusal(err error) *mcp.CallToolResult {
	if apierrors.IsForbidden(err) || apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) {
		return refusal(CodeRefused, "the API server refused the call: "+err.Error())
	}
	return refusal(CodeRefused, "the API server did not take the call: "+err.Error())
}

// cancel asks, as the caller, for the call to be cancelled; the pipeline
// stops its body and settles it as cancelled.
func (g *Gateway) cancel(ctx context.Context, c *caller, tc *toolgatev1alpha1.ToolCall) {
	cctx, done := context.WithTimeout(context.WithoutCancel(ctx), cancelTimeout)
	defer done()
	patch := client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"cancelRequested":true}}`))
	obj := &toolgatev1alpha1.ToolCall{ObjectMeta: metav1.ObjectMeta{Namespace: tc.Namespace, Name: tc.Name}}
	if err := c.client.Patch(cctx, obj, patch); err != nil {
		g.opts.Log.Error(err, "cancelling a call whose client went away failed", "namespace", tc.Namespace, "toolcall", tc.Name)
		return
	}
	g.opts.Log.Info("call cancelled: its client went away", "namespace", tc.Namespace, "toolcall", tc.Name)
}
