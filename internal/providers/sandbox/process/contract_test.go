package process

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/lifecycle"
	"github.com/toolgate/toolgate/internal/providers/sandbox"
	"github.com/toolgate/toolgate/internal/providers/sandbox/sandboxtest"
)

// TestProviderContract: the process provider passes the sandbox seam's
// provider contract. Its work is its tools' process groups, all in this
// process's tree; a body's start is a line in a file.
func TestProviderContract(t *testing.T) {
	dir := t.TempDir()
	starts := filepath.Join(dir, "starts")
	tool := func(name, script string) *toolgatev1alpha1.ToolDefinition {
		return &toolgatev1alpha1.ToolDefinition{Name: name, Container: &toolgatev1alpha1.ContainerRuntime{
			Command: []string{"/bin/sh", "-c", "echo x >> " + starts + "; " + script}, MaxOutputBytes: 4096}}
	}
	var p *Provider
	calls := 0
	sandboxtest.Contract(t, sandboxtest.Harness{
		Mount: func(t *testing.T, scope *lifecycle.Scope, mounts *sandbox.Mounts, notify sandbox.Notifier) {
			p = New(filepath.Join(dir, "ws"), notify)
			if err := mounts.Mount(scope, "Test", p); err != nil {
				t.Fatal(err)
			}
		},
		Job: func(t *testing.T, args string) sandbox.Job {
			calls++
			uid := types.UID(fmt.Sprintf("uid-%d", calls))
			return sandbox.Job{
				Key: sandbox.Key(uid, 1), Attempt: 1, Owner: types.NamespacedName{Namespace: "ns", Name: fmt.Sprintf("c%d", calls)}, OwnerUID: uid,
				Arguments: args, Session: sandbox.Session{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "s"}},
			}
		},
		Echo: tool("echo", "exec cat"),
		Want: func(args string) string { return args },
		Slow: tool("slow", "exec sleep 60"),
		Started: func() int {
			b, _ := os.ReadFile(starts)
			return strings.Count(string(b), "x")
		},
		Alive: func(job sandbox.Job) (inProcess, outside int) {
			p.mu.Lock()
			defer p.mu.Unlock()
			for key, r := range p.runs {
				if !sandbox.OfCall(key, job.OwnerUID) {
					continue
				}
				select {
				case <-r.gone:
				default:
					inProcess++
				}
			}
			return inProcess, 0
		},
	})
}
