package pod

import (
	"context"
	"crypto/ecdh"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	promtestutil "github.com/prometheus/client_golang/prometheus/testutil"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/keys"
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
	handed atomic.Value       // runner.Spec
	stop   context.CancelFunc // stops the runner, as the pod's stop does (SIGTERM)
}

// bodyFunc stands in for the runner's body (runner.Server.Execute).
type bodyFunc func(ctx context.Context, spec runner.Spec, args []byte, sub runner.SubCaller) (runner.Header, []byte, []byte)

func startKubelet(t *testing.T, c client.Client, pod *corev1.Pod) *kubelet {
	return startKubeletAt(t, c, pod, "127.0.0.1")
}

// startKubeletAt is startKubelet reporting the pod at podIP (distinct
// addresses tell pods apart in a network).
func startKubeletAt(t *testing.T, c client.Client, pod *corev1.Pod, podIP string) *kubelet {
	return startKubeletWith(t, c, pod, podIP, nil)
}

// startKubeletWith is startKubeletAt with body as the runner's body (nil:
// the stand-in that echoes what it was handed).
func startKubeletWith(t *testing.T, c client.Client, pod *corev1.Pod, podIP string, body bodyFunc) *kubelet {
	t.Helper()
	k, err := runKubelet(c, pod, podIP, body)
	must(t, err)
	t.Cleanup(k.stop)
	return k
}

// runKubelet is startKubeletWith answering its failure (the pod's status
// write can conflict with another write of the pod) with its runner
// stopped; k.stop stops it otherwise.
func runKubelet(c client.Client, pod *corev1.Pod, podIP string, body bodyFunc) (*kubelet, error) {
	k := &kubelet{}
	pub, err := runner.ParseManagerKey(pod.Spec.Containers[0].Env[0].Value)
	if err != nil {
		return nil, err
	}
	s, err := runner.NewServer(pub)
	if err != nil {
		return nil, err
	}
	if s.ArgumentsDir, err = os.MkdirTemp("", "kubelet-"); err != nil {
		return nil, err
	}
	s.Execute = func(ctx context.Context, spec runner.Spec, args []byte, sub runner.SubCaller) (runner.Header, []byte, []byte) {
		k.runs.Add(1)
		k.handed.Store(spec)
		if body != nil {
			return body(ctx, spec, args, sub)
		}
		return runner.Header{BodyMillis: 1}, append([]byte("ran with "), args...), nil
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	dir := s.ArgumentsDir
	k.stop = func() { cancel(); _ = os.RemoveAll(dir) }
	go func() { _ = s.Serve(ctx, ln) }()
	k.addr = ln.Addr().String()
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: podIP, ContainerStatuses: []corev1.ContainerStatus{{
		Name: containerTool, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}},
	}}}
	if err := c.Status().Update(context.Background(), pod); err != nil {
		k.stop()
		return nil, err
	}
	return k, nil
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

// oneCall makes a namespace with one call, call-1, and returns the job of
// an attempt of it and a reader of that attempt's pod.
func oneCall(t *testing.T, c client.Client, prefix string) (func(attempt int) sandbox.Job, func(attempt int) *corev1.Pod) {
	ns := namespace(t, c, prefix, nil)
	call := callIn(t, c, ns, "call-1", `{"text":"a b"}`)
	job := func(attempt int) sandbox.Job {
		j := testJob(toolgatev1alpha1.SandboxWorkspaceWrite, "ws")
		j.Owner.Namespace, j.OwnerUID, j.Attempt = ns, call.UID, attempt
		j.Key = sandbox.Key(call.UID, attempt)
		j.Dispatched = time.Now()
		return j
	}
	podOf := func(attempt int) *corev1.Pod {
		t.Helper()
		pod := &corev1.Pod{}
		must(t, c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: Name("call-1", string(call.UID), attempt)}, pod))
		return pod
	}
	return job, podOf
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
	job, podOf := oneCall(t, c, "channel-")

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

	// A pod that never gets ready: looked at past its bound.
	late := job(2)
	clock := &laterClock{}
	slow := newProvider()
	slow.Clock = clock
	if _, err := slow.Run(ctx, late); !errors.Is(err, sandbox.ErrPending) {
		t.Fatalf("start: %v", err)
	}
	clock.ahead.Store(int64(DefaultStartTimeout + 2*time.Second))
	if _, err := settle(t, slow, late); !errors.As(err, &f) || f.Code != pipeline.CodeSandboxNotReady {
		t.Fatalf("a pod never ready: %v, want sandbox_not_ready", err)
	}
}

// boundAttempt starts attempt 1 of a new call (its pod created, not yet
// handed anything) and binds the pod to a node, as the scheduler does.
func boundAttempt(t *testing.T, prefix string) (client.Client, *Provider, sandbox.Job, func(attempt int) *corev1.Pod) {
	t.Helper()
	c, newProvider := onAPIServer(t)
	ctx := context.Background()
	job, podOf := oneCall(t, c, prefix)
	p := newProvider()
	j := job(1)
	if _, err := p.Run(ctx, j); !errors.Is(err, sandbox.ErrPending) {
		t.Fatalf("start: %v", err)
	}
	must(t, c.SubResource("binding").Create(ctx, podOf(1), &corev1.Binding{Target: corev1.ObjectReference{Kind: "Node", Name: "node-1"}}))
	return c, p, j, podOf
}

// runUntilStarted runs the attempt until its body has started (started
// closed), failing if it is decided before.
func runUntilStarted(t *testing.T, p *Provider, j sandbox.Job, started <-chan struct{}) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := p.Run(context.Background(), j); !errors.Is(err, sandbox.ErrPending) {
			t.Fatalf("decided before its body started: %v", err)
		}
		select {
		case <-started:
			return
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the body never started")
		}
	}
}

// TestABodyStoppedByItsPodsEvictionIsEvicted: the pod is evicted while
// its body runs; the runner, stopped with the pod, stops the body (a real
// process, SIGTERM) and still sends its frame. The call fails as the
// eviction, with its reason: never as the tool's exit code 143
// (hack/chaos found "tool_error: exit code 143" for a pod a fault deleted).
func TestABodyStoppedByItsPodsEvictionIsEvicted(t *testing.T) {
	c, p, j, podOf := boundAttempt(t, "evicted-body-")
	ctx := context.Background()
	started := make(chan struct{})
	body := func(ctx context.Context, _ runner.Spec, args []byte, _ runner.SubCaller) (runner.Header, []byte, []byte) {
		close(started)
		return runner.Execute(ctx, runner.Spec{Argv: []string{"/bin/sh", "-c", "sleep 30"}, Workspace: t.TempDir()}, args, time.Second)
	}
	k := startKubeletWith(t, c, podOf(1), "127.0.0.1", body)
	p.Dial = k.dial
	runUntilStarted(t, p, j, started)
	must(t, c.SubResource("eviction").Create(ctx, podOf(1), &policyv1.Eviction{}))
	k.stop()
	_, err := settle(t, p, j)
	var f *pipeline.Failure
	if !errors.As(err, &f) || f.Code != pipeline.CodeSandboxEvicted || !strings.Contains(f.Message, "EvictionByEvictionAPI") {
		t.Fatalf("%v, want sandbox_evicted naming the eviction API", err)
	}
}

// TestAFollowerLetsGoOfAPodOnALostNode: the pod's node stops reporting
// while the body runs; the cluster evicts the pod (the taint manager's
// DisruptionTarget), while the connection to its runner stays open and
// silent (a node gone from the network sends nothing, TCP gives up minutes
// later). The follower drops the connection once it sees the pod evicted,
// and the call fails as the eviction, long before the body would end.
func TestAFollowerLetsGoOfAPodOnALostNode(t *testing.T) {
	c, p, j, podOf := boundAttempt(t, "lost-node-")
	ctx := context.Background()
	started := make(chan struct{})
	body := func(ctx context.Context, _ runner.Spec, _ []byte, _ runner.SubCaller) (runner.Header, []byte, []byte) {
		close(started)
		<-ctx.Done() // the node is gone: never a frame
		return runner.Header{}, nil, nil
	}
	k := startKubeletWith(t, c, podOf(1), "127.0.0.1", body)
	p.Dial = k.dial
	runUntilStarted(t, p, j, started)
	pod := podOf(1)
	pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue,
		Reason: "DeletionByTaintManager", Message: "Taint manager: deleting due to NoExecute taint"})
	must(t, c.Status().Update(ctx, pod))
	p.PodChanged(pod) // as the manager's informer of tool pods does
	f := p.follower(j.Key)
	select {
	case <-f.done:
	case <-time.After(20 * time.Second):
		t.Fatal("the follower still waits on the lost node's runner")
	}
	_, err := settle(t, p, j)
	var fail *pipeline.Failure
	if !errors.As(err, &fail) || fail.Code != pipeline.CodeSandboxEvicted || !strings.Contains(fail.Message, "DeletionByTaintManager") {
		t.Fatalf("%v, want sandbox_evicted naming the taint manager", err)
	}
}

// TestAPodTheKubeletRefusedNeverRan: a kubelet refuses a pod at
// admission (a node short of memory for its requests, as node pressure
// leaves it: hack/chaos saw "OutOfmemory") and marks it Failed with the
// reason, no container ever started. The call says the node refused its
// pod and that the body never started, never that a runner ended without
// a result.
func TestAPodTheKubeletRefusedNeverRan(t *testing.T) {
	c, p, j, podOf := boundAttempt(t, "refused-")
	ctx := context.Background()
	pod := podOf(1)
	pod.Status = corev1.PodStatus{Phase: corev1.PodFailed, Reason: "OutOfmemory",
		Message: "Pod was rejected: Node didn't have enough resource: memory, requested: 67108864, used: 201326592, capacity: 252759291"}
	must(t, c.Status().Update(ctx, pod))
	_, err := settle(t, p, j)
	var f *pipeline.Failure
	if !errors.As(err, &f) || f.Code != pipeline.CodeSandboxUnavailable || !strings.Contains(f.Message, "OutOfmemory") || !strings.Contains(f.Message, "never started") {
		t.Fatalf("%v, want sandbox_unavailable naming the kubelet's reason", err)
	}
}

// TestARunnerKilledByAnEvictionNamesTheEviction: the kubelet kills an
// evicted pod's containers at once (node pressure: no frame) and reports
// the runner's container ended before it gives the pod its phase and
// reason. The call waits for the reason and fails as the eviction, not as
// a runner that ended without a result (hack/chaos, node-memory-pressure).
func TestARunnerKilledByAnEvictionNamesTheEviction(t *testing.T) {
	c, p, j, podOf := boundAttempt(t, "killed-runner-")
	ctx := context.Background()
	pod := podOf(1)
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.1", ContainerStatuses: []corev1.ContainerStatus{{
		Name: containerTool, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "Error"}},
	}}}
	must(t, c.Status().Update(ctx, pod))
	// The kubelet's next status update comes a moment later: meanwhile
	// nothing is decided.
	for until := time.Now().Add(2 * time.Second); time.Now().Before(until); time.Sleep(50 * time.Millisecond) {
		if _, err := p.Run(ctx, j); !errors.Is(err, sandbox.ErrPending) {
			t.Fatalf("decided before the kubelet said why: %v", err)
		}
	}
	pod = podOf(1)
	pod.Status.Phase, pod.Status.Reason, pod.Status.Message = corev1.PodFailed, "Evicted", "The node was low on resource: memory."
	must(t, c.Status().Update(ctx, pod))
	_, err := settle(t, p, j)
	var f *pipeline.Failure
	if !errors.As(err, &f) || f.Code != pipeline.CodeSandboxEvicted {
		t.Fatalf("%v, want sandbox_evicted", err)
	}
}

// TestTheStartBoundIsJudgedOnThePodsRecord: whether a pod met its start
// bound is read from the pod (when its runner's container started), not
// from when a manager looked. A manager that comes back after the bound
// (no leader for two minutes: a kill storm) hands the call to a pod that
// was up in time, and the body runs; a pod whose container started only
// after the bound still fails sandbox_not_ready; and a pod ready in time
// whose active deadline no longer leaves the body its timeout is never
// handed it, and the call says the manager was away (manager_unavailable),
// not that the sandbox failed.
func TestTheStartBoundIsJudgedOnThePodsRecord(t *testing.T) {
	c, newProvider := onAPIServer(t)
	ctx := context.Background()
	job, podOf := oneCall(t, c, "bound-")
	// startedAt sets when the pod's runner container started, as its
	// kubelet reports it; the pod started (StartTime) at its creation.
	startedAt := func(pod *corev1.Pod, at time.Time) {
		t.Helper()
		pod.Status.StartTime = &pod.CreationTimestamp
		pod.Status.ContainerStatuses[0].State.Running.StartedAt = metav1.NewTime(at)
		must(t, c.Status().Update(ctx, pod))
	}
	var f *pipeline.Failure
	for i, tc := range []struct {
		name      string
		startedIn time.Duration // after the pod's creation
		lookedAt  time.Duration // after the pod's creation
		want      pipeline.Code // "" runs the body
	}{
		{"up in time, the manager back after the bound", 3 * time.Second, DefaultStartTimeout + 10*time.Second, ""},
		{"up in time, the manager back within the active deadline's room", 3 * time.Second, DefaultStartTimeout + 4*time.Minute, ""},
		{"up only after the bound", DefaultStartTimeout + 5*time.Second, DefaultStartTimeout + 10*time.Second, pipeline.CodeSandboxNotReady},
		{"up in time, the manager back when the deadline leaves no room", 3 * time.Second, DefaultStartTimeout + 20*time.Second + activeSlack*time.Second, pipeline.CodeManagerUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			attempt := i + 1
			j := job(attempt)
			first := newProvider()
			if _, err := first.Run(ctx, j); !errors.Is(err, sandbox.ErrPending) {
				t.Fatalf("start: %v", err)
			}
			pod := podOf(attempt)
			k := startKubelet(t, c, pod)
			created := pod.CreationTimestamp.Time
			startedAt(pod, created.Add(tc.startedIn))
			// The manager that made the pod is gone; the next one resumes
			// the attempt, at lookedAt.
			next := newProvider()
			next.Dial = k.dial
			next.Clock = clocktesting.NewFakePassiveClock(created.Add(tc.lookedAt))
			j.Resumed = true
			res, err := settle(t, next, j)
			switch {
			case tc.want == "" && (err != nil || res.Stdout != `ran with {"text":"a b"}`):
				t.Fatalf("result %+v %v, want the body run", res, err)
			case tc.want != "" && (!errors.As(err, &f) || f.Code != tc.want):
				t.Fatalf("%v, want %s", err, tc.want)
			case tc.want != "" && k.runs.Load() != 0:
				t.Fatalf("the body ran %d times", k.runs.Load())
			}
		})
	}
}

// network routes a pod address to its fake runner, and counts the
// connections made to each address.
type network struct {
	mu    sync.Mutex
	addrs map[string]string
	dials map[string]int
}

// dialled is how many connections were made to podIP.
func (n *network) dialled(podIP string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.dials[podIP]
}

func (n *network) add(podIP string, k *kubelet) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.addrs == nil {
		n.addrs = map[string]string{}
	}
	n.addrs[podIP] = k.addr
}

func (n *network) dial(ctx context.Context, addr string) (net.Conn, error) {
	host, _, _ := net.SplitHostPort(addr)
	n.mu.Lock()
	to, ok := n.addrs[host]
	if n.dials == nil {
		n.dials = map[string]int{}
	}
	n.dials[host]++
	n.mu.Unlock()
	if !ok {
		return nil, errors.New("no route")
	}
	return (&net.Dialer{}).DialContext(ctx, "tcp", to)
}

// TestWarmPods: with warmPods set, the provider keeps a pod of the
// session's kind ready; the next call claims it (control moves to the call,
// the runner is handed that call) and a replacement starts; every pod
// serves one call. A pod that only looks warm (labels, but not controlled
// by the session) is never claimed: the call starts its own pod.
func TestWarmPods(t *testing.T) {
	c, newProvider := onAPIServer(t)
	ctx := context.Background()
	nsName, session, calls, job := warmSession(t, c, "warm-", 3)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nsName}}
	warmPods := func() []corev1.Pod { return waitingWarm(t, c, ns.Name) }
	waitWarm := func(not types.UID) corev1.Pod {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			if w := warmPods(); len(w) == 1 && w[0].UID != not {
				return w[0]
			}
			if time.Now().After(deadline) {
				t.Fatalf("warm pods: %d", len(warmPods()))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	var net network
	clock := &laterClock{}
	p := newProvider()
	p.Dial, p.Clock = net.dial, clock
	t.Cleanup(func() { _ = p.Stop(context.Background()) })

	// The metrics count what happens below.
	hits, misses := promtestutil.ToFloat64(warmClaims.WithLabelValues("hit")), promtestutil.ToFloat64(warmClaims.WithLabelValues("miss"))
	coldPods, warmCreated := promtestutil.ToFloat64(podsCreated.WithLabelValues("cold")), promtestutil.ToFloat64(podsCreated.WithLabelValues("warm"))

	// The first call starts cold, and a warm pod is started beside it.
	if _, err := p.Run(ctx, job(0)); !errors.Is(err, sandbox.ErrPending) {
		t.Fatalf("start: %v", err)
	}
	cold := &corev1.Pod{}
	must(t, c.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: Name("call-0", string(calls[0].UID), 1)}, cold))
	net.add("10.0.0.1", startKubeletAt(t, c, cold, "10.0.0.1"))
	if res, err := settle(t, p, job(0)); err != nil || res.Stdout != `ran with {"n":0}` {
		t.Fatalf("cold call: %+v %v", res, err)
	}
	warm := waitWarm("")
	if !metav1.IsControlledBy(&warm, session) || len(warm.Spec.Containers[0].Env) != 1 {
		t.Fatalf("the warm pod is not the session's, or holds more than the manager's key: %+v", warm.ObjectMeta)
	}
	wk := startKubeletAt(t, c, &warm, "10.0.0.2")
	net.add("10.0.0.2", wk)

	// The second call claims it.
	if res, err := settle(t, p, job(1)); err != nil || res.Stdout != `ran with {"n":1}` {
		t.Fatalf("warm call: %+v %v", res, err)
	}
	if n := wk.runs.Load(); n != 1 {
		t.Fatalf("the warm pod ran %d calls", n)
	}
	claimed := &corev1.Pod{}
	must(t, c.Get(ctx, client.ObjectKeyFromObject(&warm), claimed))
	if !metav1.IsControlledBy(claimed, calls[1]) || toolgatev1alpha1.WarmWaiting(claimed) {
		t.Fatalf("the claimed pod: %+v", claimed.ObjectMeta)
	}
	// The claim changes no label (a label change makes the node's policy
	// engine resync on the warm call's path): the annotations name the
	// call, and a successor finds the pod by them.
	if !maps.Equal(claimed.Labels, warm.Labels) {
		t.Fatalf("the claim changed the pod's labels: %v, were %v", claimed.Labels, warm.Labels)
	}
	if name, uid, attempt := toolgatev1alpha1.PodCall(claimed); name != "call-1" || uid != string(calls[1].UID) || attempt != "1" {
		t.Fatalf("the claimed pod names call %q %q attempt %q", name, uid, attempt)
	}
	if found, err := newProvider().claimed(ctx, c, job(1)); err != nil || found == nil || found.UID != claimed.UID {
		t.Fatalf("a successor's lookup of the claimed pod: %v %v", found, err)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: Name("call-1", string(calls[1].UID), 1)}, &corev1.Pod{}); err == nil {
		t.Fatal("the warm call also got a cold pod")
	}
	if got := promtestutil.ToFloat64(warmClaims.WithLabelValues("miss")) - misses; got != 1 {
		t.Fatalf("warm claims missed: %v, want 1 (the first call)", got)
	}
	if got := promtestutil.ToFloat64(warmClaims.WithLabelValues("hit")) - hits; got != 1 {
		t.Fatalf("warm claims hit: %v, want 1 (the second call)", got)
	}
	if got := promtestutil.ToFloat64(podsCreated.WithLabelValues("cold")) - coldPods; got != 1 {
		t.Fatalf("cold pods created: %v, want 1", got)
	}
	if got := promtestutil.ToFloat64(podsCreated.WithLabelValues("warm")) - warmCreated; got < 1 {
		t.Fatalf("warm pods created: %v, want at least 1", got)
	}

	// A replacement starts; make it look like someone else's, keeping its
	// labels: it is never claimed.
	next := waitWarm(warm.UID)
	must(t, c.Delete(ctx, &next, client.GracePeriodSeconds(0)))
	forged := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "forged-warm", Labels: next.Labels}, Spec: next.Spec}
	must(t, c.Create(ctx, forged))
	fk := startKubeletAt(t, c, forged, "10.0.0.3")
	net.add("10.0.0.3", fk)
	if _, err := p.Run(ctx, job(2)); !errors.Is(err, sandbox.ErrPending) {
		t.Fatalf("start: %v", err)
	}
	own := &corev1.Pod{}
	must(t, c.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: Name("call-2", string(calls[2].UID), 1)}, own))
	if fk.runs.Load() != 0 {
		t.Fatal("a pod that is not the session's was handed a call")
	}

	// The sweep releases warm pods too old to wait, never a claimed one
	// (it keeps its pool's labels): it is its call's.
	clock.ahead.Store(int64(warmMaxAge + time.Minute))
	p.sweep(ctx)
	if err := c.Get(ctx, client.ObjectKeyFromObject(claimed), claimed); err != nil || !claimed.DeletionTimestamp.IsZero() {
		t.Fatalf("the sweep released a claimed warm pod: %v", err)
	}
}

// laterClock is the real clock moved ahead by what a test stores: the
// provider's goroutines read it while the test moves it.
type laterClock struct{ ahead atomic.Int64 }

func (c *laterClock) Now() time.Time                  { return time.Now().Add(time.Duration(c.ahead.Load())) }
func (c *laterClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// setStatus writes status on pod as the kubelet would. The provider may
// still be writing the pod (sealing a warm pod it just made) as it is
// read: the status is written on the pod as it is then.
func setStatus(t *testing.T, c client.Client, pod corev1.Pod, status corev1.PodStatus) {
	t.Helper()
	must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(&pod), &pod); err != nil {
			return err
		}
		pod.Status = status
		return c.Status().Update(context.Background(), &pod)
	}))
}

// waitingWarm lists the warm pods of ns no call has claimed.
func waitingWarm(t *testing.T, c client.Client, ns string) []corev1.Pod {
	t.Helper()
	list := &corev1.PodList{}
	must(t, c.List(context.Background(), list, client.InNamespace(ns), client.MatchingLabels{toolgatev1alpha1.LabelWarm: "true"}))
	return slices.DeleteFunc(list.Items, func(pod corev1.Pod) bool { return !toolgatev1alpha1.WarmWaiting(&pod) })
}

// TestPreparedPodWaitsForTheHandOver: a pod prepared before the dispatch
// boundary runs nothing, however long it waits; the attempt's Run (here by
// a successor manager, after the boundary) hands the call to it, once.
func TestPreparedPodWaitsForTheHandOver(t *testing.T) {
	c, newProvider := onAPIServer(t)
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace(t, c, "prepared-", nil)}}
	call := callIn(t, c, ns.Name, "call-1", `{"n":1}`)
	job := testJob(toolgatev1alpha1.SandboxWorkspaceWrite, "ws")
	job.Owner.Namespace, job.OwnerUID, job.Attempt = ns.Name, call.UID, 1
	job.Key, job.Arguments, job.Dispatched = sandbox.Key(call.UID, 1), call.Spec.Arguments, time.Now()

	p := newProvider()
	must(t, p.Prepare(ctx, job))
	must(t, p.Prepare(ctx, job)) // idempotent
	pod := &corev1.Pod{}
	must(t, c.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: Name("call-1", string(call.UID), 1)}, pod))
	k := startKubelet(t, c, pod)
	p.Dial = k.dial
	time.Sleep(time.Second) // the runner listens; nothing may reach it
	if n := k.runs.Load(); n != 0 {
		t.Fatalf("a prepared pod ran %d calls before Run", n)
	}
	successor := newProvider()
	successor.Dial = k.dial
	job.Resumed = true
	if res, err := settle(t, successor, job); err != nil || res.Stdout != `ran with {"n":1}` {
		t.Fatalf("after a restart: %+v %v", res, err)
	}
	if n := k.runs.Load(); n != 1 {
		t.Fatalf("the body ran %d times", n)
	}
}

// TestIdleWarmPodsAreReleased: a warm pod of a session that made no call
// for WarmIdle is deleted by the sweep; one of a session in use stays.
func TestIdleWarmPodsAreReleased(t *testing.T) {
	c, newProvider := onAPIServer(t)
	ctx := context.Background()
	ns, _, calls, jobOf := warmSession(t, c, "idle-", 1)
	call, job := calls[0], jobOf(0)

	now := clocktesting.NewFakePassiveClock(time.Now())
	p := newProvider()
	p.Clock = now
	t.Cleanup(func() { _ = p.Stop(context.Background()) })
	must(t, p.Prepare(ctx, job)) // a cold pod, and the session's pool starts
	warm := func() int {
		n := 0
		for _, pod := range waitingWarm(t, c, ns) {
			if pod.DeletionTimestamp.IsZero() {
				n++
			}
		}
		return n
	}
	deadline := time.Now().Add(20 * time.Second)
	for warm() != 1 {
		if time.Now().After(deadline) {
			t.Fatal("no warm pod started")
		}
		time.Sleep(50 * time.Millisecond)
	}
	p.sweep(ctx)
	if n := warm(); n != 1 {
		t.Fatalf("a session in use lost its warm pod: %d left", n)
	}
	if g := promtestutil.ToFloat64(warmPods); g < 1 {
		t.Fatalf("the warm pods gauge says %v with a warm pod waiting", g)
	}
	// What it holds is visible, per namespace: its containers' requests.
	pod := waitingWarm(t, c, ns)[0]
	wantCPU, wantMemory := requested(&pod)
	if wantCPU <= 0 || wantMemory <= 0 {
		t.Fatalf("a warm pod requests cpu %v, memory %v", wantCPU, wantMemory)
	}
	if cpu, memory := promtestutil.ToFloat64(warmReserved.WithLabelValues(ns, "cpu")), promtestutil.ToFloat64(warmReserved.WithLabelValues(ns, "memory")); cpu != wantCPU || memory != wantMemory {
		t.Fatalf("the reservation gauge says cpu %v, memory %v; the warm pod requests %v, %v", cpu, memory, wantCPU, wantMemory)
	}

	// A warm pod that ended (its container could not start, say) can never
	// be claimed: the sweep removes it at once, and starts none in its
	// place (the next call of its kind does; a broken kind does not churn).
	setStatus(t, c, waitingWarm(t, c, ns)[0], corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: []corev1.ContainerStatus{{Name: containerTool,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "StartError", ExitCode: 128}}}}})
	p.sweep(ctx)
	p.warm.fills.Wait()
	if n := warm(); n != 0 {
		t.Fatalf("%d warm pods after the sweep, want the ended one gone and none started", n)
	}
	next := job
	next.Attempt, next.Key = 2, sandbox.Key(call.UID, 2)
	must(t, p.Prepare(ctx, next)) // the next call of the kind refills the pool
	deadline = time.Now().Add(20 * time.Second)
	for warm() != 1 {
		if time.Now().After(deadline) {
			t.Fatal("no warm pod started after the next call")
		}
		time.Sleep(50 * time.Millisecond)
	}

	// One whose image cannot be pulled can never be claimed either: it is
	// dropped, not left in ImagePullBackOff holding its requests.
	setStatus(t, c, waitingWarm(t, c, ns)[0], corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{Name: containerTool,
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff"}}}}})
	p.sweep(ctx)
	p.warm.fills.Wait()
	if n := warm(); n != 0 {
		t.Fatalf("%d warm pods after the sweep, want the one that cannot pull its image gone", n)
	}
	next.Attempt, next.Key = 3, sandbox.Key(call.UID, 3)
	must(t, p.Prepare(ctx, next))
	deadline = time.Now().Add(20 * time.Second)
	for warm() != 1 {
		if time.Now().After(deadline) {
			t.Fatal("no warm pod started after the next call")
		}
		time.Sleep(50 * time.Millisecond)
	}

	now.SetTime(now.Now().Add(WarmIdle + time.Minute))
	p.sweep(ctx)
	if n := warm(); n != 0 {
		t.Fatalf("%d warm pods of an idle session left", n)
	}
}

// followerReads counts the pod reads the follower makes: those not made
// within Run (whose context carries runMark).
type followerReads struct {
	client.Reader
	gets atomic.Int32
}

type runMark struct{}

func (r *followerReads) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*corev1.Pod); ok && ctx.Value(runMark{}) == nil {
		r.gets.Add(1)
	}
	return r.Reader.Get(ctx, key, obj, opts...)
}

// slowFollower is a provider on the API server whose followers poll an
// hour apart, and a job for a call in a new namespace.
func slowFollower(t *testing.T) (client.Client, *Provider, *network, *followerReads, sandbox.Job, string) {
	c, newProvider := onAPIServer(t)
	ns := namespace(t, c, "wake-", nil)
	call := callIn(t, c, ns, "call-1", `{"text":"a"}`)
	j := testJob(toolgatev1alpha1.SandboxWorkspaceWrite, "ws")
	j.Owner.Namespace, j.OwnerUID, j.Attempt = ns, call.UID, 1
	j.Key = sandbox.Key(call.UID, 1)
	j.Dispatched = time.Now()
	p := newProvider()
	reads := &followerReads{Reader: c}
	p.Reader = reads
	p.minPoll, p.maxPoll = time.Hour, time.Hour
	net := &network{}
	p.Dial = net.dial
	return c, p, net, reads, j, Name("call-1", string(call.UID), 1)
}

// TestAStartedPodIsHandedItsCallWhenItChanges: the follower of a pod that
// is not running yet looks again when the pod changes (PodChanged, called
// from the manager's pod informer), not only at its next poll: with polls
// an hour apart, the call is still handed over once the pod runs.
func TestAStartedPodIsHandedItsCallWhenItChanges(t *testing.T) {
	c, p, net, _, j, name := slowFollower(t)
	ctx := context.WithValue(context.Background(), runMark{}, true)
	if _, err := p.Run(ctx, j); !errors.Is(err, sandbox.ErrPending) { // creates the pod
		t.Fatalf("start: %v", err)
	}
	if _, err := p.Run(ctx, j); !errors.Is(err, sandbox.ErrPending) { // follows it
		t.Fatalf("follow: %v", err)
	}
	// The follower has looked once (the pod as the provider created it:
	// not running, no address) and waits an hour for its next poll.
	if p.follower(j.Key) == nil {
		t.Fatal("the pod is not followed")
	}
	pod := &corev1.Pod{}
	must(t, c.Get(ctx, client.ObjectKey{Namespace: j.Owner.Namespace, Name: name}, pod))
	k := startKubeletAt(t, c, pod, "10.0.0.7")
	net.add("10.0.0.7", k)
	p.PodChanged(pod)
	res, err := settle(t, p, j)
	if err != nil || res.Stdout != "ran with "+j.Arguments {
		t.Fatalf("result %+v %v", res, err)
	}
}

// TestTheRunnerIsTriedOnceThePodHasAnAddress: the runner listens before
// the kubelet reports its container running (at its next relist), so a
// pod with an address is tried at once, its container still reported
// waiting.
func TestTheRunnerIsTriedOnceThePodHasAnAddress(t *testing.T) {
	c, p, net, _, j, name := slowFollower(t)
	ctx := context.Background()
	if _, err := p.Run(ctx, j); !errors.Is(err, sandbox.ErrPending) { // creates the pod
		t.Fatalf("start: %v", err)
	}
	pod := &corev1.Pod{}
	must(t, c.Get(ctx, client.ObjectKey{Namespace: j.Owner.Namespace, Name: name}, pod))
	k := startKubeletAt(t, c, pod, "10.0.0.8")
	net.add("10.0.0.8", k)
	// As the kubelet reports it before its relist: an address, the
	// runner's container still waiting.
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: containerTool, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}}}}
	must(t, c.Status().Update(ctx, pod))
	p.PodChanged(pod) // as the informer tells of that change
	res, err := settle(t, p, j)
	if err != nil || res.Stdout != "ran with "+j.Arguments {
		t.Fatalf("result %+v %v", res, err)
	}
}

// TestChannelKeyRotation: after a rotation, the pod made under the
// previous key is handed its call and yields its frame, once, and every
// new pod is made under the new key; after a second rotation, a pod of the
// key dropped is no longer toolgate's, and its resumed attempt fails
// cleanly (sandbox_lost) without running anything again. The Secret
// carries both keys across a rotation.
func TestChannelKeyRotation(t *testing.T) {
	c, newProvider := onAPIServer(t)
	ctx := context.Background()
	job, podOf := oneCall(t, c, "rotate-")
	keyIn := func(pod *corev1.Pod) string { return pod.Spec.Containers[0].Env[0].Value }
	hexOf := func(k *ecdh.PrivateKey) string { return hex.EncodeToString(k.PublicKey().Bytes()) }

	// The Secret: made on first start, both keys after a rotation, the
	// oldest dropped at the next.
	secretNS := namespace(t, c, "manager-", nil)
	first, err := keys.Load(ctx, c, secretNS, "key")
	must(t, err)
	if first.Previous != nil {
		t.Fatal("a new Secret has a previous key")
	}
	_, err = keys.Rotate(ctx, c, secretNS, "key")
	must(t, err)
	second, err := keys.Load(ctx, c, secretNS, "key")
	must(t, err)
	if second.Current.Equal(first.Current) || second.Previous == nil || !second.Previous.Equal(first.Current) {
		t.Fatal("after a rotation the Secret holds a new key and the one it replaced")
	}
	_, err = keys.Rotate(ctx, c, secretNS, "key")
	must(t, err)
	third, err := keys.Load(ctx, c, secretNS, "key")
	must(t, err)
	if !third.Previous.Equal(second.Current) {
		t.Fatal("a second rotation keeps the key it replaced")
	}

	// A pod made before the rotation (prepared: nothing handed yet).
	before := newProvider()
	j := job(1)
	must(t, before.Prepare(ctx, j))
	if keyIn(podOf(1)) != hexOf(before.Key) {
		t.Fatal("the pod does not carry the manager's key")
	}
	k := startKubelet(t, c, podOf(1))
	newKey, err := runner.NewManagerKey()
	must(t, err)
	rotated := newProvider()
	rotated.Key, rotated.Previous, rotated.Dial = newKey, before.Key, k.dial
	if res, err := settle(t, rotated, j); err != nil || res.Stdout != `ran with {"text":"a b"}` {
		t.Fatalf("the pod of the previous key, after the rotation: %+v %v", res, err)
	}
	j2 := job(2)
	if _, err := rotated.Run(ctx, j2); !errors.Is(err, sandbox.ErrPending) {
		t.Fatalf("start: %v", err)
	}
	if got := podOf(2); keyIn(got) != hexOf(newKey) || !rotated.sealed(got) {
		t.Fatal("a pod made after the rotation is not made and sealed under the new key")
	}
	rotated.Discard(ctx, j2.Key)

	// Two rotations on, the pod of the key dropped is not toolgate's.
	newest, err := runner.NewManagerKey()
	must(t, err)
	twice := newProvider()
	twice.Key, twice.Previous, twice.Dial = newest, newKey, k.dial
	j.Resumed = true
	var f *pipeline.Failure
	if _, err := settle(t, twice, j); !errors.As(err, &f) || f.Code != pipeline.CodeSandboxLost {
		t.Fatalf("a pod of a key two rotations old: %v, want sandbox_lost", err)
	}
	if n := k.runs.Load(); n != 1 {
		t.Fatalf("the body ran %d times", n)
	}
}

// TestAPreparedPodIsHandedOverWithoutReadingItAgain: the pod Prepare made
// for an attempt is followed from the answer its creation gave, neither
// read by Run nor first read by its follower (reads of the API server
// between the dispatch boundary and the body were the warm path's largest
// cost).
func TestAPreparedPodIsHandedOverWithoutReadingItAgain(t *testing.T) {
	_, p, _, reads, j, _ := slowFollower(t)
	ctx := context.Background()
	must(t, p.Prepare(ctx, j))
	j.Record = &sandbox.Record{Where: p.Where(j.Key)}
	if _, err := p.Run(ctx, j); !errors.Is(err, sandbox.ErrPending) {
		t.Fatalf("run: %v", err)
	}
	if p.follower(j.Key) == nil {
		t.Fatal("the prepared pod is not followed")
	}
	if n := reads.gets.Load(); n != 0 {
		t.Fatalf("the prepared pod was read %d times on its way to the hand-over", n)
	}
}

// TestAClaimedWarmPodIsReplacedOnceItsCallSettles: the replacement of a
// claimed warm pod does not start beside the call (its start takes the
// node's CPU from the call), but once the call's pod is discarded.
func TestAClaimedWarmPodIsReplacedOnceItsCallSettles(t *testing.T) {
	c, newProvider := onAPIServer(t)
	ctx := context.Background()
	ns, _, _, job := warmSession(t, c, "refill-", 2)
	warm := func() []corev1.Pod { return waitingWarm(t, c, ns) }
	p := newProvider()
	p.refillAfter = time.Hour
	t.Cleanup(func() { _ = p.Stop(context.Background()) })
	// A cold call fills the pool at once.
	if _, err := p.Run(ctx, job(0)); !errors.Is(err, sandbox.ErrPending) {
		t.Fatalf("start: %v", err)
	}
	var first corev1.Pod
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if w := warm(); len(w) == 1 {
			first = w[0]
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no warm pod after a cold call")
		}
	}
	startKubeletAt(t, c, &first, "10.0.2.1")
	// The next call claims it: no replacement while the call runs.
	must(t, p.Prepare(ctx, job(1)))
	if got := p.Where(job(1).Key); got != first.Name {
		t.Fatalf("prepared %q, want the warm pod %s", got, first.Name)
	}
	p.warm.fills.Wait()
	if w := warm(); len(w) != 0 {
		t.Fatalf("%d warm pods beside the call that claimed the pool's", len(w))
	}
	p.Discard(ctx, job(1).Key)
	for deadline := time.Now().Add(20 * time.Second); len(warm()) != 1; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no replacement once the call settled")
		}
	}
}

// warmSession creates, in a new namespace, a session and n calls; job(i)
// is the first attempt of call i in the session, which keeps one warm pod.
func warmSession(t *testing.T, c client.Client, prefix string, n int) (string, *toolgatev1alpha1.AgentSession, []*toolgatev1alpha1.ToolCall, func(int) sandbox.Job) {
	t.Helper()
	ctx := context.Background()
	ns := namespace(t, c, prefix, nil)
	session := &toolgatev1alpha1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s"},
		Spec: toolgatev1alpha1.AgentSessionSpec{Owner: "agent", ProfileRef: toolgatev1alpha1.LocalObjectReference{Name: "p"}}}
	must(t, c.Create(ctx, session))
	var calls []*toolgatev1alpha1.ToolCall
	for i := range n {
		calls = append(calls, callIn(t, c, ns, fmt.Sprintf("call-%d", i), fmt.Sprintf(`{"n":%d}`, i)))
	}
	job := func(i int) sandbox.Job {
		j := testJob(toolgatev1alpha1.SandboxWorkspaceWrite, "ws")
		j.Owner = client.ObjectKeyFromObject(calls[i])
		j.OwnerUID, j.Attempt, j.Key = calls[i].UID, 1, sandbox.Key(calls[i].UID, 1)
		j.Arguments, j.Dispatched, j.Session.WarmPods = calls[i].Spec.Arguments, time.Now(), 1
		j.Session.NamespacedName, j.Session.UID = client.ObjectKeyFromObject(session), session.UID
		return j
	}
	return ns, session, calls, job
}

// TestAChangeSeenDuringAnExchangeIsHandedBack: while an exchange runs, the
// pod's changes are read to see whether it ended; one that ends nothing
// (a cold pod's runner starting, seen while the runner was dialled too
// early) is handed back to the follower, whose next wait returns at once
// instead of after its poll.
func TestAChangeSeenDuringAnExchangeIsHandedBack(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "uid-p"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1"}}
	p := &Provider{Reader: fake.NewClientBuilder().WithObjects(pod).Build(), Key: managerKey}
	server, conn := net.Pipe()
	p.Dial = func(context.Context, string) (net.Conn, error) { return conn, nil }
	f := &follower{pod: client.ObjectKeyFromObject(pod), uid: pod.UID, wake: make(chan struct{}, 1)}
	done := make(chan error, 1)
	go func() {
		_, _, err := p.exchangeWatching(context.Background(), f, pod, runner.Request{Op: runner.OpRun, Call: "k"}, sandbox.Job{})
		done <- err
	}()
	f.wake <- struct{}{} // the pod changed, and still runs
	// The watcher took the change and read the pod; then the runner goes.
	for deadline := time.Now().Add(10 * time.Second); len(f.wake) > 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the change was never read")
		}
	}
	time.Sleep(50 * time.Millisecond)
	_ = server.Close()
	if err := <-done; err == nil {
		t.Fatal("an exchange whose runner went answered no error")
	}
	select {
	case <-f.wake:
	default:
		t.Fatal("the change seen during the exchange was lost: the follower waits a whole poll")
	}
}

// TestAWarmPodServesOnlyOnceClaimed: the claim of a warm pod is written
// beside the dispatch boundary, and the call is handed over only once the
// claim is durable: a claim that fails hands nothing over (the body never
// started). A successor that finds the boundary naming a warm pod still
// the session's finishes the claim and hands the call over; a warm pod
// another call's record names is never reserved.
func TestAWarmPodServesOnlyOnceClaimed(t *testing.T) {
	c, newProvider := onAPIServer(t)
	ctx := context.Background()
	ns, _, calls, job := warmSession(t, c, "claim-", 5)
	var net network
	// Claims of pods fail while refuse is set (the API server's answer to
	// a pod deleted meanwhile).
	var refuse atomic.Bool
	p := newProvider()
	p.Client = refusingClaims{Client: c, refuse: &refuse}
	p.Dial = net.dial
	t.Cleanup(func() { _ = p.Stop(context.Background()) })
	warmPod := func(not ...types.UID) corev1.Pod {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			for _, w := range waitingWarm(t, c, ns) {
				if !slices.Contains(not, w.UID) {
					return w
				}
			}
			if time.Now().After(deadline) {
				t.Fatal("no warm pod")
			}
		}
	}
	// A cold call fills the pool.
	if _, err := p.Run(ctx, job(0)); !errors.Is(err, sandbox.ErrPending) {
		t.Fatalf("start: %v", err)
	}
	cold := &corev1.Pod{}
	must(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: Name("call-0", string(calls[0].UID), 1)}, cold))
	net.add("10.0.1.1", startKubeletAt(t, c, cold, "10.0.1.1"))
	if _, err := settle(t, p, job(0)); err != nil {
		t.Fatalf("cold call: %v", err)
	}
	warm := warmPod()
	wk := startKubeletAt(t, c, &warm, "10.0.1.2")
	net.add("10.0.1.2", wk)

	// Another call's record names the warm pod: it is not reserved.
	taken := job(4)
	taken.Record = &sandbox.Record{Taken: []string{warm.Name}}
	must(t, p.Prepare(ctx, taken))
	if got := p.Where(taken.Key); got == warm.Name || got == "" {
		t.Fatalf("prepared %q, want a pod of its own", got)
	}
	p.Discard(ctx, taken.Key)

	// A claim on its way: the call waits for it, however often it is run,
	// and the pod (not the call's yet) is neither judged nor stopped.
	hold := make(chan struct{})
	release := sync.OnceFunc(func() { close(hold) })
	t.Cleanup(release) // before the provider's Stop, which waits for the claim
	p.Client = refusingClaims{Client: c, refuse: &refuse, hold: hold}
	j := job(1)
	must(t, p.Prepare(ctx, j))
	if got := p.Where(j.Key); got != warm.Name {
		t.Fatalf("prepared %q, want the warm pod %s", got, warm.Name)
	}
	j.Record = &sandbox.Record{Where: warm.Name}
	for range 3 {
		if _, err := p.Run(ctx, j); !errors.Is(err, sandbox.ErrPending) {
			t.Fatalf("run while the claim is on its way: %v", err)
		}
	}
	if wk.runs.Load() != 0 {
		t.Fatal("handed over before the claim was durable")
	}
	// Its runner is connected to and greeted meanwhile, with nothing
	// handed over: the hand-over then only sends the request.
	for deadline := time.Now().Add(10 * time.Second); net.dialled("10.0.1.2") == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the reserved warm pod's runner was not greeted while its claim was on its way")
		}
	}
	release()
	if res, err := settle(t, p, j); err != nil || res.Stdout != `ran with {"n":1}` {
		t.Fatalf("once claimed: %+v %v", res, err)
	}
	if n := net.dialled("10.0.1.2"); n != 1 {
		t.Fatalf("%d connections to the warm pod's runner, want the one greeted ahead", n)
	}
	p.Discard(ctx, j.Key)

	// Its claim fails: the call is never handed over.
	next := warmPod(warm.UID)
	nk := startKubeletAt(t, c, &next, "10.0.1.3")
	net.add("10.0.1.3", nk)
	refuse.Store(true)
	j = job(2)
	must(t, p.Prepare(ctx, j))
	if got := p.Where(j.Key); got != next.Name {
		t.Fatalf("prepared %q, want the warm pod %s", got, next.Name)
	}
	j.Record = &sandbox.Record{Where: next.Name}
	_, err := settle(t, p, j)
	var f *pipeline.Failure
	if !errors.As(err, &f) || f.Code != pipeline.CodeSandboxLost || !strings.Contains(f.Message, "never started") {
		t.Fatalf("%v, want sandbox_lost, the body never started", err)
	}
	if n := nk.runs.Load(); n != 0 {
		t.Fatalf("a pod whose claim failed ran %d calls", n)
	}

	// A successor finds the boundary naming the warm pod, unclaimed (the
	// claim refused above: still the session's).
	refuse.Store(false)
	successor := newProvider()
	successor.Dial = net.dial
	t.Cleanup(func() { _ = successor.Stop(context.Background()) })
	j = job(3)
	j.Resumed, j.Record = true, &sandbox.Record{Where: next.Name}
	if res, err := settle(t, successor, j); err != nil || res.Stdout != `ran with {"n":3}` {
		t.Fatalf("resumed on the recorded warm pod: %+v %v", res, err)
	}
	claimed := &corev1.Pod{}
	must(t, c.Get(ctx, client.ObjectKeyFromObject(&next), claimed))
	if !metav1.IsControlledBy(claimed, calls[3]) || toolgatev1alpha1.WarmWaiting(claimed) {
		t.Fatalf("the recorded warm pod is not call-3's: %+v", claimed.ObjectMeta)
	}
	if n := nk.runs.Load(); n != 1 {
		t.Fatalf("the warm pod ran %d calls", n)
	}
}

// refusingClaims answers a warm pod's claim NotFound while refuse is set,
// and holds it until hold is closed, when there is one.
type refusingClaims struct {
	client.Client
	refuse *atomic.Bool
	hold   chan struct{}
}

func (r refusingClaims) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	if _, ok := obj.(*corev1.Pod); ok && obj.GetAnnotations()[toolgatev1alpha1.AnnotationClaimed] != "" {
		if r.hold != nil {
			<-r.hold
		}
		if r.refuse.Load() {
			return apierrors.NewNotFound(corev1.Resource("pods"), obj.GetName())
		}
	}
	return r.Client.Patch(ctx, obj, patch, opts...)
}

// TestAWaitingCallTakesTheRoomOfWarmPods: a call's pod that the scheduler
// cannot place (Insufficient cpu, say) has a waiting warm pod on a node
// give up its room at once (its change pokes the sweep), and none is
// started in its place; a warm pod no node holds frees nothing and stays.
func TestAWaitingCallTakesTheRoomOfWarmPods(t *testing.T) {
	c, newProvider := onAPIServer(t)
	ctx := context.Background()
	ns, _, calls, jobOf := warmSession(t, c, "room-", 1)
	call, job := calls[0], jobOf(0)
	p := newProvider()
	t.Cleanup(func() { _ = p.Stop(context.Background()) })
	must(t, p.Prepare(ctx, job)) // the call's own pod, and the session's pool
	waitFor := func(want int, what string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			n := 0
			for _, pod := range waitingWarm(t, c, ns) {
				if pod.DeletionTimestamp.IsZero() {
					n++
				}
			}
			if n == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d warm pods, want %d: %s", n, want, what)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitFor(1, "the pool started")
	warmPod := waitingWarm(t, c, ns)[0]
	must(t, c.SubResource("binding").Create(ctx, &warmPod, &corev1.Binding{Target: corev1.ObjectReference{Kind: "Node", Name: "node-1"}}))
	p.sweep(ctx)
	waitFor(1, "nothing waits for room: the warm pod stays")

	callPod := &corev1.Pod{}
	must(t, c.Get(ctx, p.podKey(job), callPod))
	setStatus(t, c, *callPod, corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled,
		Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: "0/1 nodes are available: 1 Insufficient cpu."}}})
	must(t, c.Get(ctx, p.podKey(job), callPod))
	p.PodChanged(callPod) // as the manager's informer of tool pods does
	waitFor(0, "the call's pod waits for room: the warm pod on a node gives it up")
	p.warm.fills.Wait()
	time.Sleep(200 * time.Millisecond)
	waitFor(0, "none is started in its place")

	// The next call's pool refill is a pod no node holds yet: it frees
	// nothing, and stays while the call's pod still waits.
	next := job
	next.Attempt, next.Key = 2, sandbox.Key(call.UID, 2)
	must(t, p.Prepare(ctx, next))
	waitFor(1, "the next call refills the pool")
	p.sweep(ctx)
	waitFor(1, "a warm pod no node holds frees nothing")
}
