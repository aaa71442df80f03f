package pod

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/providers/sandbox"
	"github.com/toolgate/toolgate/internal/runner"
)

// kubelet plays the kubelet for one pod on the real API server: it starts
// the pod's runner (a real channel server, keyed from the pod's own
// environment, with a stand-in body that echoes what it was handed) on a
// loopback port and reports the pod running.
type kubelet struct {
	addr   string
	runs   atomic.Int32
	handed atomic.Value // runner.Spec
}

func startKubelet(t *testing.T, c client.Client, pod *corev1.Pod) *kubelet {
	t.Helper()
	k := &kubelet{}
	pub, err := runner.ParseManagerKey(pod.Spec.Containers[0].Env[0].Value)
	must(t, err)
	s, err := runner.NewServer(pub)
	must(t, err)
	s.ArgumentsDir = t.TempDir()
	s.Execute = func(_ context.Context, spec runner.Spec, args []byte) (runner.Header, []byte, []byte) {
		k.runs.Add(1)
		k.handed.Store(spec)
		return runner.Header{BodyMillis: 1}, append([]byte("ran with "), args...), nil
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { _ = s.Serve(ctx, ln) }()
	k.addr = ln.Addr().String()
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.1", ContainerStatuses: []corev1.ContainerStatus{{
		Name: containerTool, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}},
	}}}
	must(t, c.Status().Update(context.Background(), pod))
	return k
}

func (k *kubelet) dial(ctx context.Context, _ string) (net.Conn, error) {
	return (&net.Dialer{}).DialContext(ctx, "tcp", k.addr)
}

// settle asks Run until it answers something other than ErrPending.
func settle(t *testing.T, p *Provider, job sandbox.Job) (sandbox.Result, error) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		res, err := p.Run(context.Background(), job)
		if !errors.Is(err, sandbox.ErrPending) {
			return res, err
		}
		if time.Now().After(deadline) {
			t.Fatal("no answer within 20s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestTheCallIsHandedOverTheChannel: on a real API server, the provider
// creates a pod holding no call, hands the call to the pod's runner once it
// listens, and returns the runner's frame; a restarted manager (a new
// provider with the same key) collects the same frame without the body
// running again; a manager without the key gets nothing; a pod not ready
// within the start bound fails as sandbox_not_ready with nothing run.
func TestTheCallIsHandedOverTheChannel(t *testing.T) {
	c, newProvider := onAPIServer(t)
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "channel-"}}
	must(t, c.Create(ctx, ns))
	call := &toolgatev1alpha1.ToolCall{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "call-1"},
		Spec: toolgatev1alpha1.ToolCallSpec{SessionRef: toolgatev1alpha1.LocalObjectReference{Name: "s"}, CallID: "c1",
			Tool: "wc", Arguments: `{"text":"a b"}`, Requester: "agent"},
	}
	must(t, c.Create(ctx, call))
	job := func(attempt int) sandbox.Job {
		j := testJob(toolgatev1alpha1.SandboxWorkspaceWrite, "ws")
		j.Owner.Namespace, j.OwnerUID, j.Attempt = ns.Name, call.UID, attempt
		j.Key = sandbox.Key(call.UID, attempt)
		j.Dispatched = time.Now()
		return j
	}
	podOf := func(attempt int) *corev1.Pod {
		pod := &corev1.Pod{}
		must(t, c.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: Name("call-1", string(call.UID), attempt)}, pod))
		return pod
	}

	p := newProvider()
	j := job(1)
	if _, err := p.Run(ctx, j); !errors.Is(err, sandbox.ErrPending) {
		t.Fatalf("start: %v", err)
	}
	k := startKubelet(t, c, podOf(1))
	p.Dial = k.dial
	res, err := settle(t, p, j)
	if err != nil || res.Stdout != `ran with {"text":"a b"}` {
		t.Fatalf("result %+v %v", res, err)
	}
	spec, _ := k.handed.Load().(runner.Spec)
	if len(spec.Argv) != 2 || spec.Argv[0] != "/bin/wc" || spec.TimeoutMillis != 20000 || spec.Workspace != "/workspace" || !spec.Writable {
		t.Fatalf("handed spec %+v", spec)
	}

	restarted := newProvider()
	restarted.Dial = k.dial
	j.Resumed = true
	if res, err := settle(t, restarted, j); err != nil || res.Stdout != `ran with {"text":"a b"}` {
		t.Fatalf("collected after a restart: %+v %v", res, err)
	}
	if n := k.runs.Load(); n != 1 {
		t.Fatalf("the body ran %d times", n)
	}

	impostor := newProvider()
	impostor.Dial = k.dial
	impostor.Key, err = runner.NewManagerKey()
	must(t, err)
	var f *pipeline.Failure
	if _, err := settle(t, impostor, j); !errors.As(err, &f) || f.Code != pipeline.CodeSandboxLost {
		t.Fatalf("a manager without the key: %v, want sandbox_lost", err)
	}

	// A pod that never gets ready: dispatched longer ago than the bound.
	late := job(2)
	late.Dispatched = time.Now().Add(-DefaultStartTimeout - time.Second)
	slow := newProvider()
	if _, err := slow.Run(ctx, late); !errors.Is(err, sandbox.ErrPending) {
		t.Fatalf("start: %v", err)
	}
	if _, err := settle(t, slow, late); !errors.As(err, &f) || f.Code != pipeline.CodeSandboxNotReady {
		t.Fatalf("a pod never ready: %v, want sandbox_not_ready", err)
	}
}
