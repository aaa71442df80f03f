package agent

import (
	"context"
	"errors"
	"io"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// createRetries are the waits between the attempts of a create the API
// server answered with a transient error: about 14 s in all, which covers a
// fresh install's 503s while the admission policies learn the CRDs' kinds
// (docs/install.md) and a control plane restarting.
var createRetries = []time.Duration{
	100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond,
	800 * time.Millisecond, 1600 * time.Millisecond, 3200 * time.Millisecond,
	4 * time.Second, 4 * time.Second,
}

// transient says err may pass if the same request is sent again: the API
// server was unavailable, overloaded or slow, or the connection broke.
// Some of these are ambiguous (the object may have been created).
func transient(err error) bool {
	return apierrors.IsServiceUnavailable(err) || apierrors.IsTooManyRequests(err) ||
		apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) ||
		utilnet.IsConnectionReset(err) || utilnet.IsConnectionRefused(err) ||
		utilnet.IsProbableEOF(err) || errors.Is(err, io.ErrUnexpectedEOF)
}

// retrying runs op until it returns nil or an error that is not transient,
// waiting waits[i] between attempts; it reports whether op ran more than
// once, since an AlreadyExists after a retry may be the first attempt's own
// work.
func retrying(ctx context.Context, waits []time.Duration, op func() error) (retried bool, err error) {
	for i := 0; ; i++ {
		err = op()
		if !transient(err) || i == len(waits) {
			return retried, err
		}
		retried = true
		select {
		case <-ctx.Done():
			return retried, err
		case <-time.After(waits[i]):
		}
	}
}

// CreateCall creates tc, sending the create again while the API server
// answers with a transient error (about 14 s in all). When a call of the
// same requester already holds tc's place it is returned: with a nil error
// when it is tc itself (SameCall) and attach is set or a retry may have
// made it (an ambiguous failure that landed), with the AlreadyExists error
// otherwise (the caller takes the next turn, or refuses). When another
// requester's call holds tc's name, tc is made under a generated name
// (createBeside): the call returned is the one to follow. pkg/agent and the
// MCP gateway create every call through it.
func CreateCall(ctx context.Context, c client.Client, tc *toolgatev1alpha1.ToolCall, attach bool) (*toolgatev1alpha1.ToolCall, error) {
	return createCall(ctx, c, tc, attach, createRetries)
}

func createCall(ctx context.Context, c client.Client, tc *toolgatev1alpha1.ToolCall, attach bool, waits []time.Duration) (*toolgatev1alpha1.ToolCall, error) {
	retried, err := retrying(ctx, waits, func() error { return c.Create(ctx, tc) })
	if err == nil {
		return tc, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	found := &toolgatev1alpha1.ToolCall{}
	if gerr := c.Get(ctx, client.ObjectKeyFromObject(tc), found); gerr != nil {
		return nil, gerr
	}
	if found.Spec.Requester != tc.Spec.Requester {
		return createBeside(ctx, c, tc, attach, waits)
	}
	if (attach || retried) && SameCall(found, tc) {
		return found, nil
	}
	return found, err
}

// A call's name (CallName) is where toolgate's clients look first, not a
// claim: whoever may create ToolCalls in the namespace can make an object
// under it first. A call there of another requester is never in the
// session (the session refuses it, not_session_owner), so it holds no
// place; the session owner's call is then made beside it, under a name
// generated from the same one, and found again by its place (session,
// turn, index, requester) when a create is retried or a turn resumed.

// createBeside makes tc under a generated name, or returns the caller's
// call already made at its place (as createCall does for a call found
// under its name).
func createBeside(ctx context.Context, c client.Client, tc *toolgatev1alpha1.ToolCall, attach bool, waits []time.Duration) (*toolgatev1alpha1.ToolCall, error) {
	var made, found *toolgatev1alpha1.ToolCall
	sent := false
	_, err := retrying(ctx, waits, func() error {
		// Before every create: one that landed before its error is found
		// by its place.
		var err error
		if found, err = atPlace(ctx, c, tc); err != nil || found != nil {
			return err
		}
		made = tc.DeepCopy()
		made.Name, made.GenerateName = "", tc.Name+"-"
		sent = true
		return c.Create(ctx, made)
	})
	switch {
	case err != nil:
		return nil, err
	case found == nil:
		return made, nil
	case (attach || sent) && SameCall(found, tc):
		return found, nil
	}
	return found, apierrors.NewAlreadyExists(toolgatev1alpha1.GroupVersion.WithResource("toolcalls").GroupResource(), found.Name)
}

// atPlace returns the call the caller made at tc's place under another
// name than tc's, if any.
func atPlace(ctx context.Context, c client.Client, tc *toolgatev1alpha1.ToolCall) (*toolgatev1alpha1.ToolCall, error) {
	list := &toolgatev1alpha1.ToolCallList{}
	if err := c.List(ctx, list, client.InNamespace(tc.Namespace), client.MatchingLabels(placeLabels(tc.Spec.SessionRef.Name, tc.Spec.Turn))); err != nil {
		return nil, err
	}
	for i := range list.Items {
		f := &list.Items[i]
		if f.Name != tc.Name && f.Spec.ParentRef == nil && f.Spec.SessionRef == tc.Spec.SessionRef &&
			f.Spec.Turn == tc.Spec.Turn && f.Spec.Index == tc.Spec.Index && f.Spec.Requester == tc.Spec.Requester {
			return f, nil
		}
	}
	return nil, nil
}

// SameCall reports whether found, read at a call's place, is the call want
// would make there: the same tool, arguments, turn size, requester and
// callID. Anything else is another call in that place.
func SameCall(found, want *toolgatev1alpha1.ToolCall) bool {
	f, w := found.Spec, want.Spec
	return f.Tool == w.Tool && f.Arguments == w.Arguments && f.TurnSize == w.TurnSize && f.Requester == w.Requester && f.CallID == w.CallID
}
