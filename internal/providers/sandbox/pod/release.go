package pod

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/providers/sandbox"
)

// Ending work: a settled attempt's pod (Discard), every pod of a call
// (Release), one exact pod (deleteExactly).

// Release deletes every pod of the call and, once none is left, forgets
// its attempts whole (attempt.go).
func (p *Provider) Release(ctx context.Context, owner types.NamespacedName, uid types.UID) (bool, error) {
	pods := &corev1.PodList{}
	if err := p.Client.List(ctx, pods, client.InNamespace(owner.Namespace), client.MatchingLabels{toolgatev1alpha1.LabelSandbox: "true"}); err != nil {
		return false, err
	}
	// The pods this process made for the call, read from the API server:
	// the cache may not show one just created yet.
	listed := map[string]bool{}
	for i := range pods.Items {
		listed[pods.Items[i].Name] = true
	}
	for _, key := range p.podsOf(uid) {
		if listed[key.Name] {
			continue
		}
		pod := &corev1.Pod{}
		if err := p.Reader.Get(ctx, key, pod); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return false, err
		}
		pods.Items = append(pods.Items, *pod)
	}
	call := metav1.OwnerReference{APIVersion: toolgatev1alpha1.GroupVersion.String(), Kind: "ToolCall", Name: owner.Name, UID: uid}
	left := 0
	for i := range pods.Items {
		pod := &pods.Items[i]
		// Sealed or not: a pod this process created and has not sealed
		// yet may be handed the call next (seal.go).
		if !controlledBy(pod, call) {
			continue
		}
		if stopped(pod) {
			continue
		}
		left++
		if pod.DeletionTimestamp.IsZero() {
			if err := client.IgnoreNotFound(p.Client.Delete(ctx, pod, client.GracePeriodSeconds(5))); err != nil {
				return false, err
			}
		}
	}
	if left == 0 {
		p.refillNow(ofCall(uid))
		for _, a := range p.forget(ofCall(uid)) {
			if a.greeting != nil {
				a.greeting.drop()
			}
		}
	}
	return left == 0, nil
}

// podsOf names the pods this process made or follows for the call.
func (p *Provider) podsOf(uid types.UID) []types.NamespacedName {
	p.mu.Lock()
	defer p.mu.Unlock()
	var keys []types.NamespacedName
	for key, a := range p.attempts {
		if !sandbox.OfCall(key, uid) {
			continue
		}
		switch a.phase() {
		case phasePrepared:
			keys = append(keys, client.ObjectKeyFromObject(a.prepared))
		case phaseFollowed, phaseDone:
			keys = append(keys, a.follower.pod)
		}
	}
	return keys
}

// Discard deletes a settled attempt's pod at once (a pod serves one call:
// nothing of it is needed any more) and forgets the attempt whole.
func (p *Provider) Discard(ctx context.Context, key string) {
	a := p.forget(func(k string) bool { return k == key })[key]
	if a != nil && a.greeting != nil {
		a.greeting.drop()
	}
	if f := a.followed(); f != nil {
		// The pod it followed, never another made under its name since; the
		// call's next reconcile releases what a failure leaves.
		p.deleteExactly(ctx, f.pod, f.uid, "settled")
	}
	p.refillNow(func(k string) bool { return k == key })
}

// deleteExactly deletes the pod key names at once if it is still the one
// of uid (never another made under its name since); gone or replaced is
// fine, any other failure is logged with why the pod was to go.
func (p *Provider) deleteExactly(ctx context.Context, key types.NamespacedName, uid types.UID, why string) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	err := client.IgnoreNotFound(p.Client.Delete(ctx, pod, client.GracePeriodSeconds(0), client.Preconditions{UID: &uid}))
	if err != nil && !apierrors.IsConflict(err) {
		log.FromContext(ctx).Error(err, "tool pod not deleted", "pod", key.Name, "reason", why)
	}
}
