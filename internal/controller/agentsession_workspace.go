package controller

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// workspaceBindGrace is how long a workspace claim may stay Pending, when
// nothing waits for a first consumer, before the session says it cannot be
// mounted: a provisioner or a matching volume binds a claim within seconds.
const workspaceBindGrace = 30 * time.Second

// defaultClassAnnotation marks the cluster's default StorageClass.
const defaultClassAnnotation = "storageclass.kubernetes.io/is-default-class"

// workspaceState is what the session's Ready condition says of its
// workspace claim: nothing (reason "": usable, or no claim), Pending (it
// may yet bind: calls go on, their pods wait for it), or Unavailable (it
// cannot be mounted: calls that have not started settle).
type workspaceState struct {
	reason, message string
	recheck         time.Duration
}

// workspaceProblem says whether the session's workspace claim can be
// mounted, and when to look again. A claim whose class binds on first
// consumer is Pending until a pod uses it: that is no problem. Classes are
// read uncached and only for a Pending claim; when they cannot be read (no
// permission in a namespaced install), a Pending claim is never called a
// problem.
func (r *AgentSessionReconciler) workspaceProblem(ctx context.Context, s *toolgatev1alpha1.AgentSession) (workspaceState, error) {
	name := s.Status.WorkspaceClaimName
	if name == "" {
		return workspaceState{}, nil
	}
	unavailable := func(format string, args ...any) workspaceState {
		return workspaceState{reason: toolgatev1alpha1.AgentSessionReasonWorkspaceUnavailable, message: fmt.Sprintf(format, args...)}
	}
	pvc := &corev1.PersistentVolumeClaim{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: name}, pvc); err != nil {
		switch {
		case apierrors.IsNotFound(err) && s.Spec.Workspace != nil && s.Spec.Workspace.ExistingClaim == "":
			// The session's own claim, just created: the cache has not seen
			// it yet.
			return workspaceState{reason: toolgatev1alpha1.AgentSessionReasonWorkspacePending,
				message: fmt.Sprintf("PersistentVolumeClaim %s was just created", name), recheck: time.Second}, nil
		case apierrors.IsNotFound(err):
			return unavailable("PersistentVolumeClaim %s does not exist", name), nil
		}
		return workspaceState{}, err
	}
	switch pvc.Status.Phase {
	case corev1.ClaimBound:
		return workspaceState{}, nil
	case corev1.ClaimLost:
		return unavailable("PersistentVolumeClaim %s lost its volume", name), nil
	}
	class, classes, err := r.claimClass(ctx, pvc)
	if err != nil {
		return workspaceState{}, err
	}
	problem, recheck := pendingProblem(name, class, classes, r.Clock.Since(pvc.CreationTimestamp.Time))
	switch {
	case problem != "":
		return unavailable("%s", problem), nil
	case recheck > 0:
		return workspaceState{reason: toolgatev1alpha1.AgentSessionReasonWorkspacePending, recheck: recheck,
			message: fmt.Sprintf("PersistentVolumeClaim %s is Pending: it has %s more to bind before the session calls it unavailable", name, recheck.Round(time.Second))}, nil
	}
	return workspaceState{}, nil
}

// claimClass returns the class a claim binds through ("" for none) and the
// cluster's classes (nil when they cannot be read).
func (r *AgentSessionReconciler) claimClass(ctx context.Context, pvc *corev1.PersistentVolumeClaim) (string, map[string]*storagev1.StorageClass, error) {
	if r.Reader == nil {
		return "", nil, nil
	}
	list := &storagev1.StorageClassList{}
	if err := r.Reader.List(ctx, list); err != nil {
		if apierrors.IsForbidden(err) {
			return "", nil, nil
		}
		return "", nil, err
	}
	classes := map[string]*storagev1.StorageClass{}
	def := ""
	for i := range list.Items {
		c := &list.Items[i]
		classes[c.Name] = c
		if c.Annotations[defaultClassAnnotation] == "true" {
			def = c.Name
		}
	}
	if pvc.Spec.StorageClassName != nil {
		return *pvc.Spec.StorageClassName, classes, nil
	}
	return def, classes, nil
}

// pendingProblem applies the checks to a Pending claim, in order: a class
// that does not exist never binds; a class that waits for a first consumer
// is fine; anything else has the grace period to bind.
func pendingProblem(claim, class string, classes map[string]*storagev1.StorageClass, waited time.Duration) (string, time.Duration) {
	sc, known := classes[class]
	switch {
	case classes != nil && class != "" && !known:
		return fmt.Sprintf("PersistentVolumeClaim %s names StorageClass %s, which does not exist", claim, class), 0
	case known && sc.VolumeBindingMode != nil && *sc.VolumeBindingMode == storagev1.VolumeBindingWaitForFirstConsumer:
		return "", 0
	case waited < workspaceBindGrace:
		return "", workspaceBindGrace - waited
	case classes != nil && class == "":
		return fmt.Sprintf("PersistentVolumeClaim %s has been Pending for %s: it names no StorageClass and the cluster has no default, so only a matching PersistentVolume can bind it, and none has",
			claim, waited.Round(time.Second)), 0
	case known:
		return fmt.Sprintf("PersistentVolumeClaim %s has been Pending for %s: StorageClass %s (provisioner %s) has not provisioned it (see the claim's events)",
			claim, waited.Round(time.Second), class, sc.Provisioner), 0
	}
	// The classes cannot be read: the claim may be waiting for its first
	// consumer, which is no problem; only a pod would tell.
	return "", 0
}
