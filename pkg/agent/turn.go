package agent

import (
	"context"
	"errors"
	"fmt"
	"iter"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// Turn is one model turn submitted to a session.
type Turn struct {
	s *Session
	// Number is the turn's number in its session.
	Number int64
	// Names are the turn's ToolCalls, in model order.
	Names []string
	// omitted is how many contexts the session left out of its status.
	omitted int32
}

// Result is the final result of one call of a turn.
type Result struct {
	// Index is the call's place in its turn.
	Index int32
	// Name is the ToolCall's name.
	Name string
	// CallID and Tool repeat the call.
	CallID, Tool string
	// Committed is true when the result is in the session's log; false when
	// the call settled outside it (refused by the session).
	Committed bool
	// CommitSequence is the call's place in the session's log, when
	// committed.
	CommitSequence *int64
	// ToolCallResult is the result itself: outcome, error code and message,
	// value, content and the contexts it defers to the model's next step.
	toolgatev1alpha1.ToolCallResult
}

// ErrDeleted says a call of the turn was deleted before its result was
// final.
var ErrDeleted = errors.New("a call of the turn was deleted before it committed")

// finalResult returns the call's result once it is final: committed to the log,
// or settled outside it.
func finalResult(tc *toolgatev1alpha1.ToolCall) (Result, bool) {
	if !tc.Final() {
		return Result{}, false
	}
	return Result{
		Index: tc.Spec.Index, Name: tc.Name, CallID: tc.Spec.CallID, Tool: tc.Spec.Tool,
		Committed: tc.Committed(), CommitSequence: tc.Status.Schedule.CommitSequence,
		ToolCallResult: *tc.Status.Result,
	}, true
}

// Results yields the turn's results in model order, each as soon as it and
// every earlier call of the turn are final (toolgate commits in that order,
// so this is the order they commit in). It watches the session's calls;
// it never polls. It stops at the first error (the context's, or
// ErrDeleted).
func (t *Turn) Results(ctx context.Context) iter.Seq2[Result, error] {
	return func(yield func(Result, error) bool) {
		done := make([]*Result, len(t.Names))
		next := 0
		// record keeps a final call of this turn; emit yields the ready
		// prefix, false when the consumer stopped.
		record := func(tc *toolgatev1alpha1.ToolCall) {
			if !t.owns(tc) {
				return
			}
			if r, ok := finalResult(tc); ok {
				done[tc.Spec.Index] = &r
			}
		}
		emit := func() bool {
			for next < len(done) && done[next] != nil {
				if !yield(*done[next], nil) {
					return false
				}
				next++
			}
			return true
		}
		list := &toolgatev1alpha1.ToolCallList{}
		opts := []client.ListOption{client.InNamespace(t.s.Namespace),
			client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("spec.sessionRef.name", t.s.Name)}}
		err := observe(ctx, t.s.c.c, list, opts, func() (bool, error) {
			present := map[string]bool{}
			for i := range list.Items {
				present[list.Items[i].Name] = true
				record(&list.Items[i])
			}
			if !emit() {
				return true, nil
			}
			for i := next; i < len(done); i++ {
				if done[i] == nil && !present[t.Names[i]] {
					return true, ErrDeleted
				}
			}
			return next == len(done), nil
		}, func(ev watch.Event) (bool, error) {
			tc, isCall := ev.Object.(*toolgatev1alpha1.ToolCall)
			if !isCall {
				return false, nil
			}
			record(tc)
			if ev.Type == watch.Deleted && t.owns(tc) && int(tc.Spec.Index) >= next {
				if _, ok := finalResult(tc); !ok {
					return true, ErrDeleted
				}
			}
			return !emit() || next == len(done), nil
		})
		if err != nil {
			yield(Result{}, err)
		}
	}
}

// observe lists into list and then watches from the list's version: it
// asks listed after each list, and seen for each event, until either says
// done (or fails). A watch the API server ends is listed and watched
// again. It never polls.
func observe(ctx context.Context, c client.WithWatch, list client.ObjectList, opts []client.ListOption, listed func() (bool, error), seen func(watch.Event) (bool, error)) error {
	for {
		if err := c.List(ctx, list, opts...); err != nil {
			return err
		}
		if done, err := listed(); done || err != nil {
			return err
		}
		w, err := c.Watch(ctx, list, append(opts, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.GetResourceVersion()}})...)
		if err != nil {
			return err
		}
		done, err := drain(ctx, w, seen)
		w.Stop()
		if done || err != nil {
			return err
		}
		// The watch ended: list again and watch from there.
	}
}

// drain hands seen each event of one watch until seen is done (true), the
// watch ends (false, nil), or the context does.
func drain(ctx context.Context, w watch.Interface, seen func(watch.Event) (bool, error)) (bool, error) {
	for {
		select {
		case <-ctx.Done():
			return true, ctx.Err()
		case ev, ok := <-w.ResultChan():
			if !ok || ev.Type == watch.Error {
				return false, nil
			}
			if done, err := seen(ev); done || err != nil {
				return true, err
			}
		}
	}
}

// owns reports whether tc is a call of the turn.
func (t *Turn) owns(tc *toolgatev1alpha1.ToolCall) bool {
	return tc.Spec.Turn == t.Number && int(tc.Spec.Index) < len(t.Names) && tc.Name == t.Names[tc.Spec.Index]
}

// Wait returns every result of the turn, in model order.
func (t *Turn) Wait(ctx context.Context) ([]Result, error) {
	var out []Result
	for r, err := range t.Results(ctx) {
		if err != nil {
			return out, err
		}
		out = append(out, r)
	}
	return out, nil
}

// Cancel asks toolgate to cancel every call of the turn; calls already
// settled keep their results.
func (t *Turn) Cancel(ctx context.Context) error {
	var errs []error
	for _, name := range t.Names {
		errs = append(errs, t.s.Cancel(ctx, name))
	}
	return errors.Join(errs...)
}

// ErrContextsReplaced says a later turn of the session completed before
// the turn's contexts were read: a session holds only its last complete
// turn's.
var ErrContextsReplaced = errors.New("a later turn completed first; the session holds only the last complete turn's contexts")

// Contexts returns the contexts the session released for the model's next
// step when the turn completed, in call order. The session records a turn
// complete shortly after its last call commits, so right after Results it
// may still hold the turn before: Contexts waits for it, by watch.
func (t *Turn) Contexts(ctx context.Context) ([]toolgatev1alpha1.SessionContext, error) {
	gone := fmt.Errorf("agentsession %s/%s is gone", t.s.Namespace, t.s.Name)
	list := &toolgatev1alpha1.AgentSessionList{}
	opts := []client.ListOption{client.InNamespace(t.s.Namespace),
		client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("metadata.name", t.s.Name)}}
	var contexts []toolgatev1alpha1.SessionContext
	err := observe(ctx, t.s.c.c, list, opts, func() (done bool, err error) {
		if len(list.Items) == 0 {
			return true, gone
		}
		contexts, done, err = t.released(&list.Items[0])
		return done, err
	}, func(ev watch.Event) (done bool, err error) {
		s, isSession := ev.Object.(*toolgatev1alpha1.AgentSession)
		switch {
		case !isSession:
			return false, nil
		case ev.Type == watch.Deleted:
			return true, gone
		}
		contexts, done, err = t.released(s)
		return done, err
	})
	if err == nil && t.omitted > 0 {
		// The session holds a prefix within its bounds; every context is
		// in its call's result.
		return t.fromResults(ctx)
	}
	return contexts, err
}

// fromResults are the turn's contexts from its calls' results, in call
// order.
func (t *Turn) fromResults(ctx context.Context) ([]toolgatev1alpha1.SessionContext, error) {
	var out []toolgatev1alpha1.SessionContext
	for _, name := range t.Names {
		tc := &toolgatev1alpha1.ToolCall{}
		if err := t.s.c.c.Get(ctx, client.ObjectKey{Namespace: t.s.Namespace, Name: name}, tc); err != nil {
			return nil, fmt.Errorf("reading the contexts of toolcall %s: %w", name, err)
		}
		if r := tc.Status.Result; r != nil && tc.Committed() {
			for _, c := range r.Contexts {
				out = append(out, toolgatev1alpha1.SessionContext{CallID: tc.Spec.CallID, AdditionalContext: c})
			}
		}
	}
	return out, nil
}

// released returns the turn's contexts once the session recorded the turn
// complete.
func (t *Turn) released(s *toolgatev1alpha1.AgentSession) ([]toolgatev1alpha1.SessionContext, bool, error) {
	switch {
	case s.Status.CommittedTurn < t.Number:
		return nil, false, nil
	case s.Status.CommittedTurn > t.Number:
		return nil, true, fmt.Errorf("turn %d: %w (turn %d)", t.Number, ErrContextsReplaced, s.Status.CommittedTurn)
	}
	t.omitted = s.Status.DeferredContextsOmitted
	return s.Status.DeferredContexts, true, nil
}
