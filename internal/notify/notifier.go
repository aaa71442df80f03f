package notify

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/toolgate/toolgate/internal/audit"
)

// Results of a delivery, the metric's result label.
const (
	ResultDelivered = "delivered"
	ResultFailed    = "failed"  // refused for good, or still failing after every retry
	ResultDropped   = "dropped" // the queue was full
)

var (
	deliveries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "toolgate_notifications_total",
		Help: "Approval notifications, by sink and result (delivered, failed, dropped).",
	}, []string{"sink", "result"})
	retries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "toolgate_notification_retries_total",
		Help: "Approval notifications sent again after a network error, 429 or 5xx, by sink.",
	}, []string{"sink"})
)

func init() { metrics.Registry.MustRegister(deliveries, retries) }

// Defaults of a Notifier.
const (
	defaultQueue    = 64 // per sink and namespace
	defaultAttempts = 6
	defaultBackoff  = time.Second
	maxBackoff      = time.Minute
	requestTimeout  = 10 * time.Second
)

// Notifier delivers events to the configured sinks, each from a bounded
// queue of its own with one worker: a sink that is down or slow delays and
// drops only its own events, and each sink hears a question's events in
// the order they happened.
type Notifier struct {
	Config Config
	Log    logr.Logger
	// Client sends the requests (nil: one with a 10 s timeout that follows
	// no redirects).
	Client *http.Client
	// Attempts per delivery and the first backoff, doubled after each
	// (0: 6 and 1 s).
	Attempts int
	Backoff  time.Duration

	queues map[string]*fairQueue
}

// outgoing is one body to send to a sink; kind names it in logs.
type outgoing struct {
	namespace   string
	kind        string
	body        []byte
	contentType string
}

// fairQueue is one sink's queue: a bounded queue per namespace, served in
// turn, so that a namespace whose calls make many events fills and drops
// only its own, and another's question is still told. Within a namespace,
// events go out in the order they came.
type fairQueue struct {
	mu    sync.Mutex
	byNS  map[string][]outgoing
	turns []string      // namespaces with events waiting, in turn
	ready chan struct{} // one token while events wait
	limit int
}

func newFairQueue(limit int) *fairQueue {
	return &fairQueue{byNS: map[string][]outgoing{}, ready: make(chan struct{}, 1), limit: limit}
}

// push queues o, unless its namespace's queue is full.
func (q *fairQueue) push(o outgoing) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	waiting := q.byNS[o.namespace]
	if len(waiting) >= q.limit {
		return false
	}
	if len(waiting) == 0 {
		q.turns = append(q.turns, o.namespace)
	}
	q.byNS[o.namespace] = append(waiting, o)
	select {
	case q.ready <- struct{}{}:
	default:
	}
	return true
}

// pop takes the next event, the namespaces in turn, waiting for one until
// ctx ends.
func (q *fairQueue) pop(ctx context.Context) (outgoing, bool) {
	for {
		q.mu.Lock()
		if len(q.turns) > 0 {
			ns := q.turns[0]
			o := q.byNS[ns][0]
			q.byNS[ns] = q.byNS[ns][1:]
			q.turns = q.turns[1:]
			if len(q.byNS[ns]) > 0 {
				q.turns = append(q.turns, ns) // its next event waits for the others' turn
			} else {
				delete(q.byNS, ns)
			}
			more := len(q.turns) > 0
			q.mu.Unlock()
			if more {
				select {
				case q.ready <- struct{}{}:
				default:
				}
			}
			return o, true
		}
		q.mu.Unlock()
		select {
		case <-ctx.Done():
			return outgoing{}, false
		case <-q.ready:
		}
	}
}

// Notifier is started as a manager Runnable.
func (n *Notifier) init() {
	if n.queues == nil {
		n.queues = make(map[string]*fairQueue, len(n.Config.Sinks))
		for _, s := range n.Config.Sinks {
			n.queues[s.Name] = newFairQueue(defaultQueue)
		}
	}
	if n.Client == nil {
		n.Client = &http.Client{Timeout: requestTimeout, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	if n.Attempts <= 0 {
		n.Attempts = defaultAttempts
	}
	if n.Backoff <= 0 {
		n.Backoff = defaultBackoff
	}
}

// New returns a Notifier of c.
func New(c Config, log logr.Logger) *Notifier {
	n := &Notifier{Config: c, Log: log}
	n.init()
	return n
}

// Notify queues e for the sinks it goes to: those named (a profile's
// approval.notify) and the default ones. It never blocks.
func (n *Notifier) Notify(e Event, named []string) {
	if n == nil {
		return
	}
	for _, s := range n.Config.For(e.Namespace, named) {
		body, contentType, err := payload(s.Format, e)
		n.enqueue(s, outgoing{namespace: e.Namespace, kind: e.Type, body: body, contentType: contentType}, err)
	}
}

// Write sends the audit record r to the sinks that receive audit records,
// as a CloudEvent (audit.Sink). It never blocks: the manager's audit log,
// not the webhook, is the record that is written at least once.
func (n *Notifier) Write(r audit.Record) {
	if n == nil {
		return
	}
	sinks := n.Config.auditFor(r.Namespace)
	if len(sinks) == 0 {
		return
	}
	// One body for every sink: the record is the same.
	body, err := auditPayload(r)
	for _, s := range sinks {
		n.enqueue(s, outgoing{namespace: r.Namespace, kind: "audit." + r.Type, body: body, contentType: contentTypeCloudEvents}, err)
	}
}

func (n *Notifier) enqueue(s Sink, o outgoing, err error) {
	if err != nil {
		deliveries.WithLabelValues(s.Name, ResultFailed).Inc()
		return
	}
	if !n.queues[s.Name].push(o) {
		deliveries.WithLabelValues(s.Name, ResultDropped).Inc()
		n.Log.Info("notification dropped", "sink", s.Name, "type", o.kind, "namespace", o.namespace)
	}
}

// Start runs one worker per sink until ctx ends (a manager Runnable).
func (n *Notifier) Start(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, s := range n.Config.Sinks {
		q := n.queues[s.Name]
		wg.Go(func() {
			for {
				o, ok := q.pop(ctx)
				if !ok {
					return
				}
				n.deliver(ctx, s, o)
			}
		})
	}
	wg.Wait()
	return nil
}

// NeedLeaderElection is true: only the leader asks questions, so only it tells of
// them.
func (n *Notifier) NeedLeaderElection() bool { return true }

// deliver sends d, retrying with backoff while the answer may change.
func (n *Notifier) deliver(ctx context.Context, sink Sink, o outgoing) {
	wait := n.Backoff
	for attempt := 1; ; attempt++ {
		retry, err := n.send(ctx, sink, o.body, o.contentType)
		if err == nil {
			deliveries.WithLabelValues(sink.Name, ResultDelivered).Inc()
			return
		}
		if !retry || attempt >= n.Attempts {
			deliveries.WithLabelValues(sink.Name, ResultFailed).Inc()
			n.Log.Info("notification not delivered", "sink", sink.Name, "type", o.kind, "attempts", attempt, "error", err.Error())
			return
		}
		retries.WithLabelValues(sink.Name).Inc()
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(wait*2, maxBackoff)
	}
}

// send posts one body; retry says whether another attempt may succeed.
func (n *Notifier) send(ctx context.Context, s Sink, body []byte, contentType string) (retry bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL, bytes.NewReader(body))
	if err != nil {
		return false, err
	}
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("User-Agent", "toolgate-notify")
	resp, err := n.Client.Do(req)
	if err != nil {
		// Without the URL, which is a credential (a chat webhook's).
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return true, err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return false, nil
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
		return true, fmt.Errorf("answered %d", resp.StatusCode)
	default:
		return false, fmt.Errorf("answered %d", resp.StatusCode)
	}
}
