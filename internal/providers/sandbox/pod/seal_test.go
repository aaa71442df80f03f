package pod

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/providers/sandbox"
)

// TestForgedPodsNeverServe: whoever may create pods in an agent namespace
// (the built-in edit role) makes pods that look like toolgate's — the
// attempt's own name, its labels, an owner reference carrying the call's
// or the session's UID (under a bare group, or the exact apiVersion), even
// the seal copied from the real pod it deleted and made again. None is
// handed a call, claimed, or deleted by the warm-pod sweep. The attempt
// runs in a pod of its own made beside it (a pod made again under the
// real pod's name, by a resumed attempt, fails it as lost: the real pod
// is gone); under the exact reference, which only a manager writes, an
// unsealed pod is replaced.
func TestForgedPodsNeverServe(t *testing.T) {
	c, newProvider := onAPIServer(t)
	ctx := context.Background()
	ns := namespace(t, c, "forged-", nil)
	session := &toolgatev1alpha1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s"},
		Spec: toolgatev1alpha1.AgentSessionSpec{Owner: "agent", ProfileRef: toolgatev1alpha1.LocalObjectReference{Name: "p"}}}
	must(t, c.Create(ctx, session))
	call := callIn(t, c, ns, "call-1", `{"token":"victim-secret-42"}`)
	job := func(attempt int) sandbox.Job {
		j := testJob(toolgatev1alpha1.SandboxWorkspaceWrite, "ws")
		j.Owner, j.OwnerUID, j.Attempt, j.Key = client.ObjectKeyFromObject(call), call.UID, attempt, sandbox.Key(call.UID, attempt)
		j.Arguments, j.Dispatched = call.Spec.Arguments, time.Now()
		j.Session.NamespacedName, j.Session.UID = client.ObjectKeyFromObject(session), session.UID
		return j
	}
	var net network
	p := newProvider()
	p.Dial = net.dial
	t.Cleanup(func() { _ = p.Stop(context.Background()) })
	ip := 10
	// plant creates pod as the attacker would and runs its runner.
	plant := func(pod *corev1.Pod) *kubelet {
		t.Helper()
		must(t, c.Create(ctx, pod))
		ip++
		addr := fmt.Sprintf("10.0.1.%d", ip)
		k := startKubeletAt(t, c, pod, addr)
		net.add(addr, k)
		return k
	}
	failsWith := func(p *Provider, j sandbox.Job, code pipeline.Code) {
		t.Helper()
		_, err := settle(t, p, j)
		var f *pipeline.Failure
		if !errors.As(err, &f) || f.Code != code {
			t.Fatalf("%v, want %s", err, code)
		}
	}

	planted := func(j sandbox.Job, owner metav1.OwnerReference) (*corev1.Pod, *kubelet) {
		t.Helper()
		pod, err := p.buildPod(j, p.podKey(j).Name)
		must(t, err)
		pod.Labels[toolgatev1alpha1.LabelCallUID] = string(call.UID)
		pod.OwnerReferences = []metav1.OwnerReference{owner}
		k := plant(pod)
		return pod, k
	}
	// Someone else's pod under the attempt's name (owned under a bare
	// group, or by nothing: what edit may make past admission): never
	// handed anything; the attempt's own pod is made beside it and runs
	// the call.
	for i, owners := range [][]metav1.OwnerReference{
		{{APIVersion: "toolgate.dev", Kind: "ToolCall", Name: call.Name, UID: call.UID, Controller: ptr.To(true)}},
		nil,
	} {
		j := job(1 + 4*i)
		pod, err := p.buildPod(j, p.podKey(j).Name)
		must(t, err)
		pod.Labels[toolgatev1alpha1.LabelCallUID] = string(call.UID)
		pod.OwnerReferences = owners
		squatter := plant(pod)
		if _, err := p.Run(ctx, j); !errors.Is(err, sandbox.ErrPending) {
			t.Fatalf("start beside: %v", err)
		}
		own, err := p.claimed(ctx, p.Reader, j)
		must(t, err)
		if own == nil || own.Name == pod.Name {
			t.Fatal("the attempt has no pod of its own beside the squatter's")
		}
		ip++
		addr := fmt.Sprintf("10.0.1.%d", ip)
		k := startKubeletAt(t, c, own, addr)
		net.add(addr, k)
		if _, err := settle(t, p, j); err != nil {
			t.Fatalf("the call did not run in its own pod: %v", err)
		}
		if squatter.runs.Load() != 0 || k.runs.Load() != 1 {
			t.Fatalf("squatter's pod ran %d calls, the attempt's own %d; want 0 and 1", squatter.runs.Load(), k.runs.Load())
		}
		p.Discard(ctx, j.Key)
	}

	// The exact reference without a seal (what only a manager can write,
	// and one stopped before sealing leaves): never handed anything,
	// deleted, and the attempt gets a sealed pod of its own.
	// After the first ask the pipeline asks as if resuming (the body was
	// invoked once): the pod is made again all the same, never reported
	// lost (a kill storm ended such calls interrupted right after a
	// failover: the new leader found the pod its predecessor had not
	// sealed).
	// remade asks prov for j (as if resuming after the first ask) until
	// the never-sealed pod is replaced by a sealed one; that pod's runner
	// must never have been handed the call.
	remade := func(prov *Provider, j sandbox.Job) {
		t.Helper()
		pod, k := planted(j, callOwner(j))
		deadline := time.Now().Add(20 * time.Second)
		for {
			if _, err := prov.Run(ctx, j); !errors.Is(err, sandbox.ErrPending) {
				t.Fatalf("%v, want pending while the unsealed pod is replaced (resumed: %v)", err, j.Resumed)
			}
			j.Resumed = true
			now := &corev1.Pod{}
			if err := c.Get(ctx, prov.podKey(j), now); err == nil && now.UID != pod.UID {
				if !prov.sealed(now) {
					t.Fatal("the pod made in its place is not sealed")
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the unsealed pod was not replaced within 20s")
			}
			time.Sleep(50 * time.Millisecond)
		}
		if k.runs.Load() != 0 {
			t.Fatal("an unsealed pod was handed the call")
		}
	}
	remade(p, job(2))

	// The same, found first by a successor resuming the attempt (its
	// predecessor wrote the dispatch, then stopped between creating the
	// pod and sealing it): a pod that never carried a seal was never
	// handed anything, so it is made again, never reported lost (a
	// one-replica kill storm ended such a call sandbox_lost). Admission
	// lets nobody but toolgate remove a seal (the policy
	// toolgate-tool-pods), so a seal stripped from a pod that did run
	// cannot pass for this.
	resumer := newProvider()
	resumer.Dial = net.dial
	j := job(6)
	j.Resumed = true
	remade(resumer, j)

	// The real pod, deleted and made again under its name with everything
	// it carried, seal included; a restarted manager resumes the attempt.
	j = job(3)
	must(t, p.Prepare(ctx, j))
	real := &corev1.Pod{}
	must(t, c.Get(ctx, p.podKey(j), real))
	if !p.sealed(real) {
		t.Fatal("the provider's own pod is not sealed")
	}
	must(t, c.Delete(ctx, real, client.GracePeriodSeconds(0)))
	copied := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: real.Name, Labels: real.Labels, Annotations: real.Annotations,
		OwnerReferences: real.OwnerReferences}, Spec: real.Spec}
	for {
		if err := c.Create(ctx, copied); !apierrors.IsAlreadyExists(err) {
			must(t, err)
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	k := startKubeletAt(t, c, copied, "10.0.2.1")
	net.add("10.0.2.1", k)
	successor := newProvider()
	successor.Dial = net.dial
	j.Resumed = true
	failsWith(successor, j, pipeline.CodeSandboxLost)
	if k.runs.Load() != 0 {
		t.Fatal("a pod made again under the real pod's name, with its seal, was handed the call")
	}

	// A planted warm pod: the session's exact owner reference, its labels
	// and template, no seal. It is never claimed (the call starts its own
	// pod), and the sweep leaves it alone.
	w := job(4)
	w.Session.WarmPods = 1
	cold, err := p.buildPod(w, p.podKey(w).Name)
	must(t, err)
	warm, err := p.warmPod(w, templateOf(cold))
	must(t, err)
	warm.GenerateName, warm.Name = "", "s-warm-planted"
	wk := plant(warm)
	if _, err := p.Run(ctx, w); !errors.Is(err, sandbox.ErrPending) {
		t.Fatalf("start: %v", err)
	}
	if err := c.Get(ctx, p.podKey(w), &corev1.Pod{}); err != nil {
		t.Fatalf("the call did not start its own pod: %v", err)
	}
	if wk.runs.Load() != 0 {
		t.Fatal("a planted warm pod was claimed")
	}
	p.sweep(ctx)
	got := &corev1.Pod{}
	must(t, c.Get(ctx, client.ObjectKeyFromObject(warm), got))
	if !got.DeletionTimestamp.IsZero() || got.Labels[toolgatev1alpha1.LabelWarm] != "true" {
		t.Fatalf("the sweep touched a pod toolgate did not make: %+v", got.ObjectMeta)
	}
}
