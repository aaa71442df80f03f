package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-logr/logr"

	"github.com/toolgate/toolgate/internal/audit"
)

// --audit-log: empty is none, - is standard output, a path is appended to
// (a restarted manager keeps what its predecessor wrote), and a path that
// cannot be opened is an error at start, not a trail silently lost.
func TestAuditLogFlag(t *testing.T) {
	if s, err := openAudit("", logr.Discard()); s != nil || err != nil {
		t.Errorf("empty: %v %v, want no sink", s, err)
	}
	if s, err := openAudit("-", logr.Discard()); err != nil || s.(*audit.Lines).W != os.Stdout {
		t.Errorf("-: %v %v, want standard output", s, err)
	}
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	for _, id := range []string{"u1/call", "u2/call"} {
		s, err := openAudit(path, logr.Discard())
		if err != nil {
			t.Fatal(err)
		}
		s.Write(audit.Record{ID: id, Type: audit.TypeCall})
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(string(raw)), "\n"); len(lines) != 2 || !strings.Contains(lines[0], `"u1/call"`) || !strings.Contains(lines[1], `"u2/call"`) {
		t.Errorf("file holds %q, want both records in order", raw)
	}
	if info, err := os.Stat(path); err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("mode %v (%v), want 0600", info.Mode().Perm(), err)
	}
	if _, err := openAudit(filepath.Join(t.TempDir(), "missing", "audit.jsonl"), logr.Discard()); err == nil {
		t.Error("a path in a missing directory was accepted")
	}
}
