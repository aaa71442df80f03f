package gateway

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
)

// serviceAccountPrefix starts the username of every ServiceAccount.
const serviceAccountPrefix = "system:serviceaccount:"

// maxCachedReviews bounds the cache of TokenReview answers; a full cache is
// emptied rather than grown.
const maxCachedReviews = 4096

// Authenticator checks bearer tokens with the API server's TokenReview,
// requiring the gateway's audience, and accepts ServiceAccounts only: those
// are the identities the gateway is allowed to impersonate.
type Authenticator struct {
	reviews  kubernetes.Interface
	audience string
	ttl      time.Duration
	clock    clock.PassiveClock

	mu    sync.Mutex
	cache map[[sha256.Size]byte]review
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
	return &Authenticator{reviews: reviews, audience: audience, ttl: ttl, clock: clk, cache: map[[sha256.Size]byte]review{}}
}

// errNotServiceAccount refuses identities the gateway cannot act as.
var errNotServiceAccount = errors.New("only ServiceAccount tokens are accepted")

// Verify is an auth.TokenVerifier: it answers the identity of a valid token
// (UserID is the ServiceAccount's username) or an error wrapping
// auth.ErrInvalidToken, which the transport answers with 401.
func (a *Authenticator) Verify(ctx context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
	key := sha256.Sum256([]byte(token))
	now := a.clock.Now()
	a.mu.Lock()
	r, ok := a.cache[key]
	a.mu.Unlock()
	if ok && now.Before(r.expires) {
		return &auth.TokenInfo{UserID: r.user}, nil
	}
	tr, err := a.reviews.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: []string{a.audience}},
	}, metav1.CreateOptions{})
	if err != nil {
		// Not the caller's fault: 500, and nothing remembered.
		return nil, fmt.Errorf("reviewing the token: %w", err)
	}
	if !tr.Status.Authenticated || !slices.Contains(tr.Status.Audiences, a.audience) {
		return nil, fmt.Errorf("%w: not a valid token for audience %q", auth.ErrInvalidToken, a.audience)
	}
	user := tr.Status.User.Username
	if !strings.HasPrefix(user, serviceAccountPrefix) {
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
