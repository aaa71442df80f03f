package gateway

import (
	"context"
	"errors"
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

func TestAuthenticatorAcceptsServiceAccountsOnly(t *testing.T) {
	cs, _ := reviewer(map[string]string{"sa": "system:serviceaccount:team:agent", "person": "alice"}, []string{"gw"})
	a := NewAuthenticator(cs, "gw", 0, clocktesting.NewFakePassiveClock(time.Now()))
	info, err := a.Verify(context.Background(), "sa", nil)
	if err != nil || info.UserID != "system:serviceaccount:team:agent" {
		t.Fatalf("a ServiceAccount: %v %+v", err, info)
	}
	for _, tok := range []string{"person", "unknown"} {
		if _, err := a.Verify(context.Background(), tok, nil); !errors.Is(err, auth.ErrInvalidToken) {
			t.Fatalf("%s: got %v, want an invalid token (401)", tok, err)
		}
	}
}

func TestAuthenticatorRequiresItsAudience(t *testing.T) {
	cs, _ := reviewer(map[string]string{"sa": "system:serviceaccount:team:agent"}, []string{"someone-else"})
	a := NewAuthenticator(cs, "gw", 0, clocktesting.NewFakePassiveClock(time.Now()))
	if _, err := a.Verify(context.Background(), "sa", nil); !errors.Is(err, auth.ErrInvalidToken) {
		t.Fatalf("got %v, want an invalid token", err)
	}
}

func TestAuthenticatorReusesAnAnswerForItsTTL(t *testing.T) {
	cs, asked := reviewer(map[string]string{"sa": "system:serviceaccount:team:agent"}, []string{"gw"})
	clk := clocktesting.NewFakePassiveClock(time.Now())
	a := NewAuthenticator(cs, "gw", 10*time.Second, clk)
	for range 3 {
		if _, err := a.Verify(context.Background(), "sa", nil); err != nil {
			t.Fatal(err)
		}
	}
	if *asked != 1 {
		t.Fatalf("asked %d times within the TTL, want 1", *asked)
	}
	clk.SetTime(clk.Now().Add(10 * time.Second))
	if _, err := a.Verify(context.Background(), "sa", nil); err != nil {
		t.Fatal(err)
	}
	if *asked != 2 {
		t.Fatalf("asked %d times after the TTL, want 2", *asked)
	}
	if _, err := a.Verify(context.Background(), "other", nil); !errors.Is(err, auth.ErrInvalidToken) || *asked != 3 {
		t.Fatalf("a refused token is never remembered as accepted: %v, asked %d", err, *asked)
	}
}
