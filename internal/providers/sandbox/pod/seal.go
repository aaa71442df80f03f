package pod

import (
	"context"
	"crypto/ecdh"
	"crypto/hmac"
	"encoding/hex"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/keys"
	"github.com/toolgate/toolgate/internal/runner"
)

// Which pods are toolgate's. Anyone who may create pods in an agent
// namespace can make one that looks like a tool pod: its name, labels and
// owner references are the creator's to choose, and a pod deleted and
// made again under the same name copies every annotation. The API server
// gives a pod one thing its creator cannot choose, its UID; right after
// creating a pod, the provider seals it (AnnotationSeal: a MAC of its
// namespace, name and UID under a key derived from the channel key, which
// only the manager holds). Every pod the provider hands a call to,
// collects a result from, claims, or deletes as its own carries a valid
// seal and the exact owner reference toolgate wrote (group, version,
// kind, name and UID).

// sealOf is the seal of pod under the manager's key.
func (p *Provider) sealOf(pod *corev1.Pod) string {
	return hex.EncodeToString(sealUnder(p.Key, pod))
}

func sealUnder(k *ecdh.PrivateKey, pod *corev1.Pod) []byte {
	return keys.PodSeal(k.Bytes(), pod.Namespace, pod.Name, string(pod.UID))
}

// sealed reports whether pod carries its valid seal, under the manager's
// key or the one before its last rotation.
func (p *Provider) sealed(pod *corev1.Pod) bool {
	got, err := hex.DecodeString(pod.Annotations[toolgatev1alpha1.AnnotationSeal])
	if err != nil || p.Key == nil || pod.UID == "" {
		return false
	}
	return hmac.Equal(got, sealUnder(p.Key, pod)) || (p.Previous != nil && hmac.Equal(got, sealUnder(p.Previous, pod)))
}

// keyOf is the channel key the pod was made under: the previous one when
// the pod carries its public half, else the manager's.
func (p *Provider) keyOf(pod *corev1.Pod) *ecdh.PrivateKey {
	if p.Previous == nil {
		return p.Key
	}
	old := hex.EncodeToString(p.Previous.PublicKey().Bytes())
	for _, c := range append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
		for _, e := range c.Env {
			if e.Name == runner.EnvManagerKey && e.Value == old {
				return p.Previous
			}
		}
	}
	return p.Key
}

// ours reports whether pod is toolgate's and controlled by owner, exactly.
func (p *Provider) ours(pod *corev1.Pod, owner metav1.OwnerReference) bool {
	return controlledBy(pod, owner) && p.sealed(pod)
}

// controlledBy reports whether pod's controller reference is owner's,
// exactly (group, version, kind, name and UID). Such a pod without its
// seal is one toolgate created and has not sealed yet, or one whose maker
// stopped before sealing it (admission lets only the manager write such a
// reference): never handed anything, and deleted as the call's work.
func controlledBy(pod *corev1.Pod, owner metav1.OwnerReference) bool {
	ref := metav1.GetControllerOfNoCopy(pod)
	return ref != nil && ref.APIVersion == owner.APIVersion && ref.Kind == owner.Kind && ref.Name == owner.Name && ref.UID == owner.UID
}

// neverSealed reports whether pod carries no seal at all, valid or not.
func neverSealed(pod *corev1.Pod) bool {
	_, ok := pod.Annotations[toolgatev1alpha1.AnnotationSeal]
	return !ok
}

// seal writes the seal of a pod just created (pod is the API server's
// answer, with its UID).
func (p *Provider) seal(ctx context.Context, pod *corev1.Pod) error {
	base := pod.DeepCopy()
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[toolgatev1alpha1.AnnotationSeal] = p.sealOf(pod)
	return p.Client.Patch(ctx, pod, client.MergeFrom(base))
}

// sealCreated seals a pod this process just created; a pod whose seal
// could not be written is deleted (toolgate would never use it), and the
// error returned.
func (p *Provider) sealCreated(ctx context.Context, pod *corev1.Pod) error {
	err := p.seal(ctx, pod)
	if err != nil {
		log.FromContext(ctx).Error(err, "tool pod not sealed", "pod", pod.Name)
		_ = client.IgnoreNotFound(p.Client.Delete(ctx, pod, client.GracePeriodSeconds(0)))
	}
	return err
}
