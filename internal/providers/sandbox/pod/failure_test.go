package pod

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestFailuresNameTheirCause checks a pod that cannot start, or is not up
// by its bound, is described by what the scheduler and the kubelet said:
// the image that cannot be pulled, the scheduler's reason.
func TestFailuresNameTheirCause(t *testing.T) {
	spec := corev1.PodSpec{Containers: []corev1.Container{{Name: containerTool, Image: "registry.example/tools:missing"}}}
	waiting := func(reason, message string) corev1.PodStatus {
		return corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{Name: containerTool,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: message}}}}}
	}
	for _, c := range []struct {
		name   string
		status corev1.PodStatus
		fail   string // failureOf's message, "" for none
		notUp  string // whyNotUp's
	}{
		{"an image that cannot be pulled", waiting("ErrImagePull", "failed to pull and unpack image: not found"),
			`cannot start: ErrImagePull: container tool cannot get its image "registry.example/tools:missing": failed to pull and unpack image: not found`, "its container tool was still waiting (ErrImagePull"},
		{"backing off", waiting("ImagePullBackOff", "Back-off pulling image"),
			`ImagePullBackOff: container tool cannot get its image "registry.example/tools:missing"`, ""},
		{"a missing Secret", waiting("CreateContainerConfigError", `secret "creds" not found`),
			`CreateContainerConfigError: container tool: secret "creds" not found`, ""},
		{"no room on any node", corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
			Reason: "Unschedulable", Message: "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available"}}},
			"", "the scheduler could not place it (Unschedulable: 0/1 nodes are available: 1 Insufficient cpu."},
		{"still creating", waiting("ContainerCreating", ""), "", "its container tool was still waiting (ContainerCreating)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			pod := &corev1.Pod{Spec: spec, Status: c.status}
			err := failureOf(pod)
			switch {
			case c.fail == "" && err != nil:
				t.Fatalf("failure %v", err)
			case c.fail != "" && (err == nil || !strings.Contains(err.Error(), c.fail)):
				t.Fatalf("failure %v, want one containing %q", err, c.fail)
			}
			if c.notUp != "" && !strings.Contains(whyNotUp(pod), c.notUp) {
				t.Fatalf("not up: %q, want one containing %q", whyNotUp(pod), c.notUp)
			}
		})
	}
}
