package runner

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A body that needs its egress proxy starts only once the proxy can be
// reached from the pod: a new pod's NetworkPolicy lands some time after
// the pod has its address, and a first connection made sooner is refused
// (a busybox nc then waited past its tool's timeout in e2e).
func TestABodyStartsOnceItsAwaitAddressIsReachable(t *testing.T) {
	addr := closedAddr(t)
	marker := filepath.Join(t.TempDir(), "up")
	go func() {
		// Not reachable at first, as under a policy not yet applied.
		time.Sleep(400 * time.Millisecond)
		if err := os.WriteFile(marker, []byte("reached"), 0o644); err != nil {
			return
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return
		}
		t.Cleanup(func() { _ = l.Close() })
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	h, out, _ := Execute(context.Background(), Spec{Argv: []string{"/bin/sh", "-c", `cat "$0" 2>/dev/null || echo "started before it was reachable"`, marker}, Await: addr}, nil, time.Second)
	if string(out) != "reached" || h.ExitCode != 0 {
		t.Fatalf("body said %q (exit %d), want it to start once %s listens", out, h.ExitCode, addr)
	}
}

// An address that never answers delays the body by AwaitBound at most:
// the body starts all the same, and meets the failure itself.
func TestABodyStartsAllTheSameWhenItsAwaitAddressNeverAnswers(t *testing.T) {
	addr := closedAddr(t)
	defer func(b time.Duration) { AwaitBound = b }(AwaitBound)
	AwaitBound = 300 * time.Millisecond
	h, out, _ := Execute(context.Background(), Spec{Argv: []string{"/bin/echo", "ran"}, Await: addr}, nil, time.Second)
	if string(out) != "ran\n" || h.Code != "" {
		t.Fatalf("body said %q (%+v), want it run after the bound", out, h)
	}
}

// closedAddr is a loopback address no one listens on (yet).
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}
