package notify

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/audit"
)

// receiver is a local HTTP server that keeps what it is sent, answering
// with the statuses given in turn (then 200).
type receiver struct {
	*httptest.Server
	mu       sync.Mutex
	bodies   []map[string]any
	types    []string
	statuses []int
}

func newReceiver(t *testing.T, statuses ...int) *receiver {
	r := &receiver{statuses: statuses}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		raw, _ := io.ReadAll(req.Body)
		var body map[string]any
		_ = json.Unmarshal(raw, &body)
		r.mu.Lock()
		status := http.StatusOK
		if len(r.statuses) > 0 {
			status, r.statuses = r.statuses[0], r.statuses[1:]
		}
		if status == http.StatusOK {
			r.bodies, r.types = append(r.bodies, body), append(r.types, req.Header.Get("Content-Type"))
		}
		r.mu.Unlock()
		w.WriteHeader(status)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *receiver) received() []map[string]any {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]map[string]any(nil), r.bodies...)
}

func question() *toolgatev1alpha1.ApprovalRequest {
	return &toolgatev1alpha1.ApprovalRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: "agents", Name: "write-1", UID: types.UID("u-1"),
			Annotations: map[string]string{toolgatev1alpha1.AnnotationQuestionSeal: "3f9a1c2b7d4e5f60718293a4b5c6d7e8"}},
		Spec: toolgatev1alpha1.ApprovalRequestSpec{
			ToolCallRef: toolgatev1alpha1.LocalObjectReference{Name: "write-1"}, SessionRef: &toolgatev1alpha1.LocalObjectReference{Name: "s"},
			Tool: "write_file", ArgumentsPreview: `{"path":"<@U123> & notes [approve here](https://x.test)","token":"[redacted]"}`, Reason: "writes-need-two",
			Requester: "agent", Deadline: metav1.NewMicroTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)),
			Approvers: &toolgatev1alpha1.Approvers{Required: 2},
		},
		Status: toolgatev1alpha1.ApprovalRequestStatus{Phase: toolgatev1alpha1.ApprovalPending},
	}
}

func start(t *testing.T, n *Notifier) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = n.Start(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

// Every format carries who asks, for what, the redacted preview and the
// command to decide; the chat formats cannot be turned into mentions or
// links by the preview.
func TestEachFormatSaysWhatWaitsAndHowToDecide(t *testing.T) {
	ce, slack, teams := newReceiver(t), newReceiver(t), newReceiver(t)
	n := New(Config{Sinks: []Sink{
		{Name: "events", Format: FormatCloudEvents, URL: ce.URL, Default: true},
		{Name: "slack", Format: FormatSlack, URL: slack.URL},
		{Name: "teams", Format: FormatTeams, URL: teams.URL},
		{Name: "elsewhere", Format: FormatSlack, URL: slack.URL, Namespaces: []string{"other"}, Default: true},
	}}, logr.Discard())
	start(t, n)
	n.Notify(EventOf(question(), TypeRequested, time.Now()), []string{"slack", "teams"})
	waitFor(t, func() bool {
		return len(ce.received()) == 1 && len(slack.received()) == 1 && len(teams.received()) == 1
	})

	c := ce.received()[0]
	if c["specversion"] != "1.0" || c["type"] != "dev.toolgate.approval.requested" || c["id"] != "u-1/requested" ||
		c["subject"] != "approvalrequests/write-1" || c["source"] != "toolgate.dev/namespaces/agents" || ce.types[0] != "application/cloudevents+json" {
		t.Errorf("cloudevent %v (%s)", c, ce.types[0])
	}
	data := c["data"].(map[string]any)
	if data["requester"] != "agent" || data["session"] != "s" || data["tool"] != "write_file" || data["required"] != 2.0 ||
		!strings.Contains(data["command"].(string), "kubectl toolgate approve write-1 -n agents --question 3f9a1c2b7d4e ") ||
		data["question"] != "3f9a1c2b7d4e5f60718293a4b5c6d7e8" {
		t.Errorf("cloudevent data %v", data)
	}
	s := slack.received()[0]
	text := fmt.Sprint(s)
	if !strings.Contains(s["text"].(string), "Approval needed: agent wants to run write_file (session s, namespace agents)") ||
		strings.Contains(text, "<@U123>") || !strings.Contains(text, "&lt;@U123&gt; &amp; notes") {
		t.Errorf("slack %v", s)
	}
	tm, _ := json.Marshal(teams.received()[0])
	if !strings.Contains(string(tm), `"AdaptiveCard"`) || !strings.Contains(string(tm), "kubectl toolgate approve write-1 -n agents --question 3f9a1c2b7d4e") ||
		!strings.Contains(string(tm), "Approvals: 0 of 2") || strings.Contains(string(tm), "](https") {
		t.Errorf("teams %s", tm)
	}
}

// A sink that fails for a while gets the event once it answers; one that
// refuses it for good is not asked again; a full queue drops and counts.
func TestDeliveryRetriesWhatMaySucceedAndCountsTheRest(t *testing.T) {
	flaky := newReceiver(t, http.StatusServiceUnavailable, http.StatusTooManyRequests)
	refusing := newReceiver(t, http.StatusBadRequest, http.StatusBadRequest)
	var logs strings.Builder
	var mu sync.Mutex
	log := funcr.New(func(prefix, args string) { mu.Lock(); logs.WriteString(args + "\n"); mu.Unlock() }, funcr.Options{})
	n := &Notifier{Config: Config{Sinks: []Sink{
		{Name: "flaky", Format: FormatCloudEvents, URL: flaky.URL, Default: true},
		{Name: "refusing", Format: FormatCloudEvents, URL: refusing.URL + "/secret-token-path", Default: true},
	}}, Log: log, Backoff: 10 * time.Millisecond}
	n.init()
	before := testutil.ToFloat64(retries.WithLabelValues("flaky"))
	failedBefore := testutil.ToFloat64(deliveries.WithLabelValues("refusing", ResultFailed))
	start(t, n)
	n.Notify(EventOf(question(), TypeExpired, time.Now()), nil)
	waitFor(t, func() bool {
		return len(flaky.received()) == 1 && testutil.ToFloat64(deliveries.WithLabelValues("refusing", ResultFailed)) == failedBefore+1
	})
	if got := testutil.ToFloat64(retries.WithLabelValues("flaky")) - before; got != 2 {
		t.Errorf("retries %v, want 2", got)
	}
	if flaky.received()[0]["type"] != "dev.toolgate.approval.expired" {
		t.Errorf("event %v", flaky.received()[0])
	}
	mu.Lock()
	if strings.Contains(logs.String(), "secret-token-path") {
		t.Errorf("a sink's URL in the logs:\n%s", logs.String())
	}
	mu.Unlock()

	// Nobody reads the queue: it fills, and the rest is dropped.
	idle := New(Config{Sinks: []Sink{{Name: "idle", Format: FormatSlack, URL: flaky.URL, Default: true}}}, logr.Discard())
	dropped := testutil.ToFloat64(deliveries.WithLabelValues("idle", ResultDropped))
	for range defaultQueue + 5 {
		idle.Notify(EventOf(question(), TypeRequested, time.Now()), nil)
	}
	if got := testutil.ToFloat64(deliveries.WithLabelValues("idle", ResultDropped)) - dropped; got != 5 {
		t.Errorf("dropped %v, want 5", got)
	}
}

func TestConfigIsChecked(t *testing.T) {
	bad := Config{Sinks: []Sink{
		{Name: "Bad_Name", Format: FormatSlack, URL: "https://example.test/x"},
		{Name: "a", Format: "email", URL: "https://example.test/x"},
		{Name: "a", Format: FormatSlack, URL: "ftp://example.test/x"},
		{Name: "b", Format: FormatTeams, URL: "https://example.test/x", Audit: true},
	}}
	err := bad.Validate()
	for _, want := range []string{"sinks[0] (Bad_Name): name", "format must be cloudevents, slack or teams", "name used twice", "url must be an absolute http or https URL",
		"sinks[3] (b): audit: only a cloudevents sink receives audit records"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestASinkThatHangsDelaysOnlyItself: every sink has its own queue and
// worker, so one that never answers holds up none of the others, and each
// hears a question's events in the order they happened.
func TestASinkThatHangsDelaysOnlyItself(t *testing.T) {
	release := make(chan struct{})
	hanging := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		select {
		case <-release:
		case <-req.Context().Done():
		}
	}))
	t.Cleanup(hanging.Close)
	t.Cleanup(func() { close(release) })
	fine := newReceiver(t)
	n := New(Config{Sinks: []Sink{
		{Name: "hanging", Format: FormatCloudEvents, URL: hanging.URL, Default: true},
		{Name: "fine", Format: FormatCloudEvents, URL: fine.URL, Default: true},
	}}, logr.Discard())
	start(t, n)
	kinds := []string{TypeRequested, TypeDecided, TypeRequested, TypeExpired, TypeRequested, TypeCancelled}
	for _, k := range kinds {
		n.Notify(EventOf(question(), k, time.Now()), nil)
	}
	waitFor(t, func() bool { return len(fine.received()) == len(kinds) })
	for i, b := range fine.received() {
		if b["type"] != "dev.toolgate.approval."+kinds[i] {
			t.Errorf("event %d: %v, want %s", i, b["type"], kinds[i])
		}
	}
}

// TestAuditSinksReceiveEveryRecordAsACloudEvent: a sink marked audit
// receives each audit record of the namespaces it admits, as a CloudEvent
// whose id is the record's; other sinks receive none, and a record is not
// a notification.
func TestAuditSinksReceiveEveryRecordAsACloudEvent(t *testing.T) {
	all, agents, other := newReceiver(t), newReceiver(t), newReceiver(t)
	n := New(Config{Sinks: []Sink{
		{Name: "all", Format: FormatCloudEvents, URL: all.URL, Audit: true},
		{Name: "agents", Format: FormatCloudEvents, URL: agents.URL, Audit: true, Namespaces: []string{"agents"}},
		{Name: "other", Format: FormatCloudEvents, URL: other.URL, Default: true},
	}}, logr.Discard())
	if !n.Config.HasAudit() {
		t.Fatal("HasAudit is false")
	}
	start(t, n)
	var sink audit.Sink = audit.Tee{nil, n}
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	sink.Write(audit.Record{ID: "u-1/call", Type: audit.TypeCall, Time: at, Namespace: "agents", Call: "write-1", Tool: "write_file",
		ArgumentsDigest: "hmac-sha256:ab", Outcome: "Succeeded"})
	sink.Write(audit.Record{ID: "u-2/decision", Type: audit.TypeDecision, Time: at, Namespace: "elsewhere", Call: "read-1"})
	waitFor(t, func() bool { return len(all.received()) == 2 && len(agents.received()) == 1 })
	got := all.received()[0]
	data, _ := got["data"].(map[string]any)
	if got["specversion"] != "1.0" || got["id"] != "u-1/call" || got["type"] != "dev.toolgate.audit.call" || got["subject"] != "toolcalls/write-1" ||
		data["kind"] != audit.Kind || data["argumentsDigest"] != "hmac-sha256:ab" || data["outcome"] != "Succeeded" {
		t.Errorf("audit event %v", got)
	}
	if all.received()[1]["type"] != "dev.toolgate.audit.decision" || agents.received()[0]["id"] != "u-1/call" {
		t.Errorf("events %v, %v", all.received(), agents.received())
	}
	if all.types[0] != "application/cloudevents+json" {
		t.Errorf("content type %q", all.types[0])
	}
	time.Sleep(100 * time.Millisecond)
	if len(other.received()) != 0 {
		t.Errorf("a sink that is not an audit sink received %v", other.received())
	}
}

// TestOneNamespaceCannotDropAnothersQuestion: a sink's queue is bounded per
// namespace and served in turn: a namespace whose calls make far more
// events than the queue holds drops only its own, and another namespace's
// question is told next, not after the flood.
func TestOneNamespaceCannotDropAnothersQuestion(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	var order []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		<-release
		var body map[string]any
		_ = json.NewDecoder(req.Body).Decode(&body)
		mu.Lock()
		order = append(order, fmt.Sprint(body["source"]))
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	n := New(Config{Sinks: []Sink{{Name: "events", Format: FormatCloudEvents, URL: srv.URL, Default: true}}}, logr.Discard())
	start(t, n)
	noisy := question()
	noisy.Namespace = "noisy"
	for range 500 {
		n.Notify(EventOf(noisy, TypeRequested, time.Now()), nil)
	}
	quiet := question()
	quiet.Namespace = "quiet"
	n.Notify(EventOf(quiet, TypeRequested, time.Now()), nil)
	close(release)
	waitFor(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Contains(order, "toolgate.dev/namespaces/quiet")
	})
	mu.Lock()
	at := slices.Index(order, "toolgate.dev/namespaces/quiet")
	mu.Unlock()
	if at > 2 {
		t.Fatalf("the quiet namespace's question went out %d-th, behind the flood", at+1)
	}
}
