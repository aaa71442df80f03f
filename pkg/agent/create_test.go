package agent

import (
	"context"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// A submitted call is created holding toolgate's finalizer: the manager
// then has no metadata write to make, with or without the admission policy
// that adds it.
func TestSubmittedCallsHoldTheFinalizerFromCreation(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := toolgatev1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).Build()
	s := &Session{c: NewForClient(c, "agent"), Namespace: "ns", Name: "s"}
	if _, err := s.create(context.Background(), 0, 0, []Call{{Tool: "echo"}}, false); err != nil {
		t.Fatal(err)
	}
	tc := &toolgatev1alpha1.ToolCall{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: CallName("s", 0, 0)}, tc); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(tc.Finalizers, StopWorkFinalizer) {
		t.Fatalf("finalizers %v, want %s", tc.Finalizers, StopWorkFinalizer)
	}
}

// A turn whose calls deferred more contexts than its session holds reads
// them all from the calls' results, in call order.
func TestTurnContextsBeyondTheSessionsBounds(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := toolgatev1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var objs []client.Object
	for i, msgs := range [][]string{{"a1", "a2"}, {"b1"}} {
		tc := &toolgatev1alpha1.ToolCall{}
		tc.Namespace, tc.Name, tc.Spec.CallID = "ns", CallName("s", 0, int32(i)), "call-"+msgs[0]
		tc.Status.Phase = toolgatev1alpha1.PhaseCommitted
		tc.Status.Result = &toolgatev1alpha1.ToolCallResult{Outcome: toolgatev1alpha1.OutcomeSucceeded}
		for _, m := range msgs {
			tc.Status.Result.Contexts = append(tc.Status.Result.Contexts, toolgatev1alpha1.AdditionalContext{Source: toolgatev1alpha1.ContextSourceTool, Message: m})
		}
		objs = append(objs, tc)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build()
	s := &Session{c: NewForClient(c, "agent"), Namespace: "ns", Name: "s"}
	turn := &Turn{s: s, Number: 0, Names: []string{CallName("s", 0, 0), CallName("s", 0, 1)}}
	session := &toolgatev1alpha1.AgentSession{}
	session.Status.CommittedTurn = 0
	session.Status.DeferredContexts = []toolgatev1alpha1.SessionContext{{CallID: "call-a1", AdditionalContext: toolgatev1alpha1.AdditionalContext{Source: "Tool", Message: "a1"}}}
	session.Status.DeferredContextsOmitted = 2
	if _, done, err := turn.released(session); !done || err != nil || turn.omitted != 2 {
		t.Fatalf("released: done %v, err %v, omitted %d", done, err, turn.omitted)
	}
	got, err := turn.fromResults(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var msgs []string
	for _, c := range got {
		msgs = append(msgs, c.CallID+":"+c.Message)
	}
	if want := []string{"call-a1:a1", "call-a1:a2", "call-b1:b1"}; !slices.Equal(msgs, want) {
		t.Fatalf("contexts %v, want %v", msgs, want)
	}
}
