package pod

import (
	"context"
	"crypto/ecdh"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/providers/sandbox"
	"github.com/toolgate/toolgate/internal/runner"
	"github.com/toolgate/toolgate/internal/testenv"
)

// managerKey is the channel key of every provider of these tests (as of
// every replica and restart of a manager).
var managerKey = func() *ecdh.PrivateKey {
	k, err := runner.NewManagerKey()
	if err != nil {
		panic(err)
	}
	return k
}()

var (
	shared     *testenv.Env
	sharedOnce sync.Once
	sharedErr  error
)

// TestMain stops the API server the tests share, if one started.
func TestMain(m *testing.M) {
	code := m.Run()
	if shared != nil {
		_ = shared.Stop()
	}
	os.Exit(code)
}

// onAPIServer returns a client of one real API server shared by the tests
// of this package (started once, on first use), and a provider on it.
func onAPIServer(t *testing.T) (client.Client, func() *Provider) {
	t.Helper()
	sharedOnce.Do(func() { shared, sharedErr = testenv.Start() })
	if sharedErr != nil {
		t.Fatal(sharedErr)
	}
	c := shared.Client
	return c, func() *Provider {
		return &Provider{Client: c, Reader: c, Key: managerKey, Config: Config{RunnerImage: "toolgate.dev/runner:dev", ImagePullPolicy: corev1.PullNever}}
	}
}

// TestOnAPIServer runs the provider against a real API server (no kubelet:
// pods are admitted and stored, never run; running them is the e2e suite's
// job).
func TestOnAPIServer(t *testing.T) {
	c, newProvider := onAPIServer(t)
	ctx := context.Background()
	// A namespace enforcing Pod Security "restricted", and a call to own
	// the pods.
	nsName := namespace(t, c, "pods-", map[string]string{
		"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest",
	})
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nsName}}
	call := callIn(t, c, nsName, "call-1", `{"text":"a b"}`)
	job := func(attempt int, resumed bool) sandbox.Job {
		j := testJob(toolgatev1alpha1.SandboxWorkspaceWrite, "ws")
		j.Owner.Namespace, j.OwnerUID, j.Attempt, j.Resumed = ns.Name, call.UID, attempt, resumed
		j.Dispatched = time.Now()
		j.Key = string(call.UID) + "/" + string(rune('0'+attempt))
		return j
	}
	pods := func() []corev1.Pod {
		list := &corev1.PodList{}
		must(t, c.List(ctx, list, client.InNamespace(ns.Name)))
		return list.Items
	}
	// releaseAll releases the call's work until the provider reports it
	// gone, and checks that no pod of the call is left then.
	releaseAll := func(p *Provider, j sandbox.Job) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			gone, err := p.Release(ctx, j.Owner, call.UID)
			must(t, err)
			if gone {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("pods remain")
			}
			time.Sleep(50 * time.Millisecond)
		}
		if n := len(pods()); n != 0 {
			t.Fatalf("release reported the call's work gone while %d of its pods exist", n)
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		for key := range p.attempts {
			if sandbox.OfCall(key, call.UID) {
				t.Fatalf("the released call's attempt %s is still remembered", key)
			}
		}
	}

	t.Run("the pod is admitted under Pod Security restricted, owned by the call, deterministically named", func(t *testing.T) {
		p := newProvider()
		if _, err := p.Run(ctx, job(1, false)); !errors.Is(err, sandbox.ErrPending) {
			t.Fatalf("first run: %v", err)
		}
		got := pods()
		if len(got) != 1 {
			t.Fatalf("%d pods", len(got))
		}
		pod := got[0]
		if pod.Name != Name("call-1", string(call.UID), 1) || !metav1.IsControlledBy(&pod, call) {
			t.Fatalf("name %s owners %+v", pod.Name, pod.OwnerReferences)
		}
		// The namespace does enforce: a pod without the restrictions is refused.
		loose := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "loose"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
		if err := c.Create(ctx, loose); !apierrors.IsForbidden(err) {
			t.Fatalf("an unrestricted pod was not refused: %v", err)
		}
		np := &networkingv1.NetworkPolicy{}
		must(t, c.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: NetworkPolicyName}, np))
	})

	t.Run("a restarted manager adopts the pod: never a second one", func(t *testing.T) {
		restarted := newProvider()
		for range 3 {
			if _, err := restarted.Run(ctx, job(1, true)); !errors.Is(err, sandbox.ErrPending) {
				t.Fatalf("adopting: %v", err)
			}
		}
		if n := len(pods()); n != 1 {
			t.Fatalf("%d pods after adoption, want 1", n)
		}
	})

	t.Run("a resumed attempt whose pod never existed is lost, and nothing is created", func(t *testing.T) {
		if _, err := newProvider().Run(ctx, job(2, true)); !errors.Is(err, sandbox.ErrLost) {
			t.Fatalf("%v, want ErrLost", err)
		}
		if n := len(pods()); n != 1 {
			t.Fatalf("%d pods", n)
		}
	})

	t.Run("failure modes map to stable codes", func(t *testing.T) {
		p := newProvider()
		name := Name("call-1", string(call.UID), 1)
		for _, tc := range []struct {
			status corev1.PodStatus
			want   pipeline.Code
		}{
			{corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{Name: containerTool, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImageNeverPull"}}}}}, pipeline.CodeSandboxUnavailable},
			{corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: []corev1.ContainerStatus{{Name: containerTool, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "OOMKilled", ExitCode: 137}}}}}, pipeline.CodeSandboxOOMKilled},
			// A runnerPath the tool image does not hold: the runtime cannot
			// start the container.
			{corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: []corev1.ContainerStatus{{Name: containerTool, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				Reason: "StartError", ExitCode: 128, Message: `exec: "/toolgate-runner": stat /toolgate-runner: no such file or directory`}}}}}, pipeline.CodeSandboxUnavailable},
			{corev1.PodStatus{Phase: corev1.PodFailed, Reason: "Evicted"}, pipeline.CodeSandboxEvicted},
			{corev1.PodStatus{Phase: corev1.PodFailed, Reason: "DeadlineExceeded"}, pipeline.CodeTimeout},
			// Preempted, its node tainted or lost: the API server says so
			// before it deletes the pod.
			{corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "PreemptionByScheduler"}}}, pipeline.CodeSandboxEvicted},
		} {
			pod := &corev1.Pod{}
			must(t, c.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: name}, pod))
			pod.Status = tc.status
			must(t, c.Status().Update(ctx, pod))
			_, err := p.Run(ctx, job(1, true))
			var f *pipeline.Failure
			if !errors.As(err, &f) || f.Code != tc.want {
				t.Errorf("status %+v: %v, want %s", tc.status, err, tc.want)
			}
		}
	})

	t.Run("a pod evicted through the eviction API fails its call as evicted, also once it is gone", func(t *testing.T) {
		p := newProvider()
		j := job(13, false)
		if _, err := p.Run(ctx, j); !errors.Is(err, sandbox.ErrPending) {
			t.Fatalf("start: %v", err)
		}
		key := client.ObjectKey{Namespace: ns.Name, Name: Name("call-1", string(call.UID), 13)}
		pod := &corev1.Pod{}
		must(t, c.Get(ctx, key, pod))
		// Scheduled (an unbound pod is deleted at once, with no reason).
		must(t, c.SubResource("binding").Create(ctx, pod, &corev1.Binding{Target: corev1.ObjectReference{Kind: "Node", Name: "node-1"}}))
		must(t, c.SubResource("eviction").Create(ctx, pod, &policyv1.Eviction{}))
		var f *pipeline.Failure
		deadline := time.Now().Add(10 * time.Second)
		for {
			_, err := p.Run(ctx, j)
			if errors.As(err, &f) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no failure after the eviction: %v", err)
			}
			time.Sleep(50 * time.Millisecond)
		}
		if f.Code != pipeline.CodeSandboxEvicted || !strings.Contains(f.Message, "EvictionByEvictionAPI") {
			t.Fatalf("evicted: %v, want sandbox_evicted naming the eviction API", f)
		}
		// Its kubelet (there is none here) would remove it: gone, the
		// outcome stays.
		must(t, client.IgnoreNotFound(c.Delete(ctx, pod, client.GracePeriodSeconds(0))))
		for !apierrors.IsNotFound(c.Get(ctx, key, &corev1.Pod{})) {
			time.Sleep(20 * time.Millisecond)
		}
		if _, err := p.Run(ctx, j); !errors.As(err, &f) || f.Code != pipeline.CodeSandboxEvicted {
			t.Fatalf("evicted and gone: %v, want sandbox_evicted", err)
		}
	})

	t.Run("a pod deleted by someone else is a stable error, never a second pod", func(t *testing.T) {
		p := newProvider()
		j := job(4, false)
		if _, err := p.Run(ctx, j); !errors.Is(err, sandbox.ErrPending) {
			t.Fatalf("start: %v", err)
		}
		pod := &corev1.Pod{}
		must(t, c.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: Name("call-1", string(call.UID), 4)}, pod))
		must(t, c.Delete(ctx, pod))
		j.Resumed = true
		var f *pipeline.Failure
		if _, err := p.Run(ctx, j); !errors.As(err, &f) || f.Code != pipeline.CodeSandboxLost {
			t.Fatalf("%v, want sandbox_lost", err)
		}
		for _, p := range pods() {
			if p.Labels[toolgatev1alpha1.LabelAttempt] == "4" {
				t.Fatal("a second pod was created for the attempt")
			}
		}
	})

	t.Run("cancellation stops the pod and reports only once it is gone", func(t *testing.T) {
		p := newProvider()
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		deadline := time.Now().Add(10 * time.Second)
		for {
			_, err := p.Run(cctx, job(1, true))
			if errors.Is(err, context.Canceled) {
				break
			}
			if !errors.Is(err, sandbox.ErrPending) || time.Now().After(deadline) {
				t.Fatalf("cancelling: %v", err)
			}
			time.Sleep(50 * time.Millisecond)
		}
		if n := len(pods()); n != 0 {
			t.Fatalf("%d pods remain after cancellation reported", n)
		}
	})

	t.Run("a frame that says the timeout came first is the outcome, even when a cancellation then deleted the pod", func(t *testing.T) {
		// The runner's budget fired, the body ignored SIGTERM, and the
		// caller cancelled during the grace: the pod was deleted and the
		// runner still sent its frame (runner.TestStoppedRunnerStillSendsItsFrame).
		p := newProvider()
		j := job(4, true)
		f := &follower{pod: client.ObjectKey{Namespace: ns.Name, Name: "gone"}, done: make(chan struct{}),
			res: &runner.Result{Header: runner.Header{Code: "timeout", Error: "the body exceeded its 1s timeout"}}}
		close(f.done)
		p.attempts = map[string]*attempt{j.Key: {follower: f}}
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		var fail *pipeline.Failure
		if _, err := p.Run(cctx, j); !errors.As(err, &fail) || fail.Code != pipeline.CodeTimeout {
			t.Fatalf("%v, want the timeout", err)
		}
		// Any other frame of a cancelled call is the cancellation's.
		f.res = &runner.Result{Header: runner.Header{ExitCode: 143, Signal: "terminated"}}
		if _, err := p.Run(cctx, j); !errors.Is(err, context.Canceled) {
			t.Fatalf("%v, want the cancellation", err)
		}
	})

	t.Run("a body its runner timed out settles at once, and its pod goes when the settled call is discarded", func(t *testing.T) {
		p := newProvider()
		j := job(9, false)
		must(t, p.Prepare(ctx, j))
		key := p.podKey(j)
		pod := &corev1.Pod{}
		must(t, c.Get(ctx, key, pod))
		// The runner's frame: its budget fired and it stopped the body
		// and every process of its container before sending it.
		f := &follower{pod: key, uid: pod.UID, done: make(chan struct{}),
			res: &runner.Result{Header: runner.Header{Code: "timeout", Error: "the body exceeded its 1s timeout"}}}
		close(f.done)
		p.mu.Lock()
		p.attempts = map[string]*attempt{j.Key: {follower: f}}
		p.mu.Unlock()
		// Deleting the pod first lost the outcome to a manager that died
		// before the call's status write (the pod held the frame).
		var fail *pipeline.Failure
		if _, err := p.Run(ctx, j); !errors.As(err, &fail) || fail.Code != pipeline.CodeTimeout {
			t.Fatalf("%v, want the timeout", err)
		}
		if err := c.Get(ctx, key, &corev1.Pod{}); err != nil {
			t.Fatalf("the pod went before the outcome was durable: %v", err)
		}
		p.Discard(ctx, j.Key) // the call's status is written
		if err := c.Get(ctx, key, &corev1.Pod{}); !apierrors.IsNotFound(err) {
			t.Fatalf("the settled call's pod is still there: %v", err)
		}
	})

	t.Run("a followed pod whose owner reference someone removed fails the attempt, and no pod is made again", func(t *testing.T) {
		p := newProvider()
		j := job(10, false)
		if _, err := p.Run(ctx, j); !errors.Is(err, sandbox.ErrPending) {
			t.Fatalf("start: %v", err)
		}
		pod := &corev1.Pod{}
		must(t, c.Get(ctx, p.podKey(j), pod))
		base := pod.DeepCopy()
		pod.OwnerReferences = nil // what edit may do past admission
		must(t, c.Patch(ctx, pod, client.MergeFrom(base)))
		before := len(pods())
		var fail *pipeline.Failure
		if _, err := p.Run(ctx, j); !errors.As(err, &fail) || fail.Code != pipeline.CodeSandboxLost {
			t.Fatalf("%v, want sandbox_lost", err)
		}
		if _, err := p.Run(ctx, j); !errors.As(err, &fail) || fail.Code != pipeline.CodeSandboxLost {
			t.Fatalf("asked again: %v, want sandbox_lost", err)
		}
		if n := len(pods()); n >= before {
			t.Fatalf("%d pods after, %d before: the tampered pod stays or others were made", n, before)
		}
		p.Discard(ctx, j.Key)
	})

	t.Run("release deletes every pod of the call", func(t *testing.T) {
		p := newProvider()
		if _, err := p.Run(ctx, job(5, false)); !errors.Is(err, sandbox.ErrPending) {
			t.Fatalf("start: %v", err)
		}
		releaseAll(p, job(5, false))
	})

	t.Run("release waits for a pod of the call created and not yet sealed", func(t *testing.T) {
		// The provider creates a pod and then seals it: a release between
		// the two (a cancellation as the pod appears) must not report the
		// call's work gone while that pod exists.
		p := newProvider()
		j := job(7, false)
		pod, err := p.buildPod(j, Name("call-1", string(call.UID), 7))
		must(t, err)
		pod.OwnerReferences = []metav1.OwnerReference{callOwner(j)}
		must(t, c.Create(ctx, pod))
		gone, err := p.Release(ctx, j.Owner, call.UID)
		must(t, err)
		if gone {
			t.Fatal("release reported the call's pods gone while its unsealed pod exists")
		}
		releaseAll(p, j)
	})

	t.Run("release forgets everything of the call, an attempt whose pod was remade included", func(t *testing.T) {
		// The unsealed pod under the attempt's name is deleted and made
		// again (remade): a release kept that mark when it dropped the
		// rest (releaseAll checks nothing of the call is left).
		p := newProvider()
		j := job(13, false)
		pod, err := p.buildPod(j, Name("call-1", string(call.UID), 13))
		must(t, err)
		pod.OwnerReferences = []metav1.OwnerReference{callOwner(j)}
		must(t, c.Create(ctx, pod))
		if _, err := p.Run(ctx, j); !errors.Is(err, sandbox.ErrPending) {
			t.Fatalf("%v, want pending while the unsealed pod is made again", err)
		}
		if !p.remaking(j.Key) {
			t.Fatal("the unsealed pod was not marked to be made again")
		}
		releaseAll(p, j)
	})

	t.Run("release finds a pod it prepared that the cache does not show yet", func(t *testing.T) {
		p := newProvider()
		// A cache behind the API server: it lists no pods.
		p.Client = cacheBehind{c}
		j := job(8, false)
		must(t, p.Prepare(ctx, j))
		if n := len(pods()); n != 1 {
			t.Fatalf("%d pods after prepare, want 1", n)
		}
		releaseAll(p, j)
	})

	t.Run("a pod whose deletion a finalizer holds is released once nothing of it runs", func(t *testing.T) {
		// Anyone who may update pods in the namespace can add a finalizer
		// to a tool pod: its object then outlives its deletion, and the
		// call must not wait for it forever. What counts is whether any of
		// its processes still runs.
		for _, bound := range []bool{false, true} {
			p := newProvider()
			j := job(11, false)
			if bound {
				j = job(12, false)
			}
			if _, err := p.Run(ctx, j); !errors.Is(err, sandbox.ErrPending) {
				t.Fatalf("start: %v", err)
			}
			key := client.ObjectKey{Namespace: ns.Name, Name: Name("call-1", string(call.UID), j.Attempt)}
			pod := &corev1.Pod{}
			must(t, c.Get(ctx, key, pod))
			if bound {
				// Scheduled, and running as far as the API server knows.
				must(t, c.SubResource("binding").Create(ctx, pod, &corev1.Binding{Target: corev1.ObjectReference{Kind: "Node", Name: "node-1"}}))
			}
			held := client.MergeFrom(pod.DeepCopy())
			pod.Finalizers = append(pod.Finalizers, "example.com/hold")
			must(t, c.Patch(ctx, pod, held))
			// The first release asks for the deletion; the next ones see
			// how it goes.
			release := func() bool {
				t.Helper()
				gone := false
				for i := 0; i < 3 && !gone; i++ {
					var err error
					gone, err = p.Release(ctx, j.Owner, call.UID)
					must(t, err)
					time.Sleep(20 * time.Millisecond)
				}
				return gone
			}
			gone := release()
			if bound {
				if gone {
					t.Fatal("released while the pod's kubelet has not stopped it")
				}
				// The kubelet stops its containers and says so.
				must(t, c.Get(ctx, key, pod))
				pod.Status.Phase = corev1.PodFailed
				must(t, c.Status().Update(ctx, pod))
				gone = release()
			}
			if !gone {
				t.Fatalf("bound %v: the call's work is not released while its pod, being deleted, runs nothing", bound)
			}
			// So does a cancelled attempt waiting for its pod to stop.
			cancelled, cancel := context.WithCancel(ctx)
			cancel()
			if _, err := p.Run(cancelled, j); !errors.Is(err, context.Canceled) {
				t.Fatalf("bound %v: a cancelled attempt whose pod runs nothing reports %v", bound, err)
			}
			must(t, c.Get(ctx, key, pod))
			unhold := client.MergeFrom(pod.DeepCopy())
			pod.Finalizers = nil
			must(t, c.Patch(ctx, pod, unhold))
			_ = c.Delete(ctx, pod, client.GracePeriodSeconds(0))
		}
	})

	t.Run("discard deletes a settled attempt's pod at once", func(t *testing.T) {
		p := newProvider()
		j := job(6, false)
		if _, err := p.Run(ctx, j); !errors.Is(err, sandbox.ErrPending) {
			t.Fatalf("start: %v", err)
		}
		p.Discard(ctx, j.Key)
		pod := &corev1.Pod{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: Name("call-1", string(call.UID), 6)}, pod); !apierrors.IsNotFound(err) {
			t.Fatalf("the settled attempt's pod is still there: %v", err)
		}
	})

	t.Run("a pod Pod Security would refuse is a stable error", func(t *testing.T) {
		p := newProvider()
		j := job(3, false)
		j.Policy.RuntimeClassName = nil
		j.Tool.Container.Image = "" // an invalid pod: refused by validation
		_, err := p.Run(ctx, j)
		var f *pipeline.Failure
		if !errors.As(err, &f) || f.Code != pipeline.CodeSandboxUnavailable {
			t.Fatalf("%v", err)
		}
	})
}

// namespace creates a namespace named from prefix, with labels.
func namespace(t *testing.T, c client.Client, prefix string, labels map[string]string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix, Labels: labels}}
	must(t, c.Create(context.Background(), ns))
	return ns.Name
}

// callIn creates a ToolCall (of session "s") to own pods.
func callIn(t *testing.T, c client.Client, ns, name, args string) *toolgatev1alpha1.ToolCall {
	t.Helper()
	call := &toolgatev1alpha1.ToolCall{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: toolgatev1alpha1.ToolCallSpec{SessionRef: toolgatev1alpha1.LocalObjectReference{Name: "s"}, CallID: strings.ReplaceAll(name, "call", "c"),
			Tool: "wc", Arguments: args, Requester: "agent"},
	}
	must(t, c.Create(context.Background(), call))
	return call
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// cacheBehind is a cache that has not seen any pod yet.
type cacheBehind struct{ client.Client }

func (c cacheBehind) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if _, ok := list.(*corev1.PodList); ok {
		return nil
	}
	return c.Client.List(ctx, list, opts...)
}
