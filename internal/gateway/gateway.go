package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// Defaults of Options.
const (
	// DefaultMaxCallsPerIdentity bounds the tools/call requests one identity
	// has in flight at once, across its sessions.
	DefaultMaxCallsPerIdentity = 32
	// DefaultCallTimeout bounds how long the gateway waits for one call to
	// commit: longer than a profile's default approval deadline (15 min)
	// and a body's, so that a call waiting for a person is answered by its
	// own outcome. The call itself goes on; resubmitting it with the same
	// _meta attaches to it.
	DefaultCallTimeout = time.Hour
	// DefaultMaxRequestBytes bounds an HTTP request body: room for the
	// largest arguments a ToolCall holds (200 KiB) and the JSON-RPC envelope.
	DefaultMaxRequestBytes = 256 << 10
)

// headerSession carries the AgentSession a request is bound to (from its
// URL path) to the MCP handlers. The gateway sets it on every request,
// replacing any value a client sent.
const headerSession = "Toolgate-Bound-Session"

// Path is the URL pattern the gateway serves MCP on: one endpoint per
// AgentSession.
const Path = "/mcp/{namespace}/{session}"

// Options configure a Gateway.
type Options struct {
	// MaxCallsPerIdentity bounds one identity's tools/call requests in
	// flight (DefaultMaxCallsPerIdentity when 0).
	MaxCallsPerIdentity int
	// CallTimeout bounds the wait for one call's commit (DefaultCallTimeout
	// when 0).
	CallTimeout time.Duration
	// MaxRequestBytes bounds a request body (DefaultMaxRequestBytes when 0).
	MaxRequestBytes int64
	// KeepAlive is how often a waiting call's response stream carries a
	// progress notification or a comment (DefaultKeepAlive when 0).
	KeepAlive time.Duration
	// Registerer receives the gateway's metrics; nil registers none.
	Registerer prometheus.Registerer
	// Log receives structured logs: fixed messages, never arguments or
	// results.
	Log logr.Logger
}

// Gateway is the MCP server. Its zero value is not usable; see New.
type Gateway struct {
	auth     *Authenticator
	clients  *Clients
	opts     Options
	limiter  *limiter
	metrics  *metrics
	server   *mcp.Server
	shutdown context.Context
}

// New returns a Gateway authenticating with authn and acting through
// clients. shutdown ends when the process is stopping: a call whose client
// goes away is cancelled, unless the gateway itself is going away.
func New(shutdown context.Context, authn *Authenticator, clients *Clients, opts Options) *Gateway {
	if opts.MaxCallsPerIdentity <= 0 {
		opts.MaxCallsPerIdentity = DefaultMaxCallsPerIdentity
	}
	if opts.CallTimeout <= 0 {
		opts.CallTimeout = DefaultCallTimeout
	}
	if opts.MaxRequestBytes <= 0 {
		opts.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if opts.KeepAlive <= 0 {
		opts.KeepAlive = DefaultKeepAlive
	}
	g := &Gateway{
		auth: authn, clients: clients, opts: opts, shutdown: shutdown,
		limiter: newLimiter(opts.MaxCallsPerIdentity),
		metrics: newMetrics(opts.Registerer),
	}
	// The tool list depends on the caller's session, so tools/list and
	// tools/call are answered here, per request, rather than from tools
	// registered once on the server.
	g.server = mcp.NewServer(&mcp.Implementation{Name: "toolgate", Title: "toolgate", Version: "v1alpha1"}, &mcp.ServerOptions{
		Instructions: "Every tools/call runs through toolgate's policy pipeline and commits in model order.",
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}},
	})
	g.server.AddReceivingMiddleware(g.middleware)
	return g
}

// Handler serves MCP at Path, behind bearer-token authentication: a request
// without a valid token for the gateway's audience is answered 401 before
// anything else happens.
func (g *Gateway) Handler() http.Handler {
	mcpHandler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return g.server }, &mcp.StreamableHTTPOptions{
		MaxRequestBodyBytes: g.opts.MaxRequestBytes,
		// Stateless: every request stands alone, so any replica answers any
		// request, and the newest revision (2026-07-28, which has no MCP
		// sessions) is served; older revisions work request by request.
		Stateless: true,
		// A request's POST is its whole life: a client that aborts it has
		// cancelled the call.
		PropagateRequestCancellation: true,
	})
	verify := func(ctx context.Context, token string, r *http.Request) (*auth.TokenInfo, error) {
		info, err := g.auth.Verify(ctx, token, r)
		if errors.Is(err, auth.ErrInvalidToken) {
			g.metrics.rejected.WithLabelValues("unauthenticated").Inc()
		}
		return info, err
	}
	authed := auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{
		// TokenReview does not say when a token expires; it is asked again
		// once its answer is older than the Authenticator's ttl.
		AllowMissingExpiration: true,
	})(mcpHandler)
	mux := http.NewServeMux()
	mux.Handle(Path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ns, session := r.PathValue("namespace"), r.PathValue("session")
		if len(validation.IsDNS1123Label(ns)) > 0 || len(validation.IsDNS1123Subdomain(session)) > 0 {
			http.Error(w, "the path must be /mcp/NAMESPACE/SESSION", http.StatusNotFound)
			return
		}
		// The header read as the SDK's bearer check reads it (fields split
		// on any white space), so that every token it would review is
		// admitted here first.
		authz := strings.Fields(r.Header.Get("Authorization"))
		if len(authz) != 2 || !strings.EqualFold(authz[0], "bearer") {
			g.metrics.rejected.WithLabelValues("unauthenticated").Inc()
		} else if !g.auth.Admit(authz[1], r.RemoteAddr) {
			// A token to review, beyond the review budget: refused before
			// any TokenReview (identity.go).
			g.metrics.rejected.WithLabelValues("review_budget").Inc()
			w.Header().Set("Retry-After", "1")
			http.Error(w, "too many requests with tokens to check: retry later", http.StatusTooManyRequests)
			return
		}
		r.Header.Set(headerSession, ns+"/"+session)
		// The SDK detaches a request's handlers from its HTTP request under
		// revisions before 2026-07-28; the request's end still reaches
		// tools/call through this value (values survive the detach).
		r = r.WithContext(context.WithValue(r.Context(), requestDoneKey{}, r.Context().Done()))
		w, r, end := withStream(w, r)
		defer end()
		authed.ServeHTTP(w, r)
	}))
	return mux
}

// cacheScopePrivate is the cache scope of a result only the requesting
// identity's client may cache.
const cacheScopePrivate = "private"

// requestDoneKey carries the Done channel of a request's HTTP request.
type requestDoneKey struct{}

// requestGone returns a context ended when ctx ends or the HTTP request
// that carried it does (the client went away).
func requestGone(ctx context.Context) (context.Context, context.CancelFunc) {
	gctx, cancel := context.WithCancel(ctx)
	if done, ok := ctx.Value(requestDoneKey{}).(<-chan struct{}); ok && done != nil {
		go func() {
			select {
			case <-done:
				cancel()
			case <-gctx.Done():
			}
		}()
	}
	return gctx, cancel
}

// caller is who a request acts as, and the session it is bound to.
type caller struct {
	user      string
	namespace string
	session   string
	client    client.WithWatch
}

// middleware answers tools/list and tools/call; other methods go to the
// SDK.
func (g *Gateway) middleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		switch r := req.(type) {
		case *mcp.ListToolsRequest:
			c, err := g.caller(r.Extra)
			if err != nil {
				return nil, err
			}
			_, l, err := g.profile(ctx, c)
			if err != nil {
				return nil, err
			}
			// The list depends on the caller (its session's profile): only
			// its own client may cache it, and the profile may change at any
			// time, so it is stale at once.
			res := &mcp.ListToolsResult{Tools: l.tools, Cacheable: mcp.Cacheable{TTLMs: 0, CacheScope: cacheScopePrivate}}
			if res.Tools == nil {
				res.Tools = []*mcp.Tool{}
			}
			return res, nil
		case *mcp.CallToolRequest:
			c, err := g.caller(r.Extra)
			if err != nil {
				return nil, err
			}
			res, err := g.call(ctx, c, r)
			if err != nil {
				return nil, err
			}
			return forRevision(r.Session, res), nil
		}
		return next(ctx, method, req)
	}
}

// caller reads the authenticated identity and bound session of a request.
func (g *Gateway) caller(extra *mcp.RequestExtra) (*caller, error) {
	if extra == nil || extra.TokenInfo == nil || extra.TokenInfo.UserID == "" {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "the request is not authenticated"}
	}
	ns, session, ok := cut(extra.Header.Get(headerSession))
	if !ok {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "the request is bound to no session: use /mcp/NAMESPACE/SESSION"}
	}
	cl, err := g.clients.As(extra.TokenInfo.UserID)
	if err != nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the gateway cannot act as the caller"}
	}
	return &caller{user: extra.TokenInfo.UserID, namespace: ns, session: session, client: cl}, nil
}

func cut(s string) (string, string, bool) {
	for i := range len(s) {
		if s[i] == '/' {
			return s[:i], s[i+1:], i > 0 && i < len(s)-1
		}
	}
	return "", "", false
}

// profile reads, as the caller, the bound session and its profile, and the
// tools the caller is shown. The session must be the caller's own: only its
// owner's calls enter it.
func (g *Gateway) profile(ctx context.Context, c *caller) (*toolgatev1alpha1.AgentSession, listed, error) {
	s := &toolgatev1alpha1.AgentSession{}
	if err := c.client.Get(ctx, client.ObjectKey{Namespace: c.namespace, Name: c.session}, s); err != nil {
		return nil, listed{}, apiError(err, fmt.Sprintf("agentsession %s/%s", c.namespace, c.session))
	}
	if s.Spec.Owner != c.user {
		return nil, listed{}, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest,
			Message: fmt.Sprintf("agentsession %s/%s belongs to another identity; only its owner's calls enter it", c.namespace, c.session)}
	}
	p := &toolgatev1alpha1.ToolProfile{}
	if err := c.client.Get(ctx, client.ObjectKey{Namespace: c.namespace, Name: s.Spec.ProfileRef.Name}, p); err != nil {
		return nil, listed{}, apiError(err, fmt.Sprintf("toolprofile %s/%s", c.namespace, s.Spec.ProfileRef.Name))
	}
	return s, listTools(p, s), nil
}

// apiError turns an API error into a protocol error that says what was not
// readable, without telling a forbidden object from a missing one.
func apiError(err error, what string) error {
	if apierrors.IsNotFound(err) || apierrors.IsForbidden(err) {
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: what + " does not exist or you may not read it"}
	}
	return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the API server did not answer: " + err.Error()}
}
