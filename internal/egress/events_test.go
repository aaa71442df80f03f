package egress

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

func eventClient(t *testing.T) client.Client {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	return fake.NewClientBuilder().WithScheme(scheme).Build()
}

func eventsOf(t *testing.T, c client.Client, uid string) map[string]eventsv1.Event {
	t.Helper()
	list := &eventsv1.EventList{}
	if err := c.List(context.Background(), list, client.MatchingLabels{LabelCallUID: uid}); err != nil {
		t.Fatal(err)
	}
	out := map[string]eventsv1.Event{}
	for _, e := range list.Items {
		out[e.Reason+" "+e.Note] = e
	}
	return out
}

func seriesCount(e eventsv1.Event) int32 {
	if e.Series == nil {
		return 1
	}
	return e.Series.Count
}

// The call's trace shows what its body reached, where the proxy added a
// credential, and what it refused: one Event per verdict and destination,
// regarding the call, its series counting the requests.
func TestTheProxysVerdictsAreRecordedOnTheCall(t *testing.T) {
	f := newFixture(t)
	c := eventClient(t)
	rec := &EventRecorder{Client: c, Now: func() time.Time { return f.now }}
	f.proxy.Events = rec
	body := f.client(t, f.mint(t, f.grant()))
	for range 2 {
		if status, text, err := get(body, fmt.Sprintf("http://api.example.test:%d/", f.apiPort)); err != nil || status != http.StatusOK {
			t.Fatalf("the credentialed host: %d %q %v", status, text, err)
		}
	}
	refused := fmt.Sprintf("http://elsewhere.example.test:%d/", f.otherPort)
	for range 3 {
		if status, _, _ := get(body, refused); status != http.StatusForbidden {
			t.Fatalf("an undeclared host: %d, want 403", status)
		}
	}
	rec.Flush(context.Background())

	got := eventsOf(t, c, "uid-1")
	injected := got[fmt.Sprintf("%s %s: api.example.test port %d, the tool's credential added by the proxy (tool fetch)", EventCredentialInjected, VerdictInjected, f.apiPort)]
	refusal := got[fmt.Sprintf("%s %s: elsewhere.example.test port %d (tool fetch)", EventRefused, VerdictHost, f.otherPort)]
	if len(got) != 2 || injected.Name == "" || refusal.Name == "" {
		t.Fatalf("events %v, want one injection and one refusal", slices.Collect(maps.Keys(got)))
	}
	if seriesCount(injected) != 2 || seriesCount(refusal) != 3 {
		t.Errorf("counts %d and %d, want 2 and 3", seriesCount(injected), seriesCount(refusal))
	}
	for _, e := range got {
		if e.Regarding.Kind != "ToolCall" || e.Regarding.Name != "c1" || e.Regarding.UID != "uid-1" || e.Namespace != "agents" || e.ReportingController != ReportingController {
			t.Errorf("event %s regards %+v in %s, reported by %s", e.Name, e.Regarding, e.Namespace, e.ReportingController)
		}
		if strings.Contains(e.Note, "s3cret") {
			t.Errorf("event %s holds the credential", e.Name)
		}
	}
	if refusal.Type != "Warning" || injected.Type != "Normal" {
		t.Errorf("types %s and %s, want Warning and Normal", refusal.Type, injected.Type)
	}

	// More requests go to the same Event's series, not a new Event.
	if status, _, _ := get(body, refused); status != http.StatusForbidden {
		t.Fatalf("an undeclared host: %d, want 403", status)
	}
	rec.Flush(context.Background())
	rec.Flush(context.Background())
	got = eventsOf(t, c, "uid-1")
	if len(got) != 2 || seriesCount(got[EventRefused+" "+refusal.Note]) != 4 {
		t.Errorf("after one more refusal: %d events, refusal count %d; want 2 and 4", len(got), seriesCount(got[EventRefused+" "+refusal.Note]))
	}
}

// A body chooses its destinations: what an Event says of them is bounded
// (destinations per call) and never more than a name or an address.
func TestTheRecordOfABodysDestinationsIsBounded(t *testing.T) {
	c := eventClient(t)
	now := time.Now()
	rec := &EventRecorder{Client: c, Now: func() time.Time { return now }}
	g := Grant{Namespace: "agents", Call: "c2", CallUID: "uid-2", Tool: "t", PodUID: "p", Expires: now.Add(time.Minute).Unix()}
	rec.Record(g, VerdictHost, "evil\r\nheader: x", 443)
	for i := range 3 * maxPerCall {
		rec.Record(g, VerdictHost, fmt.Sprintf("h%d.example.test", i), 443)
	}
	rec.Record(Grant{Call: "no-uid"}, VerdictHost, "x.example.test", 443)
	rec.Flush(context.Background())
	got := eventsOf(t, c, "uid-2")
	if len(got) != maxPerCall {
		t.Errorf("%d events, want at most %d", len(got), maxPerCall)
	}
	if _, ok := got[EventRefused+" "+VerdictHost+": (a host that is not a DNS name or an address) port 443 (tool t)"]; !ok {
		t.Errorf("a destination that is not a name was written as it came: %v", slices.Collect(maps.Keys(got)))
	}
	all := &eventsv1.EventList{}
	if err := c.List(context.Background(), all); err != nil || len(all.Items) != maxPerCall {
		t.Errorf("%d events in all (%v), want only the call's %d", len(all.Items), err, maxPerCall)
	}

	// Once the grant has expired and everything is written, the call is
	// forgotten.
	now = now.Add(2 * time.Minute)
	rec.Flush(context.Background())
	if n := len(rec.calls); n != 0 {
		t.Errorf("%d calls kept after their grants expired", n)
	}
}

// Events that cannot be written (a namespace being deleted, a missing
// grant of RBAC) are tried again at each flush, then given up a minute
// after the call's grant expired: the recorder does not hold them, or log
// them, for ever.
func TestEventsThatCannotBeWrittenAreGivenUp(t *testing.T) {
	refused := 0
	c := interceptor.NewClient(eventClient(t).(client.WithWatch), interceptor.Funcs{
		Create: func(context.Context, client.WithWatch, client.Object, ...client.CreateOption) error {
			refused++
			return errors.New("forbidden")
		},
	})
	now := time.Now()
	rec := &EventRecorder{Client: c, Now: func() time.Time { return now }, Log: logr.Discard()}
	g := Grant{Namespace: "agents", Call: "c3", CallUID: "uid-3", Tool: "t", PodUID: "p", Expires: now.Add(time.Minute).Unix()}
	rec.Record(g, VerdictHost, "a.example.test", 443)
	rec.Flush(context.Background())
	now = now.Add(90 * time.Second) // past the grant, within the minute after
	rec.Flush(context.Background())
	if refused != 2 || len(rec.calls) != 1 {
		t.Fatalf("%d writes tried, %d calls kept; want 2 and the call kept", refused, len(rec.calls))
	}
	now = now.Add(time.Minute)
	rec.Flush(context.Background())
	if len(rec.calls) != 0 {
		t.Errorf("a call whose Events cannot be written is kept %s after its grant", now.Sub(time.Unix(g.Expires, 0)))
	}
}
