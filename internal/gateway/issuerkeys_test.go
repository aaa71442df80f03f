package gateway

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/modelcontextprotocol/go-sdk/auth"
	clocktesting "k8s.io/utils/clock/testing"
)

// signedJWT is a token for audience signed by key under kid (RS256 or
// ES256, as the API server signs).
func signedJWT(t *testing.T, key crypto.Signer, kid, audience, id string) string {
	t.Helper()
	enc := base64.RawURLEncoding.EncodeToString
	alg := "RS256"
	if _, ok := key.(*ecdsa.PrivateKey); ok {
		alg = "ES256"
	}
	signed := enc(fmt.Appendf(nil, `{"alg":%q,"kid":%q}`, alg, kid)) + "." +
		enc(fmt.Appendf(nil, `{"aud":[%q],"exp":%d,"jti":%q}`, audience, soon.Unix(), id))
	sum := sha256.Sum256([]byte(signed))
	var sig []byte
	switch k := key.(type) {
	case *rsa.PrivateKey:
		var err error
		if sig, err = rsa.SignPKCS1v15(rand.Reader, k, crypto.SHA256, sum[:]); err != nil {
			t.Fatal(err)
		}
	case *ecdsa.PrivateKey:
		r, s, err := ecdsa.Sign(rand.Reader, k, sum[:])
		if err != nil {
			t.Fatal(err)
		}
		sig = append(r.FillBytes(make([]byte, 32)), s.FillBytes(make([]byte, 32))...)
	}
	return signed + "." + enc(sig)
}

func jwks(t *testing.T, keys map[string]crypto.PublicKey) []byte {
	t.Helper()
	enc := func(n *big.Int) string { return base64.RawURLEncoding.EncodeToString(n.Bytes()) }
	var set struct {
		Keys []map[string]string `json:"keys"`
	}
	for kid, k := range keys {
		switch p := k.(type) {
		case *rsa.PublicKey:
			set.Keys = append(set.Keys, map[string]string{"kty": "RSA", "kid": kid, "alg": "RS256", "use": "sig", "n": enc(p.N), "e": enc(big.NewInt(int64(p.E)))})
		case *ecdsa.PublicKey:
			point, err := p.Bytes() // 0x04, X, Y
			if err != nil {
				t.Fatal(err)
			}
			x, y := point[1:33], point[33:]
			b64 := base64.RawURLEncoding.EncodeToString
			set.Keys = append(set.Keys, map[string]string{"kty": "EC", "kid": kid, "crv": "P-256", "x": b64(x), "y": b64(y)})
		}
	}
	b, err := json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestForgedTokensCostNoReview: once the issuer's keys are known, a token
// shaped well whose signature none of them verifies (the real key ID with
// a made-up signature, a key ID the issuer does not publish, another key)
// is refused without a TokenReview, from however many addresses; the
// cluster's own tokens, RSA or EC, still go to review. Until keys are
// known, or when fetching fails, the review decides as before.
func TestForgedTokensCostNoReview(t *testing.T) {
	ctx := context.Background()
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	good := signedJWT(t, rsaKey, "k-rsa", "gw", "good")
	goodEC := signedJWT(t, ecKey, "k-ec", "gw", "good-ec")
	cs, asked := reviewer(map[string]string{good: "system:serviceaccount:team:agent", goodEC: "system:serviceaccount:team:other"}, []string{"gw"})
	now := time.Now()
	clk := clocktesting.NewFakePassiveClock(now)
	a := NewAuthenticator(cs, "gw", 10*time.Second, clk)
	var fetches atomic.Int32
	var failing atomic.Bool
	a.TrustIssuerKeys(func(context.Context) ([]byte, error) {
		fetches.Add(1)
		if failing.Load() {
			return nil, errors.New("forbidden")
		}
		return jwks(t, map[string]crypto.PublicKey{"k-rsa": &rsaKey.PublicKey, "k-ec": &ecKey.PublicKey}), nil
	}, logr.Discard())
	fetched := func() {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			a.keys.mu.Lock()
			done := !a.keys.fetching
			a.keys.mu.Unlock()
			if done {
				return
			}
			if time.Now().After(deadline) {
				t.Fatal("the keys were never fetched")
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	// Before the keys are known, the review decides (and they are fetched).
	if _, err := a.Verify(ctx, good, nil); err != nil || *asked != 1 {
		t.Fatalf("the first valid token: %v after %d reviews", err, *asked)
	}
	fetched()

	forgeries := map[string]func(i int) string{
		"the issuer's key ID, a made-up signature": func(i int) string {
			g := signedJWT(t, stranger, "k-rsa", "gw", fmt.Sprint("f", i))
			return g
		},
		"a key ID the issuer does not publish": func(i int) string { return signedJWT(t, stranger, "k-mine", "gw", fmt.Sprint("u", i)) },
		"the issuer's EC key ID, a signature of another size": func(i int) string {
			g := signedJWT(t, rsaKey, "k-ec", "gw", fmt.Sprint("e", i))
			return strings.Replace(g, `"RS256"`, `"ES256"`, 1)
		},
		"an unsigned token": func(i int) string { return jwt("gw", soon, fmt.Sprint("n", i)) },
	}
	before := *asked
	for name, forge := range forgeries {
		for i := range 50 {
			tok := forge(i)
			if !a.Admit(tok, fmt.Sprintf("10.2.%d.%d:80", i/250, i%250)) {
				t.Fatalf("%s: held back instead of refused", name)
			}
			if _, err := a.Verify(ctx, tok, nil); !errors.Is(err, auth.ErrInvalidToken) {
				t.Fatalf("%s: %v, want an invalid token", name, err)
			}
		}
	}
	if *asked != before {
		t.Fatalf("%d TokenReviews for 200 forged tokens", *asked-before)
	}
	for _, tok := range []string{good, goodEC} {
		a.cache = map[[sha256.Size]byte]review{} // forget the answers: review again
		if _, err := a.Verify(ctx, tok, nil); err != nil {
			t.Fatalf("a token signed by the issuer: %v", err)
		}
	}
	if *asked != before+2 {
		t.Fatalf("the issuer's tokens cost %d reviews, want 2", *asked-before)
	}

	// Keys that may be out of date (the issuer may have a new one): a
	// token naming an unknown key goes to review, and the keys are fetched
	// again; a fetch that fails changes nothing known.
	clk.SetTime(now.Add(2 * keysFresh))
	failing.Store(true)
	n := fetches.Load()
	unknown := signedJWT(t, stranger, "k-new", "gw", "new")
	if _, err := a.Verify(ctx, unknown, nil); !errors.Is(err, auth.ErrInvalidToken) || *asked != before+3 {
		t.Fatalf("an unknown key with stale keys: %v after %d more reviews, want a review", err, *asked-before)
	}
	fetched()
	if fetches.Load() != n+1 {
		t.Fatalf("%d fetches for stale keys, want 1", fetches.Load()-n)
	}
	forged, _ := decodeJWT(signedJWT(t, stranger, "k-rsa", "gw", "x"))
	if p, _ := a.keys.signatureProblem(forged, clk.Now()); p == "" {
		t.Fatal("a failed fetch forgot the keys known before")
	}
}

// TestSourcesOfOneHostShareABudget: an IPv6 client's budget is its /64
// (one host is commonly given a whole /64); an IPv4 address, mapped or
// not, is its own.
func TestSourcesOfOneHostShareABudget(t *testing.T) {
	for _, c := range []struct{ a, b string }{
		{"[2001:db8:1:2::1]:443", "[2001:db8:1:2:ffff:1:2:3]:80"},
		{"[::ffff:10.0.0.1]:80", "10.0.0.1:81"},
		{"[fe80::1%eth0]:80", "[fe80::2]:80"},
	} {
		if sourceOf(c.a) != sourceOf(c.b) {
			t.Errorf("%s and %s have budgets %s and %s, want one", c.a, c.b, sourceOf(c.a), sourceOf(c.b))
		}
	}
	for _, c := range []struct{ a, b string }{
		{"[2001:db8:1:2::1]:443", "[2001:db8:1:3::1]:443"},
		{"10.0.0.1:80", "10.0.0.2:80"},
	} {
		if sourceOf(c.a) == sourceOf(c.b) {
			t.Errorf("%s and %s share the budget %s", c.a, c.b, sourceOf(c.a))
		}
	}
}

// TestExpiryAllowsClockSkew: a token the gateway's clock thinks expired
// less than a minute ago may still be valid to the API server's: it goes
// to review; one expired longer ago is refused without one.
func TestExpiryAllowsClockSkew(t *testing.T) {
	now := time.Now()
	a := NewAuthenticator(nil, "gw", 0, clocktesting.NewFakePassiveClock(now))
	if p := a.shapeProblem(jwt("gw", now.Add(-30*time.Second), "skew"), now); p != "" {
		t.Errorf("expired 30 s ago by the gateway's clock: %q, want a review", p)
	}
	if p := a.shapeProblem(jwt("gw", now.Add(-2*time.Minute), "old"), now); p == "" {
		t.Error("expired 2 minutes ago: sent to review")
	}
}

// TestOneNamespaceCannotSpendAnothersReviews: valid tokens of one
// namespace's ServiceAccounts (fresh ones, from many addresses) spend that
// namespace's review budget only; another namespace's agent is still
// reviewed. A forged subject (a signature the issuer's keys do not
// verify) spends no namespace's budget.
func TestOneNamespaceCannotSpendAnothersReviews(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	clk := clocktesting.NewFakePassiveClock(time.Now())
	cs, _ := reviewer(nil, []string{"gw"})
	a := NewAuthenticator(cs, "gw", 10*time.Second, clk)
	a.keys = &issuerKeys{clock: clk, log: logr.Discard(), fetched: clk.Now(), keys: map[string]crypto.PublicKey{"k": &key.PublicKey}}
	token := func(signer crypto.Signer, sub, id string) string {
		enc := base64.RawURLEncoding.EncodeToString
		signed := enc([]byte(`{"alg":"RS256","kid":"k"}`)) + "." +
			enc(fmt.Appendf(nil, `{"aud":["gw"],"exp":%d,"jti":%q,"sub":%q}`, soon.Unix(), id, sub))
		sum := sha256.Sum256([]byte(signed))
		sig, err := rsa.SignPKCS1v15(rand.Reader, signer.(*rsa.PrivateKey), crypto.SHA256, sum[:])
		if err != nil {
			t.Fatal(err)
		}
		return signed + "." + enc(sig)
	}
	admitted := 0
	for i := range 200 {
		if a.Admit(token(key, "system:serviceaccount:noisy:sa-"+fmt.Sprint(i%7), fmt.Sprint("n", i)), fmt.Sprintf("10.9.%d.%d:80", i/250, i%250)) {
			admitted++
		}
	}
	if admitted > namespaceReviewBurst {
		t.Fatalf("one namespace's tokens from 200 addresses were admitted to %d reviews, more than its budget (%d)", admitted, namespaceReviewBurst)
	}
	if !a.Admit(token(key, "system:serviceaccount:quiet:agent", "q"), "10.8.0.1:80") {
		t.Fatal("another namespace's agent was held back by the first's tokens")
	}
	for i := range 5 {
		if !a.Admit(token(stranger, "system:serviceaccount:quiet:agent", fmt.Sprint("f", i)), fmt.Sprintf("10.7.0.%d:80", i)) {
			t.Fatal("a forged subject was held back: it would spend the namespace it names")
		}
	}
	if _, got := a.inspect(token(stranger, "system:serviceaccount:quiet:agent", "x"), clk.Now()); got != "" {
		t.Fatalf("a forged subject counted as namespace %q", got)
	}
}
