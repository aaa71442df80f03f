// Package pod is the sandbox provider that runs each attempt of a call in its
// own constrained pod (see BuildPod), owned by the ToolCall and named
// deterministically, so that a restarted manager adopts the pod it created
// instead of starting a second one. The pod starts with no call in it; the
// provider hands the call to the pod's runner over the authenticated
// channel (runner.Exchange) and receives the sealed frame the same way, as
// soon as the body ends.
package pod

import (
	"context"
	"crypto/ecdh"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/providers/sandbox"
	"github.com/toolgate/toolgate/internal/runner"
	"github.com/toolgate/toolgate/internal/textutil"
)

// Provider runs attempts as pods.
type Provider struct {
	// Client writes pods and network policies.
	Client client.Client
	// Reader reads pods, network policies and the API server's addresses
	// (the kubernetes Service and its EndpointSlices) from the API server
	// itself: a cache that has not yet seen a pod just created would make it
	// look deleted, and a cache of Services would watch the whole cluster.
	Reader client.Reader
	// Key is the manager's channel key: its public half is in every tool
	// pod, and only its holder can hand a call over or open a frame.
	Key *ecdh.PrivateKey
	// Dial connects to a runner (nil: TCP with keep-alives, so a vanished
	// peer is noticed while a long body runs).
	Dial func(ctx context.Context, addr string) (net.Conn, error)
	// Config is the operator's pod configuration.
	Config Config
	// NetworkPolicyEnforced declares that the cluster's CNI enforces
	// NetworkPolicy; without it enforcement is reported as partial.
	NetworkPolicyEnforced bool
	// Notify wakes a call when its frame arrived.
	Notify sandbox.Notifier
	// SubCalls runs the sub-calls bodies make (nil: they are refused).
	SubCalls sandbox.SubCalls
	// Clock measures the start bound and the warm pods' ages (nil: the
	// real clock).
	Clock clock.PassiveClock

	mu        sync.Mutex
	followers map[string]*follower
	warm      pools
	// minPoll and maxPoll replace the followers' poll bounds (tests).
	minPoll, maxPoll time.Duration
}

var _ sandbox.Provider = &Provider{}

type follower struct {
	pod  types.NamespacedName
	uid  types.UID
	done chan struct{}
	wake chan struct{} // the pod changed (PodChanged): look again now
	res  *runner.Result
	err  error // a final answer (a pipeline failure)
}

// Enforcement is full when NetworkPolicy is enforced (every tool pod's
// network isolation relies on it: no ingress, and no egress or none to
// link-local addresses and the API server), the mode is not FullAccess, a
// runtimeClassName is set, and the resources are within the caps
// (CheckResources; above one, no pod is built).
func (p *Provider) Enforcement(policy toolgatev1alpha1.SandboxPolicy) (bool, string) {
	var reasons []string
	if err := p.Validate(policy); err != nil {
		reasons = append(reasons, err.Error()+": no tool pod is created and calls fail (sandbox_unavailable) until the profile asks for less")
	}
	if policy.Mode == toolgatev1alpha1.SandboxFullAccess {
		reasons = append(reasons, "mode FullAccess: the workspace is writable and egress is allowed (except to link-local addresses and the API server)")
	}
	if !p.NetworkPolicyEnforced {
		reasons = append(reasons, "network isolation (no ingress; no egress, or with egress allowed none to link-local addresses or the API server) relies on NetworkPolicy, which only a CNI that enforces it applies; start the manager with --network-policy-enforced once yours does")
	}
	if policy.RuntimeClassName == nil {
		reasons = append(reasons, "no runtimeClassName: tools share the node's kernel (set one for gVisor or Kata)")
	}
	return len(reasons) == 0, strings.Join(reasons, "; ")
}

// Validate refuses a policy this provider cannot run at all: resources
// above a cap, or not positive.
func (p *Provider) Validate(policy toolgatev1alpha1.SandboxPolicy) error {
	return CheckResources(policy.Resources)
}

// Run creates, adopts, polls or stops the attempt's pod.
func (p *Provider) Run(ctx context.Context, job sandbox.Job) (sandbox.Result, error) {
	if len(job.Arguments) > MaxArguments {
		return sandbox.Result{}, pipeline.Fail(pipeline.CodeSandboxUnavailable, fmt.Sprintf("arguments larger than %d bytes cannot be passed to a pod", MaxArguments))
	}
	// API work must go on when the call is cancelled: stopping the pod is
	// exactly what cancellation needs.
	api := context.WithoutCancel(ctx)
	f := p.follower(job.Key)
	pod, err := p.find(api, job, f)
	switch {
	case apierrors.IsNotFound(err):
		switch {
		case ctx.Err() != nil:
			// Never started, or stopped and now gone.
			return sandbox.Result{}, ctx.Err()
		case f != nil && isDone(f) && f.res != nil:
			return sandbox.Outcome(f.res.Header, f.res.Stdout, f.res.Stderr)
		case f != nil:
			return sandbox.Result{}, pipeline.Fail(pipeline.CodeSandboxLost, "the tool's pod was deleted by someone else")
		case job.Resumed:
			// Started by a previous manager and gone: its outcome is
			// unknowable.
			return sandbox.Result{}, sandbox.ErrLost
		}
		return sandbox.Result{}, p.start(api, job, true)
	case err != nil:
		return sandbox.Result{}, sandbox.ErrPending // transient; asked again
	}
	if !metav1.IsControlledBy(pod, &metav1.ObjectMeta{UID: job.OwnerUID}) {
		return sandbox.Result{}, pipeline.Fail(pipeline.CodeSandboxLost, "a pod of that name belongs to another object")
	}
	if ctx.Err() != nil {
		// Stop the pod and report only once it is gone.
		if pod.DeletionTimestamp.IsZero() {
			// A failure is retried: the attempt stays pending until the pod
			// is gone.
			if err := client.IgnoreNotFound(p.Client.Delete(api, pod, client.GracePeriodSeconds(5))); err != nil {
				log.FromContext(ctx).Error(err, "tool pod not stopped", "pod", pod.Name)
			}
		}
		p.adopt(job, pod)
		return sandbox.Result{}, sandbox.ErrPending
	}
	f = p.adopt(job, pod)
	select {
	case <-f.done:
		if f.err != nil {
			if fail := failureOf(pod); fail != nil {
				return sandbox.Result{}, fail // what the pod says now is the most precise
			}
			return sandbox.Result{}, f.err
		}
		return sandbox.Outcome(f.res.Header, f.res.Stdout, f.res.Stderr)
	default:
	}
	if fail := failureOf(pod); fail != nil {
		return sandbox.Result{}, fail
	}
	return sandbox.Result{}, sandbox.ErrPending
}

// failureOf maps a pod that can no longer produce a frame to a stable code.
func failureOf(pod *corev1.Pod) error {
	switch pod.Status.Reason {
	case "Evicted":
		return pipeline.Fail(pipeline.CodeSandboxEvicted, "the node evicted the tool's pod")
	case "DeadlineExceeded":
		return pipeline.Fail(pipeline.CodeTimeout, "the tool's pod exceeded its active deadline")
	}
	for _, cs := range append(append([]corev1.ContainerStatus{}, pod.Status.InitContainerStatuses...), pod.Status.ContainerStatuses...) {
		if w := cs.State.Waiting; w != nil {
			switch w.Reason {
			case "ErrImagePull", "ImagePullBackOff", "ErrImageNeverPull", "InvalidImageName", "CreateContainerConfigError", "CreateContainerError":
				return pipeline.Fail(pipeline.CodeSandboxUnavailable, "the tool's pod cannot start: "+w.Reason)
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
	if !pod.DeletionTimestamp.IsZero() {
		return pipeline.Fail(pipeline.CodeSandboxLost, "the tool's pod is being deleted")
	}
	return nil
}

// Prepare creates (or claims) the attempt's pod before its dispatch
// boundary is written. The pod holds nothing of the call, and nothing is
// handed to it until Run, which the pipeline calls only once the boundary
// is durable.
func (p *Provider) Prepare(ctx context.Context, job sandbox.Job) error {
	api := context.WithoutCancel(ctx)
	if p.follower(job.Key) != nil {
		return nil
	}
	if _, err := p.find(api, job, nil); !apierrors.IsNotFound(err) {
		return err // there already, or unknown: Run decides
	}
	if err := p.start(api, job, false); !errors.Is(err, sandbox.ErrPending) {
		return err
	}
	return nil
}

// find reads the attempt's pod: the one its follower f follows, else the
// pod of its deterministic name, else a warm pod it claimed (before a
// restart). NotFound when it has none.
func (p *Provider) find(ctx context.Context, job sandbox.Job, f *follower) (*corev1.Pod, error) {
	key := p.podKey(job)
	if f != nil {
		key = f.pod // a claimed warm pod has a name of its own
	}
	pod := &corev1.Pod{}
	err := p.Reader.Get(ctx, key, pod)
	if !apierrors.IsNotFound(err) || f != nil {
		return pod, err
	}
	claimed, cerr := p.claimed(ctx, job)
	switch {
	case cerr != nil:
		return nil, cerr // transient; asked again
	case claimed != nil:
		return claimed, nil
	}
	return nil, err
}

// podKey is the attempt's deterministic pod name.
func (p *Provider) podKey(job sandbox.Job) types.NamespacedName {
	return types.NamespacedName{Namespace: job.Owner.Namespace, Name: Name(job.Owner.Name, string(job.OwnerUID), job.Attempt)}
}

// buildPod is BuildPod with the manager's public channel key.
func (p *Provider) buildPod(job sandbox.Job, name string) (*corev1.Pod, error) {
	cfg := p.Config
	cfg.ChannelKey = hex.EncodeToString(p.Key.PublicKey().Bytes())
	return BuildPod(cfg, job, name)
}

// start gives the attempt a pod: a warm one of its session if one is
// ready, else a new one; either way the session's pool is replenished.
// With follow, the call is handed to the pod once it listens.
func (p *Provider) start(ctx context.Context, job sandbox.Job, follow bool) error {
	if p.Key == nil {
		return pipeline.Fail(pipeline.CodeSandboxUnavailable, "the pod sandbox has no channel key")
	}
	key := p.podKey(job)
	pod, err := p.buildPod(job, key.Name)
	if err != nil {
		// Nothing ran: a definite failure.
		return pipeline.Fail(pipeline.CodeSandboxUnavailable, "the tool's pod cannot be built: "+err.Error())
	}
	if err := p.ensureNetworkPolicies(ctx, key.Namespace, EgressAllowed(job.Policy)); err != nil {
		return err
	}
	template := templateOf(pod)
	defer p.replenish(job, template)
	if warm := p.claim(ctx, job, template); warm != nil {
		warmClaims.WithLabelValues("hit").Inc()
		if follow {
			p.adopt(job, warm)
		}
		return sandbox.ErrPending
	} else if job.WarmPods > 0 {
		warmClaims.WithLabelValues("miss").Inc()
	}
	pod.Labels[LabelCallUID] = string(job.OwnerUID)
	pod.OwnerReferences = []metav1.OwnerReference{callOwner(job)}
	if err := p.Client.Create(ctx, pod); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return sandbox.ErrPending // adopted on the next poll
		}
		// No pod exists, so nothing ran: a definite failure, never a
		// phantom attempt that a later poll would report lost.
		return pipeline.Fail(pipeline.CodeSandboxUnavailable, "the tool's pod could not be created: "+err.Error())
	}
	podsCreated.WithLabelValues("cold").Inc()
	if follow {
		p.adopt(job, pod)
	}
	return sandbox.ErrPending
}

// ensureNetworkPolicies makes sure the namespace's policies isolating tool
// pods exist with the desired spec before a pod is created: the deny-all
// policy always, the egress policy when the pod is allowed egress. It
// answers sandbox_unavailable (nothing ran) when a policy cannot be made
// right, and ErrPending when it raced another writer (tried again).
func (p *Provider) ensureNetworkPolicies(ctx context.Context, namespace string, egress bool) error {
	if err := p.ensurePolicy(ctx, p.Config.DenyAll(namespace)); err != nil {
		return err
	}
	if !egress {
		return nil
	}
	addrs, err := p.apiServerAddresses(ctx)
	if err != nil {
		return pipeline.Fail(pipeline.CodeSandboxUnavailable, fmt.Sprintf(
			"no tool pod allowed egress is started: the API server's addresses, which NetworkPolicy %s/%s must exclude, cannot be read: %v",
			namespace, EgressPolicyName, err))
	}
	return p.ensurePolicy(ctx, p.Config.EgressPolicy(namespace, addrs))
}

// Audit lists the NetworkPolicies of namespace, other than toolgate's,
// that select the tool pods of policy and allow them traffic: policies add
// up, so each widens what the sandbox's own allow. A selector naming a
// call's own labels is not predicted; an empty one (every pod of the
// namespace) is the usual culprit.
func (p *Provider) Audit(ctx context.Context, namespace string, policy toolgatev1alpha1.SandboxPolicy) (string, error) {
	list := &networkingv1.NetworkPolicyList{}
	if err := p.Client.List(ctx, list, client.InNamespace(namespace)); err != nil {
		return "", err
	}
	tool := labels.Set{LabelSandbox: "true", LabelEgress: fmt.Sprint(EgressAllowed(policy)), LabelManagedBy: managedBy}
	var found []string
	for _, np := range list.Items {
		if (np.Name == NetworkPolicyName || np.Name == EgressPolicyName) && np.Labels[LabelManagedBy] == managedBy {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		if err != nil || !sel.Matches(tool) {
			continue
		}
		var allows []string
		if slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) || len(np.Spec.PolicyTypes) == 0 {
			if len(np.Spec.Ingress) > 0 {
				allows = append(allows, "ingress")
			}
		}
		if len(np.Spec.Egress) > 0 {
			allows = append(allows, "egress")
		}
		if len(allows) > 0 {
			found = append(found, fmt.Sprintf("NetworkPolicy %s selects tool pods and allows %s", np.Name, strings.Join(allows, " and ")))
		}
	}
	if len(found) == 0 {
		return "", nil
	}
	return strings.Join(found, "; ") + " (NetworkPolicies add up: tool pods may reach, or be reached by, more than the sandbox allows)", nil
}

// ensurePolicy creates want, or brings an existing policy of its name that
// toolgate manages back to want's spec. A policy of that name toolgate does
// not manage (no managed-by label) is never changed: unless its spec is
// already want's, no tool pod is started in the namespace.
func (p *Provider) ensurePolicy(ctx context.Context, want *networkingv1.NetworkPolicy) error {
	name := want.Namespace + "/" + want.Name
	unavailable := func(format string, args ...any) error {
		return pipeline.Fail(pipeline.CodeSandboxUnavailable, fmt.Sprintf("NetworkPolicy %s ", name)+fmt.Sprintf(format, args...))
	}
	got := &networkingv1.NetworkPolicy{}
	err := p.Reader.Get(ctx, client.ObjectKeyFromObject(want), got)
	switch {
	case apierrors.IsNotFound(err):
		err := p.Client.Create(ctx, want)
		switch {
		case apierrors.IsAlreadyExists(err):
			return sandbox.ErrPending // created meanwhile: checked on the next poll
		case err != nil:
			return unavailable("could not be created: %v", err)
		}
		return nil
	case err != nil:
		return unavailable("could not be read: %v", err)
	}
	if equality.Semantic.DeepEqual(got.Spec, want.Spec) {
		return nil
	}
	if got.Labels[LabelManagedBy] != managedBy {
		return unavailable("exists, is not managed by toolgate (no label %s=%s) and does not isolate tool pods as the sandbox needs; toolgate leaves it alone and starts no tool pod in this namespace until it is deleted",
			LabelManagedBy, managedBy)
	}
	got.Spec = want.Spec
	if err := p.Client.Update(ctx, got); err != nil {
		if apierrors.IsConflict(err) {
			return sandbox.ErrPending // changed meanwhile: checked on the next poll
		}
		return unavailable("differs from the sandbox's and could not be restored: %v", err)
	}
	log.FromContext(ctx).Info("sandbox NetworkPolicy restored to its desired spec", "networkPolicy", name)
	return nil
}

// apiServerAddresses are the addresses of the API server that tool pods
// must not reach: the kubernetes Service's cluster IPs and the addresses of
// its EndpointSlices (a CNI may apply policies after the Service address is
// translated). Read fresh each time (they can change); any failure, or no
// endpoint address at all, is an error: the caller fails closed.
func (p *Provider) apiServerAddresses(ctx context.Context) ([]netip.Addr, error) {
	hint := func(err error) error {
		if apierrors.IsForbidden(err) {
			return fmt.Errorf("%w (the manager needs get and list on services, and on endpointslices.discovery.k8s.io)", err)
		}
		return err
	}
	svc := &corev1.Service{}
	if err := p.Reader.Get(ctx, client.ObjectKey{Namespace: metav1.NamespaceDefault, Name: "kubernetes"}, svc); err != nil {
		return nil, fmt.Errorf("get Service default/kubernetes: %w", hint(err))
	}
	var out []netip.Addr
	ips := svc.Spec.ClusterIPs
	if len(ips) == 0 && svc.Spec.ClusterIP != "" {
		ips = []string{svc.Spec.ClusterIP}
	}
	for _, ip := range ips {
		if a, err := netip.ParseAddr(ip); err == nil {
			out = append(out, a)
		}
	}
	list := &discoveryv1.EndpointSliceList{}
	if err := p.Reader.List(ctx, list, client.InNamespace(metav1.NamespaceDefault), client.MatchingLabels{discoveryv1.LabelServiceName: "kubernetes"}); err != nil {
		return nil, fmt.Errorf("list the EndpointSlices of Service default/kubernetes: %w", hint(err))
	}
	endpoints := 0
	for _, s := range list.Items {
		if s.AddressType != discoveryv1.AddressTypeIPv4 && s.AddressType != discoveryv1.AddressTypeIPv6 {
			continue
		}
		for _, e := range s.Endpoints {
			for _, ip := range e.Addresses {
				if a, err := netip.ParseAddr(ip); err == nil {
					out = append(out, a)
					endpoints++
				}
			}
		}
	}
	if endpoints == 0 {
		return nil, errors.New("the EndpointSlices of Service default/kubernetes hold no address")
	}
	return out, nil
}

func (p *Provider) follower(key string) *follower {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.followers[key]
}

// adopt returns the attempt's follower, starting one for a pod this
// process has not followed yet (after a restart, the adopted pod's).
func (p *Provider) adopt(job sandbox.Job, pod *corev1.Pod) *follower {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.followers == nil {
		p.followers = map[string]*follower{}
	}
	if f, ok := p.followers[job.Key]; ok {
		return f
	}
	f := &follower{pod: client.ObjectKeyFromObject(pod), uid: pod.UID, done: make(chan struct{}), wake: make(chan struct{}, 1)}
	p.followers[job.Key] = f
	go p.follow(f, job)
	return f
}

// follow hands the call to the pod's runner once it listens, or collects
// the call handed over before (by this process or a previous one), until
// the frame arrives or the pod can no longer give one.
func (p *Provider) follow(f *follower, job sandbox.Job) {
	defer func() {
		close(f.done)
		if p.Notify != nil {
			p.Notify(job.Owner)
		}
	}()
	ctx := context.Background()
	workspace := ""
	if job.Workspace.ClaimName != "" {
		workspace = job.Policy.WorkspaceRoot
	}
	req := runner.Request{Op: runner.OpRun, Call: job.Key, Spec: sandbox.RunnerSpec(job, workspace), Arguments: job.Arguments}
	ready := job.Dispatched.Add(p.Config.startTimeout())
	handed := false
	// Between looks the follower waits for the pod to change (PodChanged)
	// or for a poll that backs off, the safety net where no informer tells.
	// Once the pod has an address, the runner's listening is awaited: no
	// event marks it, so the poll restarts short.
	minPoll, maxPoll := p.pollBounds()
	backoff := minPoll
	addressed, sawRunning := false, false
	wait := func(most time.Duration) {
		t := time.NewTimer(min(backoff, most))
		defer t.Stop()
		select {
		case <-f.wake:
		case <-t.C:
			backoff = min(2*backoff, most)
		}
	}
	notReady := func() error {
		return pipeline.Fail(pipeline.CodeSandboxNotReady, fmt.Sprintf(
			"the tool's pod was not ready within %s of dispatch; the body never started", p.Config.startTimeout()))
	}
	for {
		pod := &corev1.Pod{}
		if err := p.Reader.Get(ctx, f.pod, pod); err != nil {
			if apierrors.IsNotFound(err) {
				f.err = pipeline.Fail(pipeline.CodeSandboxLost, "the tool's pod is gone")
				return
			}
			wait(maxPoll)
			continue
		}
		if pod.UID != f.uid {
			f.err = pipeline.Fail(pipeline.CodeSandboxLost, "the tool's pod was replaced by another of the same name")
			return
		}
		if fail := failureOf(pod); fail != nil {
			f.err = fail
			return
		}
		if terminated(pod) {
			f.err = pipeline.Fail(pipeline.CodeSandboxLost, "the tool's runner ended without a result")
			return
		}
		late := !handed && p.now().After(ready)
		up := running(pod)
		if pod.Status.PodIP == "" || (late && !up) {
			if late {
				f.err = notReady()
				return
			}
			wait(maxPoll)
			continue
		}
		// The runner listens before the kubelet reports its container
		// running (the kubelet reports at its next relist, up to a second
		// later): it is tried as soon as the pod has an address.
		if !addressed || (up && !sawRunning) {
			addressed, sawRunning, backoff = true, up, min(backoff, runningPoll)
		}
		if late {
			// Never start a body past the bound; collect one already started.
			req.Op = runner.OpCollect
		}
		hello, res, err := p.exchange(ctx, pod, req, job)
		if hello != nil && hello.State != runner.StateIdle {
			handed = true
		}
		switch {
		case err == nil:
			f.res = res
			return
		case errors.Is(err, runner.ErrRefused) && late && !handed:
			f.err = notReady()
			return
		case errors.Is(err, runner.ErrProtocol):
			f.err = pipeline.Fail(pipeline.CodeSandboxUnavailable, "the runner in the tool's pod is of another release ("+err.Error()+
				"): give the tool image the runner of the manager's release, or unset its runnerPath")
			return
		case errors.Is(err, runner.ErrRefused), errors.Is(err, runner.ErrForged):
			f.err = pipeline.Fail(pipeline.CodeSandboxLost, "the tool's result could not be verified: "+err.Error())
			return
		}
		// Not listening yet, or the connection broke: asked again, often
		// until the container is reported running.
		if up {
			wait(maxPoll)
		} else {
			wait(min(maxPoll, startingPoll))
		}
	}
}

// Poll bounds of a follower: the first wait, the longest, the first once
// the pod has an address or its runner's container runs, and the longest
// while the runner is tried before its container is reported running.
const (
	defaultMinPoll = 50 * time.Millisecond
	defaultMaxPoll = time.Second
	runningPoll    = 10 * time.Millisecond
	startingPoll   = 200 * time.Millisecond
)

func (p *Provider) pollBounds() (time.Duration, time.Duration) {
	if p.minPoll > 0 && p.maxPoll > 0 {
		return p.minPoll, p.maxPoll
	}
	return defaultMinPoll, defaultMaxPoll
}

// PodChanged tells the provider that a tool pod changed, so the follower
// of its attempt looks at once instead of at its next poll: a cold pod is
// handed its call as soon as its runner runs (polling alone found it up to
// a backed-off second late). The composition calls it from the manager's
// informer of tool pods; obj may be a deletion's final state.
func (p *Provider) PodChanged(obj any) {
	if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	key := client.ObjectKeyFromObject(pod)
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, f := range p.followers {
		if f.pod == key {
			select {
			case f.wake <- struct{}{}:
			default: // a wake is already pending
			}
		}
	}
}

// exchange is one connection to the pod's runner.
func (p *Provider) exchange(ctx context.Context, pod *corev1.Pod, req runner.Request, job sandbox.Job) (*runner.Hello, *runner.Result, error) {
	dial := p.Dial
	if dial == nil {
		d := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 15 * time.Second}
		dial = func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
	}
	conn, err := dial(ctx, net.JoinHostPort(pod.Status.PodIP, fmt.Sprint(runner.Port)))
	if err != nil {
		return nil, nil, err
	}
	defer func() { _ = conn.Close() }()
	var sub func(runner.SubCall) runner.SubResult
	if p.SubCalls != nil {
		sub = func(c runner.SubCall) runner.SubResult { return p.SubCalls(ctx, job, c) }
	}
	return runner.Exchange(conn, p.Key, req, sub)
}

func (p *Provider) now() time.Time {
	if p.Clock != nil {
		return p.Clock.Now()
	}
	return time.Now()
}

// running tells whether the tool container (the runner) has started.
func running(pod *corev1.Pod) bool {
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == containerTool && cs.State.Running != nil {
			return true
		}
	}
	return false
}

func isDone(f *follower) bool {
	select {
	case <-f.done:
		return true
	default:
		return false
	}
}

func terminated(pod *corev1.Pod) bool {
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == containerTool && cs.State.Terminated != nil {
			return true
		}
	}
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

// Release deletes every pod of the call and forgets their followers.
func (p *Provider) Release(ctx context.Context, owner types.NamespacedName, uid types.UID) (bool, error) {
	pods := &corev1.PodList{}
	if err := p.Client.List(ctx, pods, client.InNamespace(owner.Namespace), client.MatchingLabels{LabelSandbox: "true"}); err != nil {
		return false, err
	}
	left := 0
	for i := range pods.Items {
		pod := &pods.Items[i]
		if !metav1.IsControlledBy(pod, &metav1.ObjectMeta{UID: uid}) {
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
		p.mu.Lock()
		for key := range p.followers {
			if sandbox.OfCall(key, uid) {
				delete(p.followers, key)
			}
		}
		p.mu.Unlock()
	}
	return left == 0, nil
}

// Forget deletes a settled attempt's pod: one call per pod, then it is
// discarded.
func (p *Provider) Forget(key string) {
	p.mu.Lock()
	f, ok := p.followers[key]
	delete(p.followers, key)
	p.mu.Unlock()
	if ok {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: f.pod.Namespace, Name: f.pod.Name}}
		if err := client.IgnoreNotFound(p.Client.Delete(context.Background(), pod, client.GracePeriodSeconds(0))); err != nil {
			// The call's next reconcile releases what is left.
			log.Log.Error(err, "settled tool pod not deleted", "pod", pod.Name)
		}
	}
}
