package audit

import (
	"encoding/json"
	"io"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/toolgate/toolgate/internal/pipeline"
)

// Kind marks every audit line, so that it is told from the manager's logs
// on the same output.
const Kind = "toolgate.dev/audit/v1"

// Record types.
const (
	TypeDecision = "decision" // an approval question was answered, expired or withdrawn
	TypeCall     = "call"     // a call settled
)

// Record is one audit record. Field names are part of the format; a field
// is added, never renamed or removed.
type Record struct {
	Kind string    `json:"kind"`
	ID   string    `json:"id"`
	Type string    `json:"type"`
	Time time.Time `json:"time"`

	Namespace string `json:"namespace"`
	Session   string `json:"session,omitempty"`
	Call      string `json:"call"`
	CallUID   string `json:"callUID"`
	CallID    string `json:"callID,omitempty"`
	Parent    string `json:"parent,omitempty"`
	Turn      int64  `json:"turn"`
	Index     int32  `json:"index"`
	Tool      string `json:"tool"`
	Requester string `json:"requester"`

	ArgumentsDigest  string `json:"argumentsDigest,omitempty"`
	ArgumentsPreview string `json:"argumentsPreview,omitempty"`
	// DigestKey names the key the record's digests were made under (a
	// key rotation changes every digest of the same arguments).
	DigestKey string `json:"digestKey,omitempty"`

	Verdicts []Verdict `json:"verdicts,omitempty"`
	Approval *Approval `json:"approval,omitempty"`

	Outcome      string `json:"outcome,omitempty"`
	Code         string `json:"code,omitempty"`
	ResultDigest string `json:"resultDigest,omitempty"`
	Attempts     int32  `json:"attempts,omitempty"`
	Pod          string `json:"pod,omitempty"`
	RuntimeClass string `json:"runtimeClass,omitempty"`
	Profile      string `json:"profile,omitempty"`
}

// Verdict is one stage boundary a call crossed.
type Verdict struct {
	Stage   string    `json:"stage"`
	Verdict string    `json:"verdict"`
	Reason  string    `json:"reason,omitempty"`
	Time    time.Time `json:"time"`
}

// Approval is what became of a call's approval question.
type Approval struct {
	Request string `json:"request"`
	// Question is the question's ID (its seal): every answer counted
	// named it, so it says what the approvers read.
	Question  string     `json:"question,omitempty"`
	Phase     string     `json:"phase"`
	Reason    string     `json:"reason,omitempty"`
	Required  int32      `json:"required"`
	Users     []string   `json:"users,omitempty"`
	Groups    []string   `json:"groups,omitempty"`
	Approvals []Approver `json:"approvals,omitempty"`
	Decision  *Decision  `json:"decision,omitempty"`
	Deadline  time.Time  `json:"deadline"`
	Resolved  *time.Time `json:"resolvedAt,omitempty"`
}

// Approver is one recorded approval.
type Approver struct {
	User       string     `json:"user"`
	RecordedAt *time.Time `json:"recordedAt,omitempty"`
	Message    string     `json:"message,omitempty"`
}

// Decision is a person's decision.
type Decision struct {
	Action    string `json:"action"`
	DecidedBy string `json:"decidedBy"`
	Message   string `json:"message,omitempty"`
}

// Sink receives audit records.
type Sink interface {
	Write(r Record)
}

// Tee writes each record to every sink it holds (a nil one is skipped).
type Tee []Sink

// Write writes r to each sink.
func (t Tee) Write(r Record) {
	for _, s := range t {
		if s != nil {
			s.Write(r)
		}
	}
}

// Lines writes each record as one JSON line to W. A record that cannot be
// written is logged (never its content) and counted.
type Lines struct {
	W   io.Writer
	Log logr.Logger

	mu sync.Mutex
}

// Write implements Sink.
func (l *Lines) Write(r Record) {
	r.Kind = Kind
	line, err := json.Marshal(r)
	if err == nil {
		line = append(line, '\n')
		l.mu.Lock()
		_, err = l.W.Write(line)
		l.mu.Unlock()
	}
	if err != nil {
		recordsLost.Inc()
		l.Log.Error(err, "audit record not written", "type", r.Type, "call", r.Call)
		return
	}
	recordsWritten.WithLabelValues(r.Type).Inc()
}

// Multi writes every record to each sink.
type Multi []Sink

// Write implements Sink.
func (m Multi) Write(r Record) {
	for _, s := range m {
		s.Write(r)
	}
}

// Digests make a call record's digests (a nil func: the digest is left
// out).
type Digests struct {
	Arguments func(pipeline.Arguments) string
	Result    func(value, content string) string
	// KeyID names the key both are made under.
	KeyID string
}
