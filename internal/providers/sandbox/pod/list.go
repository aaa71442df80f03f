package pod

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/providers/sandbox"
	"github.com/toolgate/toolgate/internal/runner"
	"github.com/toolgate/toolgate/internal/textutil"
)

// Listing an MCP server's tools (discovery). The server runs in a pod of
// its own, built as a call's would be from the profile's sandbox policy,
// but with an empty workspace, no network (the namespace's deny-all
// policy) and no call: its runner is handed a listing (runner.Spec.MCPList) instead,
// over the same sealed channel, and the pod is deleted once its frame is
// read. The pod is labelled with its listing's key and owned by the
// profile, so a restarted manager adopts it (the runner answers a listing
// it was handed with its frame again), a new spec's listing deletes an
// earlier one's, and the profile's deletion removes it.

var _ sandbox.Lister = (*Provider)(nil)

// listing is a listing's exchange with its pod's runner.
type listing struct {
	pod   types.UID
	done  chan struct{} // closed once tools or err is set
	tools []runner.MCPTool
	err   error
	retry bool // the runner was not reached: another exchange may be tried
}

// List lists job's server in its pod: creates it, waits for it, asks its
// runner, and deletes it with the answer.
func (p *Provider) List(ctx context.Context, job sandbox.ListJob) ([]runner.MCPTool, error) {
	if p.isStopped() {
		return nil, errStopped
	}
	if p.Key == nil {
		return nil, errors.New("the pod sandbox has no channel key")
	}
	pod, going, err := p.listingPod(ctx, job)
	switch {
	case err != nil || going:
		return nil, sandbox.ErrPending // asked again
	case pod == nil:
		return nil, p.startListing(ctx, job)
	}
	if l := p.listingOf(job.Key, pod.UID); l != nil && isClosed(l.done) && !l.retry {
		p.endListing(ctx, job.Key, pod, true)
		return l.tools, l.err
	}
	if err := failureOf(pod); err != nil {
		p.endListing(ctx, job.Key, pod, true)
		return nil, fmt.Errorf("the server's pod failed: %w", err)
	}
	bound := pod.CreationTimestamp.Add(p.Config.startTimeout())
	switch {
	case final(pod):
		// Ended without a frame this process read (it restarted, or the
		// runner exited): listed again in a new pod, a few times.
		p.endListing(ctx, job.Key, pod, false)
		return nil, sandbox.ErrPending
	case !running(pod) || pod.Status.PodIP == "":
		if p.now().After(bound) {
			p.endListing(ctx, job.Key, pod, true)
			why := whyNotUp(pod)
			if why == "" {
				why = "it did not start"
			}
			return nil, fmt.Errorf("the server's pod was not ready within %s: %s", p.Config.startTimeout(), why)
		}
		return nil, sandbox.ErrPending
	}
	if l := p.listingOf(job.Key, pod.UID); l != nil && !isClosed(l.done) {
		return nil, sandbox.ErrPending
	} else if l != nil && l.retry && p.now().After(bound) {
		p.endListing(ctx, job.Key, pod, true)
		return nil, fmt.Errorf("the server's pod did not answer: %w", l.err)
	}
	p.exchangeListing(job, pod.DeepCopy())
	return nil, sandbox.ErrPending
}

// LabelListingKey labels a listing's pod with its listing (a digest of
// its key): the pod of a server's earlier spec is told from the current.
const LabelListingKey = "toolgate.dev/listing-key"

// listingKey is the value of LabelListingKey for job.
func listingKey(job sandbox.ListJob) string {
	sum := sha256.Sum256([]byte(job.Key))
	return hex.EncodeToString(sum[:])[:20]
}

// maxListAttempts bounds the pods a listing makes that end without an
// answer.
const maxListAttempts = 3

// listingPod finds the listing's pod among the server's listing pods:
// toolgate's (controlled by the profile, sealed), of this key; going says
// one is being deleted. A pod anyone else labelled so is passed over, not
// in the way (its name is generated); this profile's pods of the server's
// earlier specs, and one made and never sealed, are deleted.
func (p *Provider) listingPod(ctx context.Context, job sandbox.ListJob) (found *corev1.Pod, going bool, err error) {
	pods := &corev1.PodList{}
	if err := p.Reader.List(ctx, pods, client.InNamespace(job.Owner.Namespace),
		client.MatchingLabels{toolgatev1alpha1.LabelListing: textutil.LabelValue(job.Server.Name)}); err != nil {
		return nil, false, err
	}
	owner, key := profileOwner(job), listingKey(job)
	for i := range pods.Items {
		pod := &pods.Items[i]
		switch {
		case !controlledBy(pod, owner):
			continue // not this profile's
		case !pod.DeletionTimestamp.IsZero():
			going = going || pod.Labels[LabelListingKey] == key
			continue
		case neverSealed(pod) || pod.Labels[LabelListingKey] != key:
			// Never handed anything, or an earlier spec's listing.
			p.dropListing(pod.UID)
			_ = client.IgnoreNotFound(p.Client.Delete(context.WithoutCancel(ctx), pod, client.Preconditions{UID: &pod.UID}, client.GracePeriodSeconds(0)))
			continue
		case !p.sealed(pod):
			continue
		}
		if found == nil || pod.CreationTimestamp.Before(&found.CreationTimestamp) {
			found = pod
		}
	}
	return found, going, nil
}

// ListName is the prefix of a listing's pod's generated name.
func ListName(job sandbox.ListJob) string {
	sum := sha256.Sum256([]byte(job.Key))
	suffix := "-" + hex.EncodeToString(sum[:])[:10] + "-list"
	base := job.Owner.Name + "-" + job.Server.Name
	if max := 63 - len(suffix); len(base) > max {
		base = base[:max]
	}
	return base + suffix
}

func profileOwner(job sandbox.ListJob) metav1.OwnerReference {
	return metav1.OwnerReference{
		APIVersion: toolgatev1alpha1.GroupVersion.String(), Kind: "ToolProfile", Name: job.Owner.Name, UID: job.OwnerUID,
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
	}
}

// startListing creates and seals the listing's pod, a few times at most.
func (p *Provider) startListing(ctx context.Context, job sandbox.ListJob) error {
	p.mu.Lock()
	if p.listAttempts == nil {
		p.listAttempts = map[string]int{}
	}
	p.listAttempts[job.Key]++
	n := p.listAttempts[job.Key]
	if n > maxListAttempts {
		delete(p.listAttempts, job.Key)
	}
	p.mu.Unlock()
	if n > maxListAttempts {
		return fmt.Errorf("the server's pod ended %d times without answering (its runner or the server exited)", maxListAttempts)
	}
	name := ListName(job)
	tool := sandbox.ListTool(job)
	pod, err := p.buildPod(sandbox.Job{Tool: tool, Policy: job.Policy, Owner: job.Owner, OwnerUID: job.OwnerUID}, name)
	if err != nil {
		return fmt.Errorf("the server's pod cannot be built: %w", err)
	}
	if err := p.ensureNetworkPolicies(ctx, job.Owner.Namespace, EgressNone); err != nil {
		return sandbox.ErrPending
	}
	// An empty workspace where a call's is mounted: a server that serves
	// the workspace (server-filesystem) does not start without it. Nothing
	// of any session is in it, and nothing written there is kept.
	if job.Policy.WorkspaceRoot != "" {
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "workspace", VolumeSource: corev1.VolumeSource{
			EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: ptr.To(resource.MustParse("1Mi"))}}})
		pod.Spec.Containers[0].VolumeMounts = append(pod.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{
			Name: "workspace", MountPath: job.Policy.WorkspaceRoot, ReadOnly: true})
	}
	delete(pod.Labels, toolgatev1alpha1.LabelCall)
	delete(pod.Labels, toolgatev1alpha1.LabelAttempt)
	pod.Labels[toolgatev1alpha1.LabelEgress] = EgressNone
	pod.Labels[toolgatev1alpha1.LabelListing] = textutil.LabelValue(job.Server.Name)
	pod.Labels[LabelListingKey] = listingKey(job)
	pod.OwnerReferences = []metav1.OwnerReference{profileOwner(job)}
	// A generated name: a pod anyone made under a name toolgate would use
	// cannot block the listing.
	pod.Name, pod.GenerateName = "", name+"-"
	if err := p.Client.Create(ctx, pod); err != nil {
		return fmt.Errorf("the server's pod could not be created: %w", err)
	}
	podsCreated.WithLabelValues("listing").Inc()
	_ = p.sealCreated(ctx, pod)
	return sandbox.ErrPending
}

// listingOf is the exchange with pod for the listing with key, if any.
func (p *Provider) listingOf(key string, pod types.UID) *listing {
	p.mu.Lock()
	defer p.mu.Unlock()
	if l := p.listings[key]; l != nil && l.pod == pod {
		return l
	}
	return nil
}

// exchangeListing hands the listing to pod's runner in the background and
// keeps its answer for List.
func (p *Provider) exchangeListing(job sandbox.ListJob, pod *corev1.Pod) {
	l := &listing{pod: pod.UID, done: make(chan struct{})}
	p.mu.Lock()
	if p.listings == nil {
		p.listings = map[string]*listing{}
	}
	p.listings[job.Key] = l
	p.mu.Unlock()
	go func() {
		defer close(l.done)
		ctx, cancel := context.WithTimeout(p.lifeContext(), sandbox.ListTimeoutSeconds*time.Second+handOverMargin)
		defer cancel()
		conn, err := p.dialer()(ctx, runnerAddr(pod))
		if err != nil {
			l.err, l.retry = err, true
			return
		}
		defer func() { _ = conn.Close() }()
		stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
		defer stop()
		hello, res, err := runner.Exchange(conn, p.keyOf(pod), runner.Request{Op: runner.OpRun, Call: job.Key, Spec: sandbox.ListSpec(job, job.Policy.WorkspaceRoot)}, nil)
		switch {
		case err != nil && hello == nil:
			l.err, l.retry = err, true // not listening yet
		case err != nil:
			l.err = fmt.Errorf("the server's runner: %w", err)
		case res.Code != "":
			l.err = errors.New(textutil.Truncate(res.Error, 2048))
		default:
			if err := json.Unmarshal(res.Stdout, &l.tools); err != nil {
				l.err = fmt.Errorf("the listing is not a list of tools: %w", err)
			}
		}
	}()
}

// endListing deletes the listing's pod and forgets its exchange, and,
// answered, its attempts.
func (p *Provider) endListing(ctx context.Context, key string, pod *corev1.Pod, answered bool) {
	p.mu.Lock()
	delete(p.listings, key)
	if answered {
		delete(p.listAttempts, key)
	}
	p.mu.Unlock()
	_ = client.IgnoreNotFound(p.Client.Delete(context.WithoutCancel(ctx), pod, client.Preconditions{UID: &pod.UID}, client.GracePeriodSeconds(0)))
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// dropListing forgets the exchange with pod, whatever its key.
func (p *Provider) dropListing(pod types.UID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for key, l := range p.listings {
		if l.pod == pod {
			delete(p.listings, key)
		}
	}
}
