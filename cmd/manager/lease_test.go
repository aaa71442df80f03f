package main

import (
	"strings"
	"testing"
	"time"
)

func TestLeaseTimings(t *testing.T) {
	if err := defaultLease.validate(); err != nil {
		t.Fatalf("the defaults are refused: %v", err)
	}
	s := time.Second
	for _, c := range []struct {
		name  string
		l     leaseTimings
		error string // empty: accepted
	}{
		{"client-go's defaults", leaseTimings{15 * s, 10 * s, 2 * s}, ""},
		{"renew deadline as long as the lease", leaseTimings{6 * s, 6 * s, s}, "must be longer than --leader-elect-renew-deadline"},
		{"renew deadline past the lease", leaseTimings{6 * s, 8 * s, s}, "must be longer than --leader-elect-renew-deadline"},
		{"no retry within the deadline", leaseTimings{8 * s, 1200 * time.Millisecond, s}, "1.2 × --leader-elect-retry-period"},
		{"zero retry period", leaseTimings{8 * s, 6 * s, 0}, "must be positive"},
	} {
		err := c.l.validate()
		switch {
		case c.error == "" && err != nil:
			t.Errorf("%s: refused: %v", c.name, err)
		case c.error != "" && (err == nil || !strings.Contains(err.Error(), c.error)):
			t.Errorf("%s: error %v, want one saying %q", c.name, err, c.error)
		}
	}
}
