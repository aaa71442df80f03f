package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"golang.org/x/time/rate"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
)

// serviceAccountPrefix starts the username of every ServiceAccount.
const serviceAccountPrefix = "system:serviceaccount:"

// maxCachedReviews bounds each cache of TokenReview answers; a full cache
// is emptied rather than grown.
const maxCachedReviews = 4096

// A flood of made-up tokens must not cost a TokenReview each, nor make a
// valid caller wait behind them (they share the gateway's client-side
// rate limit to the API server). A token is reviewed only if it looks like
// a ServiceAccount token for the gateway's audience (a JWT whose claims,
// unverified, name the audience and have not expired), was not refused in
// the last refusalTTL, and the review budget allows it: reviewsPerSecond
// (reviewBurst at once) across all callers, and sourceReviewsPerSecond
// (sourceReviewBurst) for one client address. A token remembered as
// accepted needs no review and no budget.
const (
	refusalTTL = 30 * time.Second
	// Below the gateway's client-side limit (identityQPS), so that reviews
	// never queue there.
	reviewsPerSecond = 40
	reviewBurst      = 80
	// Room for a hundred callers behind one proxy, each reviewed once per
	// DefaultReviewTTL.
	sourceReviewsPerSecond = 10
	sourceReviewBurst      = 20
	// One namespace's ServiceAccounts (any number of tokens, from any
	// number of addresses) spend at most this much: a namespace whose
	// tokens are valid but useless cannot starve another's agents.
	namespaceReviewsPerSecond = 10
	namespaceReviewBurst      = 20
	maxTokenBytes             = 16 << 10
	expiryLeeway              = time.Minute
)

// Authenticator checks bearer tokens with the API server's TokenReview,
// requiring the gateway's audience, and accepts ServiceAccounts only: those
// are the identities the gateway is allowed to impersonate.
type Authenticator struct {
	reviews  kubernetes.Interface
	audience string
	ttl      time.Duration
	clock    clock.PassiveClock

	mu          sync.Mutex
	cache       map[[sha256.Size]byte]review
	refused     map[[sha256.Size]byte]time.Time // until when
	budget      *rate.Limiter
	bySource    map[string]*rate.Limiter
	byNamespace map[string]*rate.Limiter
	keys        *issuerKeys // nil: signatures are left to the TokenReview
}

// TrustIssuerKeys makes a verify tokens' signatures with the keys fetch
// returns (the API server's /openid/v1/jwks) before spending a review on
// them (issuerkeys.go). Call it before serving.
func (a *Authenticator) TrustIssuerKeys(fetch func(ctx context.Context) ([]byte, error), logger logr.Logger) {
	a.keys = &issuerKeys{fetch: fetch, clock: a.clock, log: logger}
	a.keys.mu.Lock()
	a.keys.startFetch(a.clock.Now()) // now, not with the first caller
	a.keys.mu.Unlock()
}

type review struct {
	user    string
	expires time.Time
}

// NewAuthenticator returns an Authenticator asking reviews (the gateway's own
// credentials, which need create on tokenreviews) about tokens for audience.
// A positive answer is remembered for ttl, so a revoked token may still be
// accepted for that long; 0 asks every time.
func NewAuthenticator(reviews kubernetes.Interface, audience string, ttl time.Duration, clk clock.PassiveClock) *Authenticator {
	return &Authenticator{
		reviews: reviews, audience: audience, ttl: ttl, clock: clk,
		cache: map[[sha256.Size]byte]review{}, refused: map[[sha256.Size]byte]time.Time{},
		budget: rate.NewLimiter(reviewsPerSecond, reviewBurst), bySource: map[string]*rate.Limiter{}, byNamespace: map[string]*rate.Limiter{},
	}
}

// errNotServiceAccount refuses identities the gateway cannot act as.
var errNotServiceAccount = errors.New("only ServiceAccount tokens are accepted")

// Admit reports whether a request carrying token may be answered now: a
// token remembered (accepted or refused) or one that is not a token for
// the audience at all costs nothing; any other spends the review budget,
// overall and of the request's source address. A request refused here is
// answered 429 without a TokenReview.
func (a *Authenticator) Admit(token, remoteAddr string) bool {
	key := sha256.Sum256([]byte(token))
	now := a.clock.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, known := a.remembered(key, now); known {
		return true // answered from memory
	}
	problem, ns := a.inspect(token, now)
	if problem != "" {
		return true // refused without a review
	}
	// The source's budget first, then the namespace's: one flooding
	// address, or one namespace's tokens from many, never spends the
	// budget others need.
	if !limiterOf(a.bySource, sourceOf(remoteAddr), sourceReviewsPerSecond, sourceReviewBurst).AllowN(now, 1) {
		return false
	}
	if ns != "" &&
		!limiterOf(a.byNamespace, ns, namespaceReviewsPerSecond, namespaceReviewBurst).AllowN(now, 1) {
		return false
	}
	return a.budget.AllowN(now, 1)
}

// limiterOf is key's limiter in m, made when missing (a full map is
// emptied rather than grown).
func limiterOf(m map[string]*rate.Limiter, key string, perSecond rate.Limit, burst int) *rate.Limiter {
	l, ok := m[key]
	if !ok {
		if len(m) >= maxCachedReviews {
			clear(m)
		}
		l = rate.NewLimiter(perSecond, burst)
		m[key] = l
	}
	return l
}

// sourceOf is the budget a client address spends: its IP, or for IPv6
// its /64, which one host is commonly given whole.
func sourceOf(remoteAddr string) string {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	ip = ip.Unmap()
	if ip.Is6() {
		return netip.PrefixFrom(ip.WithZone(""), 64).Masked().String()
	}
	return ip.String()
}

// Verify is an auth.TokenVerifier: it answers the identity of a valid token
// (UserID is the ServiceAccount's username) or an error wrapping
// auth.ErrInvalidToken, which the transport answers with 401.
func (a *Authenticator) Verify(ctx context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
	key := sha256.Sum256([]byte(token))
	now := a.clock.Now()
	a.mu.Lock()
	user, known := a.remembered(key, now)
	problem := ""
	if !known {
		problem = a.shapeProblem(token, now)
	}
	a.mu.Unlock()
	switch {
	case known && user != "":
		return &auth.TokenInfo{UserID: user}, nil
	case known:
		return nil, fmt.Errorf("%w: refused in the last %s", auth.ErrInvalidToken, refusalTTL)
	case problem != "":
		return nil, fmt.Errorf("%w: %s", auth.ErrInvalidToken, problem)
	}
	tr, err := a.reviews.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: []string{a.audience}},
	}, metav1.CreateOptions{})
	if err != nil {
		// Not the caller's fault: 500, and nothing remembered.
		return nil, fmt.Errorf("reviewing the token: %w", err)
	}
	if !tr.Status.Authenticated || !slices.Contains(tr.Status.Audiences, a.audience) {
		a.refuse(key, now)
		return nil, fmt.Errorf("%w: not a valid token for audience %q", auth.ErrInvalidToken, a.audience)
	}
	user = tr.Status.User.Username
	if !strings.HasPrefix(user, serviceAccountPrefix) {
		a.refuse(key, now)
		return nil, fmt.Errorf("%w: %w", auth.ErrInvalidToken, errNotServiceAccount)
	}
	if a.ttl > 0 {
		a.mu.Lock()
		if len(a.cache) >= maxCachedReviews {
			clear(a.cache)
		}
		a.cache[key] = review{user: user, expires: now.Add(a.ttl)}
		a.mu.Unlock()
	}
	return &auth.TokenInfo{UserID: user}, nil
}

// remembered is what a.mu's holder remembers of the token of key now: its
// user when accepted, "" when refused; known false when neither.
func (a *Authenticator) remembered(key [sha256.Size]byte, now time.Time) (user string, known bool) {
	if r, ok := a.cache[key]; ok && now.Before(r.expires) {
		return r.user, true
	}
	if until, ok := a.refused[key]; ok && now.Before(until) {
		return "", true
	}
	return "", false
}

// refuse remembers a refused token for refusalTTL.
func (a *Authenticator) refuse(key [sha256.Size]byte, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.refused) >= maxCachedReviews {
		clear(a.refused)
	}
	a.refused[key] = now.Add(refusalTTL)
}

// shapeProblem says why token cannot be a ServiceAccount token for the
// audience, read without verifying it (the TokenReview verifies); "" when
// it may be one.
func (a *Authenticator) shapeProblem(token string, now time.Time) string {
	problem, _ := a.inspect(token, now)
	return problem
}

// inspect is shapeProblem, and the namespace of the token's ServiceAccount
// when the issuer's keys verify its signature ("" otherwise: an
// unverified claim could name anyone's namespace and spend its budget).
func (a *Authenticator) inspect(token string, now time.Time) (problem, namespace string) {
	if len(token) > maxTokenBytes {
		return "the token is too long", ""
	}
	t, ok := decodeJWT(token)
	if !ok {
		return "not a ServiceAccount token (a JWT)", ""
	}
	var claims struct {
		Audience audiences `json:"aud"`
		Expiry   *float64  `json:"exp"`
		Subject  string    `json:"sub"`
	}
	if err := json.Unmarshal(t.payload, &claims); err != nil {
		return "not a ServiceAccount token (a JWT)", ""
	}
	if !slices.Contains(claims.Audience, a.audience) {
		return fmt.Sprintf("not a token for audience %q", a.audience), ""
	}
	// The API server's clock decides; a gateway's ahead of it must not
	// refuse what the API server still accepts.
	if claims.Expiry == nil || time.Unix(int64(*claims.Expiry), 0).Add(expiryLeeway).Before(now) {
		return "the token has expired", ""
	}
	if a.keys == nil {
		return "", ""
	}
	problem, verified := a.keys.signatureProblem(t, now)
	if !verified {
		return problem, ""
	}
	rest, sa := strings.CutPrefix(claims.Subject, serviceAccountPrefix)
	ns, _, named := strings.Cut(rest, ":")
	if !sa || !named {
		return "", ""
	}
	return "", ns
}

// decodedJWT is a token's three parts, decoded, not verified.
type decodedJWT struct {
	signed               string // header.payload: what the signature signs
	header, payload, sig []byte
}

// decodeJWT splits and decodes token; ok is false when it is not a JWT.
func decodeJWT(token string) (t decodedJWT, ok bool) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return t, false
	}
	var err [3]error
	t.header, err[0] = base64.RawURLEncoding.DecodeString(parts[0])
	t.payload, err[1] = base64.RawURLEncoding.DecodeString(parts[1])
	t.sig, err[2] = base64.RawURLEncoding.DecodeString(parts[2])
	t.signed = parts[0] + "." + parts[1]
	return t, err[0] == nil && err[1] == nil && err[2] == nil
}

// audiences is a JWT's aud claim: one string or a list.
type audiences []string

func (a *audiences) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*a = []string{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return err
	}
	*a = many
	return nil
}
