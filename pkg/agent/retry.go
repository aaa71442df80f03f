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
// answers with a transient error (about 14 s in all). When a call already
// holds tc's place it is returned: with a nil error when it is tc itself
// (SameCall) and attach is set or a retry may have made it (an ambiguous
// failure that landed), with the AlreadyExists error otherwise (the caller
// takes the next turn, or refuses). pkg/agent and the MCP gateway create
// every call through it.
func CreateCall(ctx context.Context, c client.Client, tc *toolgatev1alpha1.ToolCall, attach bool) (*toolgatev1alpha1.ToolCall, error) {
	return createCall(ctx, c, tc, attach, createRetries)
}

func createCall(ctx context.Context, c client.Client, tc *toolgatev1alpha1.ToolCall, attach bool, waits []time.Duration) (*toolgatev1alpha1.ToolCall, error) {
	retried, err := retrying(ctx, waits, func() error { return c.Create(ctx, tc) })
	if err == nil {
		return tc, nil
	}
	if !apierrors.IsAlreadyExists(err) || (!attach && !retried) {
		return nil, err
	}
	found := &toolgatev1alpha1.ToolCall{}
	if gerr := c.Get(ctx, client.ObjectKeyFromObject(tc), found); gerr != nil {
		return nil, gerr
	}
	if SameCall(found, tc) {
		return found, nil
	}
	return found, err
}

// SameCall reports whether found, read at a call's place, is the call want
// would make there: the same tool, arguments, turn size, requester and
// callID. Anything else is another call in that place.
func SameCall(found, want *toolgatev1alpha1.ToolCall) bool {
	f, w := found.Spec, want.Spec
	return f.Tool == w.Tool && f.Arguments == w.Arguments && f.TurnSize == w.TurnSize && f.Requester == w.Requester && f.CallID == w.CallID
}
