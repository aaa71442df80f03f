package agent

import (
	"context"
	"errors"
	"io"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilnet "k8s.io/apimachinery/pkg/util/net"
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
// waiting c.retries between attempts; it reports whether op ran more than
// once, since an AlreadyExists after a retry may be the first attempt's own
// work.
func (c *Client) retrying(ctx context.Context, op func() error) (retried bool, err error) {
	for i := 0; ; i++ {
		err = op()
		if !transient(err) || i == len(c.retries) {
			return retried, err
		}
		retried = true
		select {
		case <-ctx.Done():
			return retried, err
		case <-time.After(c.retries[i]):
		}
	}
}
