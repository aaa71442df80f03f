package pod

import (
	"context"
	"errors"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/pipeline"
)

// The warm pools' sweeper: every warmSweep it ages the pools, drops warm
// pods that can never be claimed, gives the room of waiting warm pods to
// call pods the scheduler could not place, and reports what the waiting
// ones hold.

// startSweeper starts the goroutine that ages pools (called with the
// pools' lock held).
func (p *Provider) startSweeper() {
	if p.warm.started {
		return
	}
	p.warm.started = true
	p.warm.stop, p.warm.done, p.warm.poke = make(chan struct{}), make(chan struct{}), make(chan struct{}, 1)
	stop, poke := p.warm.stop, p.warm.poke
	go func() {
		defer close(p.warm.done)
		t := time.NewTicker(warmSweep)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			case <-poke:
			}
			p.sweep(context.Background())
		}
	}()
}

// pokeSweeper has the sweeper sweep now (a call's pod waits for room),
// when it runs.
func (p *Provider) pokeSweeper() {
	p.warm.mu.Lock()
	poke := p.warm.poke
	p.warm.mu.Unlock()
	if poke == nil {
		return
	}
	select {
	case poke <- struct{}{}:
	default: // a sweep is already due
	}
}

// sweep releases the warm pods of sessions idle for WarmIdle, those of no
// pool this process knows once they are that old (after a restart), those
// that ended, and one on a node for each call pod that waits for room; it
// replaces warm pods too old to be claimed.
func (p *Provider) sweep(ctx context.Context) {
	list := &corev1.PodList{}
	if err := p.Client.List(ctx, list, client.MatchingLabels{toolgatev1alpha1.LabelWarm: "true"}); err != nil {
		return
	}
	now := p.now()
	// Only toolgate's own, still waiting: a pod someone else labelled
	// warm is neither counted nor deleted, and a claimed one (its labels
	// are its pool's still) is its call's.
	mine := list.Items[:0]
	for i := range list.Items {
		if pod := &list.Items[i]; p.sealed(pod) && waiting(pod) {
			mine = append(mine, *pod)
		}
	}
	list.Items = mine
	waiting := 0
	warmReserved.Reset()
	for i := range list.Items {
		if pod := &list.Items[i]; pod.DeletionTimestamp.IsZero() && !terminated(pod) {
			waiting++
			cpu, memory := requested(pod)
			warmReserved.WithLabelValues(pod.Namespace, "cpu").Add(cpu)
			warmReserved.WithLabelValues(pod.Namespace, "memory").Add(memory)
		}
	}
	warmPods.Set(float64(waiting))
	p.warm.mu.Lock()
	active := map[string]*pool{}
	for key, pl := range p.warm.byKey {
		if now.Sub(pl.lastUse) > WarmIdle {
			delete(p.warm.byKey, key)
			continue
		}
		active[key] = pl
	}
	p.warm.mu.Unlock()
	refill := map[string]*pool{}
	// Room for the calls the scheduler could not place: as many waiting
	// warm pods on nodes give it up (a warm pod is an optimisation, a
	// call is work), none started in their place here.
	yield := p.waitingForRoom(ctx)
	for i := range list.Items {
		pod := &list.Items[i]
		if yield > 0 && pod.DeletionTimestamp.IsZero() && pod.Spec.NodeName != "" && !ended(pod) {
			yield--
			log.Log.Info("warm pod released: a call's pod waits for room", "namespace", pod.Namespace, "pod", pod.Name)
			if err := client.IgnoreNotFound(p.Client.Delete(ctx, pod, client.GracePeriodSeconds(0))); err != nil {
				log.Log.Error(err, "warm pod not released", "pod", pod.Name)
			}
			continue
		}
		key := poolKey(types.NamespacedName{Namespace: pod.Namespace, Name: pod.Labels[toolgatev1alpha1.LabelSession]}, pod.Labels[toolgatev1alpha1.LabelTemplate])
		pl := active[key]
		age := now.Sub(pod.CreationTimestamp.Time)
		// An ended pod, or one that cannot start (its image cannot be
		// pulled, say), can never be claimed. None starts in its place
		// here: the next call of its kind refills the pool, so a kind whose
		// pods cannot start does not churn. The call that finds the pool
		// empty starts a pod of its own, whose failure names the cause.
		gone := ended(pod)
		var fail *pipeline.Failure
		if errors.As(failureOf(pod), &fail) && pod.DeletionTimestamp.IsZero() {
			gone = true
			log.Log.Info("warm pod dropped: it cannot start", "namespace", pod.Namespace, "pod", pod.Name, "code", string(fail.Code))
		}
		if release := gone || (pl == nil && age > WarmIdle) || age > warmMaxAge; !release {
			continue
		}
		if err := client.IgnoreNotFound(p.Client.Delete(ctx, pod, client.GracePeriodSeconds(0))); err != nil {
			log.Log.Error(err, "warm pod not released", "pod", pod.Name)
		}
		if pl != nil && !gone {
			refill[key] = pl
		}
	}
	for _, pl := range refill {
		p.warm.mu.Lock()
		job := pl.job
		p.warm.mu.Unlock()
		p.replenish(job, pl.template)
	}
}

// waitingForRoom counts toolgate's call pods (sealed, not waiting warm
// ones) that the scheduler could not place.
func (p *Provider) waitingForRoom(ctx context.Context) int {
	list := &corev1.PodList{}
	if err := p.Client.List(ctx, list, client.MatchingLabels{toolgatev1alpha1.LabelSandbox: "true"}); err != nil {
		return 0
	}
	n := 0
	for i := range list.Items {
		if pod := &list.Items[i]; pod.DeletionTimestamp.IsZero() && unschedulable(pod) && !waiting(pod) && p.sealed(pod) {
			n++
		}
	}
	return n
}

// unschedulable reports whether the scheduler said it cannot place pod.
func unschedulable(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return true
		}
	}
	return false
}

// requested is what a pod holds of its node while it waits: the cpu
// (cores) and memory (bytes) its containers request, an init container's
// when larger, as the scheduler counts them.
func requested(pod *corev1.Pod) (cpu, memory float64) {
	var c, m resource.Quantity
	for _, ct := range pod.Spec.Containers {
		c.Add(ct.Resources.Requests[corev1.ResourceCPU])
		m.Add(ct.Resources.Requests[corev1.ResourceMemory])
	}
	for _, ct := range pod.Spec.InitContainers {
		if r := ct.Resources.Requests[corev1.ResourceCPU]; r.Cmp(c) > 0 {
			c = r
		}
		if r := ct.Resources.Requests[corev1.ResourceMemory]; r.Cmp(m) > 0 {
			m = r
		}
	}
	return c.AsApproximateFloat64(), m.AsApproximateFloat64()
}
