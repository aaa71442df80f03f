package agent

import (
	"context"
	"errors"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// ErrCallDeleted says the awaited call was deleted before its result was
// final.
var ErrCallDeleted = errors.New("the call was deleted")

// AwaitCall watches one call, from the version given (the call as created
// or last read), until its result is final, and returns it; observe, when
// set, is told of every version seen, the given one first. A watch the API
// server ends is resumed from a fresh read. It never polls: the one way to
// wait for a single call's result, for an agent and for the gateway (a
// turn's calls are watched together, Turn.Results).
func AwaitCall(ctx context.Context, c client.WithWatch, tc *toolgatev1alpha1.ToolCall, observe func(*toolgatev1alpha1.ToolCall)) (*toolgatev1alpha1.ToolCall, error) {
	if observe == nil {
		observe = func(*toolgatev1alpha1.ToolCall) {}
	}
	for {
		observe(tc)
		if tc.Final() {
			return tc, nil
		}
		w, err := c.Watch(ctx, &toolgatev1alpha1.ToolCallList{}, &client.ListOptions{
			Namespace:     tc.Namespace,
			FieldSelector: fields.OneTermEqualSelector("metadata.name", tc.Name),
			Raw:           &metav1.ListOptions{ResourceVersion: tc.ResourceVersion},
		})
		if err != nil {
			return tc, err
		}
		next, err := followCall(ctx, w, tc, observe)
		w.Stop()
		if err != nil || next != nil {
			return tc, err
		}
		// The watch ended without a final result: read the call again and
		// watch from there.
		fresh := &toolgatev1alpha1.ToolCall{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(tc), fresh); err != nil {
			if apierrors.IsNotFound(err) {
				return tc, ErrCallDeleted
			}
			return tc, err
		}
		tc = fresh
	}
}

// followCall reads one watch of tc until it is final (returned, tc updated
// in place), the watch ends (nil, nil) or the context does.
func followCall(ctx context.Context, w watch.Interface, tc *toolgatev1alpha1.ToolCall, observe func(*toolgatev1alpha1.ToolCall)) (*toolgatev1alpha1.ToolCall, error) {
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case ev, ok := <-w.ResultChan():
			if !ok {
				return nil, nil
			}
			switch ev.Type {
			case watch.Deleted:
				return nil, ErrCallDeleted
			case watch.Error:
				return nil, nil
			case watch.Added, watch.Modified:
				got, isCall := ev.Object.(*toolgatev1alpha1.ToolCall)
				if !isCall {
					continue
				}
				*tc = *got
				observe(tc)
				if tc.Final() {
					return tc, nil
				}
			}
		}
	}
}
