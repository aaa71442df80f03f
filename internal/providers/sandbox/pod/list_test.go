package pod

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/providers/sandbox"
	"github.com/toolgate/toolgate/internal/runner"
	"github.com/toolgate/toolgate/test/mcpservers"
)

// listUntil asks List until it answers something other than ErrPending.
func listUntil(t *testing.T, p *Provider, job sandbox.ListJob) ([]runner.MCPTool, error) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		tools, err := p.List(context.Background(), job)
		if !errors.Is(err, sandbox.ErrPending) {
			return tools, err
		}
		if time.Now().After(deadline) {
			t.Fatal("no listing within 20s")
		}
	}
}

// TestAnMCPServerIsListedInAPodOfItsOwn: on a real API server, a listing
// makes a pod owned by the profile (sealed, no call, no network, the
// server's image), hands its runner a listing over the channel (the
// server, a real process, is listed), returns the tools and deletes the
// pod; a restarted manager collects a listing its predecessor handed over
// without the server listed twice; a pod whose image cannot be pulled
// fails the listing with the image named.
func TestAnMCPServerIsListedInAPodOfItsOwn(t *testing.T) {
	c, newProvider := onAPIServer(t)
	ctx := context.Background()
	ns := namespace(t, c, "listing-", nil)
	job := func(greeting string) sandbox.ListJob {
		server := toolgatev1alpha1.MCPServer{Name: "greeter", Container: toolgatev1alpha1.ContainerRuntime{
			Image: "mcp/greeter:1", Command: []string{"/bin/sh", "-c", mcpservers.Greeter},
			Env: []toolgatev1alpha1.EnvVar{{Name: "GREETING", Value: greeting}},
		}}
		policy := testJob(toolgatev1alpha1.SandboxReadOnly, "").Policy
		return sandbox.ListJob{Key: sandbox.ListKey("profile-uid", server, policy), Owner: types.NamespacedName{Namespace: ns, Name: "tools"}, OwnerUID: "profile-uid",
			Server: server, Policy: policy}
	}
	// podOf is the listing's pod (not one being deleted).
	podOf := func(j sandbox.ListJob) (*corev1.Pod, error) {
		pods := &corev1.PodList{}
		if err := c.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels{LabelListingKey: listingKey(j)}); err != nil {
			return nil, err
		}
		for i := range pods.Items {
			if pod := &pods.Items[i]; pod.DeletionTimestamp.IsZero() && len(pod.OwnerReferences) == 1 {
				return pod, nil
			}
		}
		return nil, apierrors.NewNotFound(corev1.Resource("pods"), ListName(j))
	}
	workspace := t.TempDir() // where the pod's empty workspace would be mounted
	real := func(ctx context.Context, spec runner.Spec, args []byte, _ runner.SubCaller) (runner.Header, []byte, []byte) {
		spec.Workspace = workspace
		return runner.Execute(ctx, spec, args, time.Second)
	}

	p := newProvider()
	j := job("Greets a person.")
	// Someone who may create pods here makes one under the name toolgate
	// would give the listing's pod, labelled as toolgate labels it: it is
	// not in the way, and never handed anything.
	squatter := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: ListName(j), Labels: map[string]string{
		toolgatev1alpha1.LabelListing: "greeter", LabelListingKey: listingKey(j)}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "squat"}}}}
	must(t, c.Create(ctx, squatter))
	if _, err := p.List(ctx, j); !errors.Is(err, sandbox.ErrPending) {
		t.Fatalf("start: %v", err)
	}
	pod, err := podOf(j)
	must(t, err)
	ref := pod.OwnerReferences
	switch {
	case len(ref) != 1 || ref[0].Kind != "ToolProfile" || ref[0].Name != "tools" || ref[0].UID != "profile-uid":
		t.Fatalf("owner %+v", ref)
	case !p.sealed(pod):
		t.Fatal("the listing's pod is not sealed")
	case pod.Labels[toolgatev1alpha1.LabelListing] != "greeter" || pod.Labels[toolgatev1alpha1.LabelEgress] != EgressNone || pod.Labels[toolgatev1alpha1.LabelCall] != "":
		t.Fatalf("labels %v", pod.Labels)
	case pod.Spec.Containers[0].Image != "mcp/greeter:1" || len(pod.Spec.Volumes) != 3 || pod.Spec.Volumes[2].EmptyDir == nil:
		t.Fatalf("the server's pod: image %s, volumes %+v (tmp, runner, an empty workspace)", pod.Spec.Containers[0].Image, pod.Spec.Volumes)
	}
	k := startKubeletWith(t, c, pod, "127.0.0.1", real)
	p.Dial = k.dial
	tools, err := listUntil(t, p, j)
	if err != nil || len(tools) != 1 || tools[0].Name != "greet" || tools[0].Description != "Greets a person." {
		t.Fatalf("listing %+v %v", tools, err)
	}
	if spec, _ := k.handed.Load().(runner.Spec); !spec.MCPList || spec.MCPTool != "" || spec.Env["GREETING"] != "Greets a person." || spec.Workspace != "/workspace" || spec.Writable {
		t.Fatalf("handed %+v", spec)
	}
	if _, err := podOf(j); !apierrors.IsNotFound(err) {
		t.Fatalf("the listing's pod is left once listed: %v", err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(squatter), squatter); err != nil {
		t.Fatalf("the squatter's pod: %v", err)
	}

	// Handed over by one manager, collected by the next.
	j = job("Greets a person twice.")
	if _, err := p.List(ctx, j); !errors.Is(err, sandbox.ErrPending) {
		t.Fatalf("start: %v", err)
	}
	pod, err = podOf(j)
	must(t, err)
	k = startKubeletWith(t, c, pod, "127.0.0.1", real)
	p.Dial = k.dial
	for deadline := time.Now().Add(20 * time.Second); k.runs.Load() == 0; time.Sleep(20 * time.Millisecond) {
		if _, err := p.List(ctx, j); !errors.Is(err, sandbox.ErrPending) {
			t.Fatalf("answered before its listing ran: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatal("never handed over")
		}
	}
	next := newProvider()
	next.Dial = k.dial
	tools, err = listUntil(t, next, j)
	if err != nil || len(tools) != 1 || tools[0].Description != "Greets a person twice." || k.runs.Load() != 1 {
		t.Fatalf("collected %+v %v after %d runs", tools, err, k.runs.Load())
	}

	// A new spec's listing deletes the pod of one before it.
	before := job("Greets, as before.")
	if _, err := p.List(ctx, before); !errors.Is(err, sandbox.ErrPending) {
		t.Fatalf("start: %v", err)
	}
	old, err := podOf(before)
	must(t, err)
	if _, err := p.List(ctx, job("Greets, newly.")); !errors.Is(err, sandbox.ErrPending) {
		t.Fatalf("start: %v", err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(old), old); !apierrors.IsNotFound(err) && old.DeletionTimestamp.IsZero() {
		t.Fatalf("the earlier spec's listing pod is left: %v", err)
	}

	// An image that cannot be pulled.
	j = job("Never listed.")
	if _, err := p.List(ctx, j); !errors.Is(err, sandbox.ErrPending) {
		t.Fatalf("start: %v", err)
	}
	pod, err = podOf(j)
	must(t, err)
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: containerTool, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImagePull", Message: "not found"}}}}
	must(t, c.Status().Update(ctx, pod))
	if _, err := listUntil(t, p, j); err == nil || !strings.Contains(err.Error(), `"mcp/greeter:1"`) {
		t.Fatalf("an image that cannot be pulled: %v", err)
	}
}
