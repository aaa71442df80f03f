package agent

import (
	"context"
	"errors"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
)

var toolcalls = schema.GroupResource{Group: toolgatev1alpha1.GroupVersion.Group, Resource: "toolcalls"}

// flakyCreates answers the first n creates with err; landFirst makes the
// first create land before it answers err (an ambiguous failure).
func flakyCreates(t *testing.T, n int, err error, landFirst bool) (*Session, client.Client, *int) {
	t.Helper()
	scheme := runtime.NewScheme()
	if e := toolgatev1alpha1.AddToScheme(scheme); e != nil {
		t.Fatal(e)
	}
	creates := 0
	inner := fake.NewClientBuilder().WithScheme(scheme).WithObjects(&toolgatev1alpha1.AgentSession{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s"}, Spec: toolgatev1alpha1.AgentSessionSpec{Owner: "agent"},
	}).Build()
	c := fake.NewClientBuilder().WithScheme(scheme).WithInterceptorFuncs(interceptor.Funcs{
		Create: func(ctx context.Context, _ client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			creates++
			if creates > n {
				return inner.Create(ctx, obj, opts...)
			}
			if creates == 1 && landFirst {
				if e := inner.Create(ctx, obj.DeepCopyObject().(client.Object), opts...); e != nil {
					return e
				}
			}
			return err
		},
		Get: func(ctx context.Context, _ client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			return inner.Get(ctx, key, obj, opts...)
		},
	}).Build()
	cl := NewForClient(c, "agent")
	cl.retries = []time.Duration{time.Millisecond, time.Millisecond, time.Millisecond}
	s := &Session{c: cl, Namespace: "ns", Name: "s"}
	return s, inner, &creates
}

func turnCalls(t *testing.T, c client.Client) []toolgatev1alpha1.ToolCall {
	t.Helper()
	l := &toolgatev1alpha1.ToolCallList{}
	if err := c.List(context.Background(), l); err != nil {
		t.Fatal(err)
	}
	return l.Items
}

// A fresh install answers creates 503 for a few seconds; Submit sends them
// again rather than failing the model's turn.
func TestSubmitRetriesAnUnavailableAPIServer(t *testing.T) {
	s, inner, creates := flakyCreates(t, 2, apierrors.NewServiceUnavailable("Resource kind toolgate.dev/v1alpha1, Kind=ToolCall not found"), false)
	turn, err := s.Submit(context.Background(), []Call{{Tool: "echo"}, {Tool: "echo"}})
	if err != nil {
		t.Fatalf("Submit: %v", err)
	}
	// Three for the first call (two refused), then SubmitAt's two: the
	// first call found made, the second made.
	if turn.Number != 0 || len(turnCalls(t, inner)) != 2 || *creates != 5 {
		t.Fatalf("turn %d, %d calls, %d creates; want turn 0, 2 calls, 5 creates", turn.Number, len(turnCalls(t, inner)), *creates)
	}
}

// A create that timed out may have landed: the retry finds the call it
// made and keeps the turn, rather than taking the next turn and making the
// model's calls twice.
func TestSubmitKeepsItsTurnWhenATimedOutCreateLanded(t *testing.T) {
	s, inner, _ := flakyCreates(t, 1, apierrors.NewServerTimeout(toolcalls, "create", 1), true)
	turn, err := s.Submit(context.Background(), []Call{{Tool: "echo"}, {Tool: "echo"}})
	if err != nil {
		t.Fatalf("Submit: %v", err)
	}
	calls := turnCalls(t, inner)
	if turn.Number != 0 || len(calls) != 2 {
		t.Fatalf("turn %d with %d calls in all; want turn 0 and 2 calls", turn.Number, len(calls))
	}
}

// A turn another submission holds is still skipped after a retry: the call
// found is not this one.
func TestSubmitAfterARetryStillSkipsATakenTurn(t *testing.T) {
	s, inner, _ := flakyCreates(t, 1, apierrors.NewServiceUnavailable("busy"), false)
	other := &Session{c: NewForClient(inner.(client.WithWatch), "agent"), Namespace: "ns", Name: "s"}
	if _, err := other.create(context.Background(), 0, 0, []Call{{Tool: "other"}}, false); err != nil {
		t.Fatal(err)
	}
	turn, err := s.Submit(context.Background(), []Call{{Tool: "echo"}})
	if err != nil {
		t.Fatalf("Submit: %v", err)
	}
	if turn.Number != 1 {
		t.Fatalf("turn %d, want 1 (turn 0 is another's)", turn.Number)
	}
}

// An API server that stays unavailable fails the submission with its
// error once the retries are spent; an error that is not transient is not
// retried at all.
func TestSubmitGivesUpWithTheError(t *testing.T) {
	s, _, creates := flakyCreates(t, 100, apierrors.NewServiceUnavailable("down"), false)
	_, err := s.Submit(context.Background(), []Call{{Tool: "echo"}})
	if !apierrors.IsServiceUnavailable(err) || *creates != 4 {
		t.Fatalf("err %v after %d creates; want 503 after 4", err, *creates)
	}
	s, _, creates = flakyCreates(t, 100, apierrors.NewForbidden(toolcalls, "x", errors.New("no")), false)
	_, err = s.Submit(context.Background(), []Call{{Tool: "echo"}})
	if !apierrors.IsForbidden(err) || *creates != 1 {
		t.Fatalf("err %v after %d creates; want 403 after 1", err, *creates)
	}
}

// Opening a session sends its create again too, and attaches to the session
// made.
func TestOpenRetriesAnUnavailableAPIServer(t *testing.T) {
	s, inner, creates := flakyCreates(t, 2, apierrors.NewServiceUnavailable("busy"), false)
	opened, err := s.c.Open(context.Background(), "ns", "new", SessionOptions{Profile: "p"})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	got := &toolgatev1alpha1.AgentSession{}
	if err := inner.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "new"}, got); err != nil || got.Spec.Owner != "agent" || opened.Name != "new" || *creates != 3 {
		t.Fatalf("session %+v (%v) after %d creates; want one owned by agent after 3", got.Spec, err, *creates)
	}
}

// TestAtPlaceListsOneTurn: finding a call again by its place lists the
// calls of its session's turn, filtered by the API server, not every call
// of the namespace, and still tells them apart by place and requester.
func TestAtPlaceListsOneTurn(t *testing.T) {
	scheme := runtime.NewScheme()
	if e := toolgatev1alpha1.AddToScheme(scheme); e != nil {
		t.Fatal(e)
	}
	tc := NewCall("ns", "s", Place{Turn: 4, Index: 1, TurnSize: 2}, "read", "", "agent")
	mine := tc.DeepCopy()
	mine.Name = tc.Name + "-x7k2p"
	other := NewCall("ns", "s", Place{Turn: 4, Index: 1, TurnSize: 2}, "read", "", "mallory")
	other.Name = tc.Name + "-m4ll0"
	var selectors []string
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(mine, other).WithInterceptorFuncs(interceptor.Funcs{
		List: func(ctx context.Context, inner client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			o := &client.ListOptions{}
			o.ApplyOptions(opts)
			if o.LabelSelector != nil {
				selectors = append(selectors, o.LabelSelector.String())
			} else {
				selectors = append(selectors, "")
			}
			return inner.List(ctx, list, opts...)
		},
	}).Build()
	found, err := atPlace(context.Background(), c, tc)
	if err != nil {
		t.Fatal(err)
	}
	if found == nil || found.Name != mine.Name {
		t.Fatalf("found %v, want %s", found, mine.Name)
	}
	if len(selectors) != 1 || selectors[0] != "toolgate.dev/session=s,toolgate.dev/turn=4" {
		t.Fatalf("listed with selectors %q, want one list of session s, turn 4", selectors)
	}
}
