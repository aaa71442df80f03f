package audit

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// Each record is one line of JSON marked with Kind, whatever its text
// holds (a message with newlines stays on its line).
func TestLinesWritesOneMarkedLinePerRecord(t *testing.T) {
	var buf bytes.Buffer
	l := &Lines{W: &buf, Log: logr.Discard()}
	l.Write(Record{ID: "u1/call", Type: TypeCall, Time: time.Unix(1, 0).UTC(), Call: "c1", Approval: &Approval{Decision: &Decision{Message: "two\nlines"}}})
	l.Write(Record{ID: "u1/decision", Type: TypeDecision, Call: "c1"})
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2:\n%s", len(lines), buf.String())
	}
	for _, line := range lines {
		var r Record
		if err := json.Unmarshal([]byte(line), &r); err != nil || r.Kind != Kind || r.Call != "c1" {
			t.Errorf("line %q: %+v %v", line, r, err)
		}
	}
}

type failing struct{}

func (failing) Write([]byte) (int, error) { return 0, errors.New("disk full") }

// A record that cannot be written is counted as lost, not dropped
// silently, and the writer goes on.
func TestALostRecordIsCounted(t *testing.T) {
	before := counterValue(t)
	(&Lines{W: failing{}, Log: logr.Discard()}).Write(Record{Type: TypeCall})
	if got := counterValue(t) - before; got != 1 {
		t.Errorf("lost records counted %v, want 1", got)
	}
}

func counterValue(t *testing.T) float64 {
	t.Helper()
	return testutil.ToFloat64(recordsLost)
}
