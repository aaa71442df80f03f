package pod

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/textutil"
)

// What a tool pod that can no longer produce a frame says about why.

// stopped reports whether nothing of a pod being deleted runs any more:
// it was never bound to a node, or its kubelet reports every container
// ended. Such a pod is as good as gone to a call waiting for its work to
// stop, though a finalizer (anyone who may update pods can add one) may
// keep its object for ever.
func stopped(pod *corev1.Pod) bool {
	return !pod.DeletionTimestamp.IsZero() && (pod.Spec.NodeName == "" || final(pod))
}

// failureOf maps a pod that can no longer produce a frame to a stable code.
func failureOf(pod *corev1.Pod) error {
	switch pod.Status.Reason {
	case "Evicted":
		return pipeline.Fail(pipeline.CodeSandboxEvicted, "the node evicted the tool's pod")
	case "DeadlineExceeded":
		return pipeline.Fail(pipeline.CodeTimeout, "the tool's pod exceeded its active deadline")
	}
	if pod.Status.Phase == corev1.PodFailed && pod.Status.Reason != "" && !anyStarted(pod) {
		// Refused by its kubelet at admission (OutOfmemory, OutOfcpu, a
		// node shutting down, ...): nothing of it ever ran.
		return pipeline.Fail(pipeline.CodeSandboxUnavailable, "the node refused the tool's pod ("+pod.Status.Reason+": "+
			textutil.OneLine(pod.Status.Message, 300)+"); the body never started")
	}
	for _, cs := range allStatuses(pod) {
		if w := cs.State.Waiting; w != nil {
			switch w.Reason {
			case "ErrImagePull", "ImagePullBackOff", "ErrImageNeverPull", "InvalidImageName":
				return pipeline.Fail(pipeline.CodeSandboxUnavailable, fmt.Sprintf("the tool's pod cannot start: %s: container %s cannot get its image %q: %s",
					w.Reason, cs.Name, imageOf(pod, cs.Name), textutil.OneLine(w.Message, 300)))
			case "CreateContainerConfigError", "CreateContainerError":
				return pipeline.Fail(pipeline.CodeSandboxUnavailable, fmt.Sprintf("the tool's pod cannot start: %s: container %s: %s",
					w.Reason, cs.Name, textutil.OneLine(w.Message, 300)))
			}
		}
		if t := cs.State.Terminated; t != nil {
			switch t.Reason {
			case "OOMKilled":
				return pipeline.Fail(pipeline.CodeSandboxOOMKilled, "the tool exceeded its memory limit")
			case "StartError", "ContainerCannotRun":
				// For instance a runnerPath the tool image does not hold.
				return pipeline.Fail(pipeline.CodeSandboxUnavailable, "the tool's container could not start: "+textutil.OneLine(t.Message, 300))
			}
		}
	}
	// The API server or a kubelet says why it is stopping the pod (the
	// eviction API, preemption, a tainted or lost node, node pressure).
	for _, cond := range pod.Status.Conditions {
		if cond.Type == corev1.DisruptionTarget && cond.Status == corev1.ConditionTrue {
			return pipeline.Fail(pipeline.CodeSandboxEvicted, "the cluster stopped the tool's pod ("+cond.Reason+"): "+textutil.OneLine(cond.Message, 300))
		}
	}
	if !pod.DeletionTimestamp.IsZero() {
		return pipeline.Fail(pipeline.CodeSandboxLost, "the tool's pod is being deleted")
	}
	return nil
}

// imageOf is the image the pod's spec gives the named container (its
// status may not name it before it is pulled).
func imageOf(pod *corev1.Pod, name string) string {
	for _, c := range append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
		if c.Name == name {
			return c.Image
		}
	}
	for _, cs := range allStatuses(pod) {
		if cs.Name == name {
			return cs.Image
		}
	}
	return ""
}

// whyNotUp says what a pod that is not up yet waits for, as the scheduler
// and the kubelet report it ("" when they say nothing): the scheduler's
// reason (Insufficient cpu, a taint, an unbound claim), or a container
// still waiting and why.
func whyNotUp(pod *corev1.Pod) string {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			return fmt.Sprintf("the scheduler could not place it (%s: %s)", c.Reason, textutil.OneLine(c.Message, 300))
		}
	}
	for _, cs := range allStatuses(pod) {
		if w := cs.State.Waiting; w != nil && w.Reason != "" {
			why := fmt.Sprintf("its container %s was still waiting (%s", cs.Name, w.Reason)
			if w.Message != "" {
				why += ": " + textutil.OneLine(w.Message, 300)
			}
			return why + ")"
		}
	}
	if pod.Spec.NodeName != "" && pod.Status.PodIP == "" {
		return "it was on node " + pod.Spec.NodeName + " without an address yet"
	}
	return ""
}

// anyStarted tells whether a container of the pod (an init container
// included) ever started.
func anyStarted(pod *corev1.Pod) bool {
	for _, cs := range allStatuses(pod) {
		if cs.State.Running != nil || cs.State.Terminated != nil || cs.LastTerminationState.Terminated != nil {
			return true
		}
	}
	return false
}

// allStatuses are the statuses of the pod's init containers and containers.
func allStatuses(pod *corev1.Pod) []corev1.ContainerStatus {
	return append(append([]corev1.ContainerStatus{}, pod.Status.InitContainerStatuses...), pod.Status.ContainerStatuses...)
}
