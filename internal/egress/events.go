package egress

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// Events the proxy records on a call (events.k8s.io/v1, regarding the
// ToolCall, labelled LabelCallUID): what the call's body reached, where a
// credential was added, and what was refused. One Event per call, verdict
// and destination, its series counting repeats; kubectl toolgate trace
// lists them under the call's stages.
const (
	EventReached            = "EgressReached"      // Normal: tunnelled or forwarded
	EventCredentialInjected = "CredentialInjected" // Normal: forwarded with the host's credential
	EventRefused            = "EgressRefused"      // Warning: any refusal of a request that carried a grant
)

// ReportingController names the proxy in its Events.
const ReportingController = "toolgate.dev/egress"

// LabelCallUID labels the proxy's Events with the call's UID, so that a
// call's Events are listed by label.
const LabelCallUID = "toolgate.dev/call-uid"

// Bounds of what the recorder keeps: destinations recorded per call (more
// are counted in metrics only), and calls kept at once.
const (
	maxPerCall = 16
	maxCalls   = 4096
)

// giveUpAfter is how long after its grant expired a call's Events that
// cannot be written are still tried (seconds).
const giveUpAfter = 60

// flushEvery is how often counted requests are written as Events: a
// request never waits on the API server.
const flushEvery = 2 * time.Second

// Recorder records the proxy's verdicts on a call.
type Recorder interface {
	Record(g Grant, verdict, host string, port int32)
}

// EventRecorder writes verdicts as Events, from a loop (Run), batching
// repeats into the Event's series.
type EventRecorder struct {
	Client client.Client
	Log    logr.Logger
	// Now is the clock (nil: time.Now).
	Now func() time.Time

	mu    sync.Mutex
	calls map[types.UID]*callEvents
}

type callEvents struct {
	grant   Grant
	entries map[string]*eventEntry
}

type eventEntry struct {
	verdict, host string
	port          int32
	count         int32 // observed
	written       int32 // in the Event (0: not created)
	first, last   time.Time
}

func (r *EventRecorder) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// Record implements Recorder: it counts, and Run writes.
func (r *EventRecorder) Record(g Grant, verdict, host string, port int32) {
	if g.CallUID == "" {
		return // no call to record it on
	}
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.calls == nil {
		r.calls = map[types.UID]*callEvents{}
	}
	c := r.calls[types.UID(g.CallUID)]
	if c == nil {
		if len(r.calls) >= maxCalls {
			return
		}
		c = &callEvents{grant: g, entries: map[string]*eventEntry{}}
		r.calls[types.UID(g.CallUID)] = c
	}
	host = printableHost(host)
	key := fmt.Sprintf("%s|%s|%d|%s", verdict, host, port, g.PodUID)
	e := c.entries[key]
	if e == nil {
		if len(c.entries) >= maxPerCall {
			return
		}
		e = &eventEntry{verdict: verdict, host: host, port: port, first: now}
		c.entries[key] = e
	}
	e.count++
	e.last = now
}

// Run writes what Record counted every flushEvery until ctx ends, then
// once more.
func (r *EventRecorder) Run(ctx context.Context) {
	t := time.NewTicker(flushEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			flush, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			r.Flush(flush)
			cancel()
			return
		case <-t.C:
			r.Flush(ctx)
		}
	}
}

// pending is an Event to write.
type pending struct {
	ev      *eventsv1.Event
	entry   *eventEntry
	count   int32
	written int32
	last    time.Time
}

// Flush writes the Events whose count changed, and forgets the calls whose
// grant has expired.
func (r *EventRecorder) Flush(ctx context.Context) {
	now := r.now()
	var todo []pending
	r.mu.Lock()
	for uid, c := range r.calls {
		dirty := false
		for _, e := range c.entries {
			if e.count != e.written {
				dirty = true
				todo = append(todo, pending{ev: event(c.grant, e), entry: e, count: e.count, written: e.written, last: e.last})
			}
		}
		// A call whose grant expired gets no more requests: once written,
		// it is forgotten, and a minute later even if its Events cannot
		// be written (its namespace is going, say).
		if (!dirty && now.Unix() > c.grant.Expires) || now.Unix() > c.grant.Expires+giveUpAfter {
			delete(r.calls, uid)
		}
	}
	r.mu.Unlock()
	for _, p := range todo {
		if err := r.write(ctx, p); err != nil {
			// Counted again at the next flush.
			r.Log.Error(err, "event not written", "namespace", p.ev.Namespace, "call", p.ev.Regarding.Name, "reason", p.ev.Reason)
			continue
		}
		r.mu.Lock()
		p.entry.written = p.count
		r.mu.Unlock()
	}
}

func (r *EventRecorder) write(ctx context.Context, p pending) error {
	if p.count > 1 {
		p.ev.Series = &eventsv1.EventSeries{Count: p.count, LastObservedTime: metav1.NewMicroTime(p.last)}
	}
	if p.written == 0 {
		err := r.Client.Create(ctx, p.ev)
		if !apierrors.IsAlreadyExists(err) {
			return client.IgnoreNotFound(err)
		}
		// Written before this process's restart: the series goes on.
	}
	if p.ev.Series == nil {
		return nil
	}
	patch := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"series":{"count":%d,"lastObservedTime":%q}}`,
		p.count, p.last.UTC().Format(metav1.RFC3339Micro)))
	return client.IgnoreNotFound(r.Client.Patch(ctx, p.ev, patch))
}

// event is the Event of entry e of grant g.
func event(g Grant, e *eventEntry) *eventsv1.Event {
	reason, kind := EventRefused, corev1.EventTypeWarning
	switch e.verdict {
	case VerdictTunnelled, VerdictForwarded:
		reason, kind = EventReached, corev1.EventTypeNormal
	case VerdictInjected:
		reason, kind = EventCredentialInjected, corev1.EventTypeNormal
	}
	dest := e.host
	if e.port != 0 {
		dest = fmt.Sprintf("%s port %d", e.host, e.port)
	}
	note := fmt.Sprintf("%s: %s (tool %s)", e.verdict, dest, g.Tool)
	if e.verdict == VerdictInjected {
		note = fmt.Sprintf("%s: %s, the tool's credential added by the proxy (tool %s)", e.verdict, dest, g.Tool)
	}
	sum := sha256.Sum256(fmt.Appendf(nil, "%s|%s|%s|%d|%s", g.CallUID, e.verdict, e.host, e.port, g.PodUID))
	name := g.Call
	if len(name) > 200 {
		name = name[:200]
	}
	return &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: g.Namespace, Name: strings.TrimRight(name, ".-") + ".egress." + hex.EncodeToString(sum[:8]),
			Labels: map[string]string{LabelCallUID: g.CallUID},
		},
		EventTime:           metav1.NewMicroTime(e.first),
		ReportingController: ReportingController,
		ReportingInstance:   ReportingController,
		Action:              e.verdict,
		Reason:              reason,
		Type:                kind,
		Note:                note,
		Regarding: corev1.ObjectReference{
			APIVersion: toolgatev1alpha1.GroupVersion.String(), Kind: "ToolCall",
			Namespace: g.Namespace, Name: g.Call, UID: types.UID(g.CallUID),
		},
	}
}

// printableHost is host when it is an address or a DNS name (a body
// chooses it: nothing else is written into an Event), else a placeholder.
func printableHost(host string) string {
	if host == "" {
		return "(no host)"
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return a.String()
	}
	if len(validation.IsDNS1123Subdomain(strings.ToLower(strings.TrimSuffix(host, ".")))) == 0 {
		return strings.ToLower(strings.TrimSuffix(host, "."))
	}
	return "(a host that is not a DNS name or an address)"
}
