package pod

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/lifecycle"
	"github.com/toolgate/toolgate/internal/providers/sandbox"
	"github.com/toolgate/toolgate/internal/providers/sandbox/sandboxtest"
	"github.com/toolgate/toolgate/internal/runner"
)

// TestProviderContract: the pod provider passes the sandbox seam's
// provider contract on a real API server, a stand-in kubelet running each
// pod's runner (a real channel server) as the pod appears and stopping it
// as the pod goes, and telling the provider of both as the manager's
// informer does (PodChanged). Its work in this process is its followers;
// outside it, its pods, which a successor adopts and so outlive its scope.
func TestProviderContract(t *testing.T) {
	c, newProvider := onAPIServer(t)
	ns := namespace(t, c, "contract-", nil)
	var (
		net     network
		p       *Provider
		started atomic.Int32
		calls   atomic.Int32
	)
	body := func(ctx context.Context, spec runner.Spec, args []byte, _ runner.SubCaller) (runner.Header, []byte, []byte) {
		started.Add(1)
		if spec.Argv[0] == "slow" {
			<-ctx.Done()
			return runner.Header{ExitCode: 143, Signal: "SIGTERM"}, nil, nil
		}
		return runner.Header{BodyMillis: 1}, append([]byte("ran with "), args...), nil
	}
	ctx, stop := context.WithCancel(context.Background())
	var kubeletDone sync.WaitGroup
	kubeletDone.Add(1)
	t.Cleanup(func() { stop(); kubeletDone.Wait() })
	go func() { // the kubelet
		defer kubeletDone.Done()
		running, gone, names := map[types.UID]*kubelet{}, map[types.UID]bool{}, map[types.UID]string{}
		for ctx.Err() == nil {
			time.Sleep(20 * time.Millisecond)
			pods := &corev1.PodList{}
			if c.List(ctx, pods, client.InNamespace(ns)) != nil {
				continue
			}
			present := map[types.UID]bool{}
			for i := range pods.Items {
				pod := &pods.Items[i]
				present[pod.UID] = true
				if _, ok := running[pod.UID]; ok || !pod.DeletionTimestamp.IsZero() || len(pod.Spec.Containers) == 0 {
					continue
				}
				ip := fmt.Sprintf("10.0.%d.%d", len(running)/250, len(running)%250+1)
				k, err := runKubelet(c, pod, ip, body)
				if err != nil {
					continue // the pod changed meanwhile (its seal): next look
				}
				net.add(ip, k)
				running[pod.UID], names[pod.UID] = k, pod.Name
				p.PodChanged(pod)
			}
			for uid, k := range running {
				if !present[uid] && !gone[uid] {
					k.stop() // the pod is gone: its runner with it
					gone[uid] = true
					p.PodChanged(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: names[uid]}})
				}
			}
		}
		for _, k := range running {
			k.stop()
		}
	}()
	tool := func(name string) *toolgatev1alpha1.ToolDefinition {
		return &toolgatev1alpha1.ToolDefinition{Name: name, TimeoutSeconds: 60,
			Container: &toolgatev1alpha1.ContainerRuntime{Image: "tools:1", Command: []string{name}, MaxOutputBytes: 4096}}
	}
	sandboxtest.Contract(t, sandboxtest.Harness{
		Mount: func(t *testing.T, scope *lifecycle.Scope, mounts *sandbox.Mounts, notify sandbox.Notifier) {
			p = newProvider()
			p.Notify, p.Dial = notify, net.dial
			if err := mounts.Mount(scope, "Test", p); err != nil {
				t.Fatal(err)
			}
		},
		Job: func(t *testing.T, args string) sandbox.Job {
			call := callIn(t, c, ns, fmt.Sprintf("call-%d", calls.Add(1)), args)
			j := testJob(toolgatev1alpha1.SandboxReadOnly, "")
			j.Owner.Namespace, j.Owner.Name, j.OwnerUID, j.Attempt = ns, call.Name, call.UID, 1
			j.Key, j.Dispatched, j.Arguments = sandbox.Key(call.UID, 1), time.Now(), args
			return j
		},
		Echo:    tool("echo"),
		Want:    func(args string) string { return "ran with " + args },
		Slow:    tool("slow"),
		Started: func() int { return int(started.Load()) },
		Alive: func(job sandbox.Job) (inProcess, outside int) {
			p.mu.Lock()
			for key, a := range p.attempts {
				if sandbox.OfCall(key, job.OwnerUID) && a.phase() == phaseFollowed {
					inProcess++
				}
			}
			p.mu.Unlock()
			pods := &corev1.PodList{}
			must(t, c.List(context.Background(), pods, client.InNamespace(ns)))
			for i := range pods.Items {
				if pod := &pods.Items[i]; controlledBy(pod, callOwner(job)) && !stopped(pod) {
					outside++
				}
			}
			return inProcess, outside
		},
	})
}
