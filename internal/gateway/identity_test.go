package gateway

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
)

// reviewer answers TokenReviews from a table of tokens, counting them.
func reviewer(users map[string]string, audiences []string) (*fake.Clientset, *int) {
	cs := fake.NewClientset()
	asked := new(int)
	cs.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		*asked++
		tr := a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenReview).DeepCopy()
		if user, ok := users[tr.Spec.Token]; ok {
			tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: user}, Audiences: audiences}
		}
		return true, tr, nil
	})
	return cs, asked
}

// jwt is a token shaped as a ServiceAccount token for audience, expiring
// at exp, told apart by id (unsigned: the TokenReview is what verifies).
func jwt(audience string, exp time.Time, id string) string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"RS256"}`)) + "." +
		enc(fmt.Appendf(nil, `{"aud":[%q],"exp":%d,"jti":%q}`, audience, exp.Unix(), id)) + "." + enc([]byte("sig"))
}

var (
	soon   = time.Now().Add(time.Hour)
	sa     = jwt("gw", soon, "sa")
	person = jwt("gw", soon, "person")
	other  = jwt("gw", soon, "other")
)

func TestAuthenticatorAcceptsServiceAccountsOnly(t *testing.T) {
	cs, _ := reviewer(map[string]string{sa: "system:serviceaccount:team:agent", person: "alice"}, []string{"gw"})
	a := NewAuthenticator(cs, "gw", 0, clocktesting.NewFakePassiveClock(time.Now()))
	info, err := a.Verify(context.Background(), sa, nil)
	if err != nil || info.UserID != "system:serviceaccount:team:agent" {
		t.Fatalf("a ServiceAccount: %v %+v", err, info)
	}
	for _, tok := range []string{person, other} {
		if _, err := a.Verify(context.Background(), tok, nil); !errors.Is(err, auth.ErrInvalidToken) {
			t.Fatalf("%s: got %v, want an invalid token (401)", tok, err)
		}
	}
}

func TestAuthenticatorRequiresItsAudience(t *testing.T) {
	cs, _ := reviewer(map[string]string{sa: "system:serviceaccount:team:agent"}, []string{"someone-else"})
	a := NewAuthenticator(cs, "gw", 0, clocktesting.NewFakePassiveClock(time.Now()))
	if _, err := a.Verify(context.Background(), sa, nil); !errors.Is(err, auth.ErrInvalidToken) {
		t.Fatalf("got %v, want an invalid token", err)
	}
}

func TestAuthenticatorReusesAnAnswerForItsTTL(t *testing.T) {
	cs, asked := reviewer(map[string]string{sa: "system:serviceaccount:team:agent"}, []string{"gw"})
	clk := clocktesting.NewFakePassiveClock(time.Now())
	a := NewAuthenticator(cs, "gw", 10*time.Second, clk)
	for range 3 {
		if _, err := a.Verify(context.Background(), sa, nil); err != nil {
			t.Fatal(err)
		}
	}
	if *asked != 1 {
		t.Fatalf("asked %d times within the TTL, want 1", *asked)
	}
	clk.SetTime(clk.Now().Add(10 * time.Second))
	if _, err := a.Verify(context.Background(), sa, nil); err != nil {
		t.Fatal(err)
	}
	if *asked != 2 {
		t.Fatalf("asked %d times after the TTL, want 2", *asked)
	}
	if _, err := a.Verify(context.Background(), other, nil); !errors.Is(err, auth.ErrInvalidToken) || *asked != 3 {
		t.Fatalf("a refused token is never remembered as accepted: %v, asked %d", err, *asked)
	}
	if _, err := a.Verify(context.Background(), other, nil); !errors.Is(err, auth.ErrInvalidToken) || *asked != 3 {
		t.Fatalf("a token refused again within %s is refused from memory: %v, asked %d", refusalTTL, err, *asked)
	}
}

// TestAFloodOfTokensCostsBoundedReviews: made-up tokens cost no
// TokenReview at all; tokens shaped as the audience's cost at most the
// review budget (a source's, then everyone's), and a valid caller is
// answered while the flood goes on: from memory once known, and from its
// own source's budget when new.
func TestAFloodOfTokensCostsBoundedReviews(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	cs, asked := reviewer(map[string]string{sa: "system:serviceaccount:team:agent"}, []string{"gw"})
	clk := clocktesting.NewFakePassiveClock(now)
	a := NewAuthenticator(cs, "gw", 10*time.Second, clk)
	flood := func(n int, token func(i int) string, source func(i int) string) (admitted int) {
		for i := range n {
			tok := token(i)
			if !a.Admit(tok, source(i)) {
				continue
			}
			admitted++
			if _, err := a.Verify(ctx, tok, nil); !errors.Is(err, auth.ErrInvalidToken) {
				t.Fatalf("a flood token: %v, want an invalid token", err)
			}
		}
		return admitted
	}
	one := func(int) string { return "10.0.0.66:4242" }

	// Not shaped as a token for the audience: refused, never reviewed.
	for _, token := range []func(int) string{
		func(i int) string { return fmt.Sprintf("made-up-%d", i) },
		func(i int) string { return jwt("someone-else", soon, fmt.Sprint(i)) },
		func(i int) string { return jwt("gw", now.Add(-time.Minute), fmt.Sprint(i)) },
		func(i int) string { return "a.b.c" },
	} {
		if n := flood(400, token, one); n != 400 {
			t.Fatalf("%d of 400 refused without a review were held back", 400-n)
		}
	}
	if *asked != 0 {
		t.Fatalf("%d TokenReviews for tokens that cannot be the audience's", *asked)
	}

	// A known caller is answered from memory, whatever floods.
	if !a.Admit(sa, "10.0.0.7:1") {
		t.Fatal("a new valid caller was held back")
	}
	if _, err := a.Verify(ctx, sa, nil); err != nil {
		t.Fatal(err)
	}
	forged := func(i int) string { return jwt("gw", soon, fmt.Sprintf("forged-%d", i)) }
	if n := flood(400, forged, one); n != sourceReviewBurst {
		t.Fatalf("one source had %d tokens reviewed, want its burst %d", n, sourceReviewBurst)
	}
	many := func(i int) string { return fmt.Sprintf("10.1.%d.%d:80", i/250, i%250) }
	if n := flood(400, func(i int) string { return forged(1000 + i) }, many); n > reviewBurst {
		t.Fatalf("400 sources had %d tokens reviewed, want at most the budget's burst %d", n, reviewBurst)
	}
	if *asked > 1+sourceReviewBurst+reviewBurst {
		t.Fatalf("%d TokenReviews for a flood of 1,600 tokens", *asked)
	}
	before := *asked
	if !a.Admit(sa, "10.0.0.7:1") {
		t.Fatal("a known caller was held back by the flood")
	}
	if _, err := a.Verify(ctx, sa, nil); err != nil || *asked != before {
		t.Fatalf("a known caller: %v, %d reviews", err, *asked-before)
	}
	// The budget refills with time.
	clk.SetTime(now.Add(2 * time.Second))
	if !a.Admit(forged(5000), "10.0.0.66:4242") {
		t.Fatal("the budget did not refill")
	}
}
