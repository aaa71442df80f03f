package pod

import (
	"context"
	"crypto/ecdh"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/codes"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/providers/sandbox"
	"github.com/toolgate/toolgate/internal/runner"
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
	// Previous is the channel key before the last rotation (nil: none):
	// the pods made under it are still handed their calls, read and
	// recognised as toolgate's; no new pod is made under it.
	Previous *ecdh.PrivateKey
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

	mu sync.Mutex
	// attempts is what this process knows of each attempt's sandbox, by
	// attempt key (attempt.go).
	attempts map[string]*attempt
	// listings are the exchanges with listing pods' runners, by listing
	// key (list.go).
	listings map[string]*listing
	// listAttempts counts the pods a listing made that ended without an
	// answer, by listing key.
	listAttempts map[string]int
	warm         pools
	proxy        proxyCache
	// stopped is set by Stop: Run and Prepare then start nothing, and
	// life, which every follower runs under, is ended.
	stopped bool
	life    context.Context
	endLife context.CancelFunc
	// minPoll and maxPoll replace the followers' poll bounds, and
	// refillAfter refillDelay (tests).
	minPoll, maxPoll, refillAfter time.Duration
}

var _ sandbox.Provider = &Provider{}

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

// Where names the pod the attempt with key runs in, once this provider
// has started or adopted it ("" before, and after Discard).
func (p *Provider) Where(key string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch a := p.attempts[key]; a.phase() {
	case phasePrepared:
		return a.prepared.Name // not followed yet
	case phaseFollowed, phaseDone:
		return a.follower.pod.Name
	}
	return ""
}

var _ sandbox.Preparer = (*Provider)(nil)

// Run creates, adopts, polls or stops the attempt's pod, and names it
// (Result.Where) with every answer.
func (p *Provider) Run(ctx context.Context, job sandbox.Job) (sandbox.Result, error) {
	if p.isStopped() {
		return sandbox.Result{}, errStopped
	}
	res, err := p.run(ctx, job)
	res.Where = p.Where(job.Key)
	return res, err
}

// run answers one ask of the attempt's pod, in its order: a warm pod's
// claim still on its way, the pod's absence, a pod that is not the
// call's, the call's cancellation, and the pod's frame or failure.
func (p *Provider) run(ctx context.Context, job sandbox.Job) (sandbox.Result, error) {
	if len(job.Arguments) > MaxArguments {
		return sandbox.Result{}, pipeline.Fail(pipeline.CodeSandboxUnavailable, fmt.Sprintf("arguments larger than %d bytes cannot be passed to a pod", MaxArguments))
	}
	// API work must go on when the call is cancelled: stopping the pod is
	// exactly what cancellation needs.
	api := context.WithoutCancel(ctx)
	f := p.follower(job.Key)
	if err := p.claimPending(job.Key, f); err != nil {
		return sandbox.Result{}, err
	}
	pod, err := p.find(api, p.Reader, job, f)
	switch {
	case apierrors.IsNotFound(err):
		return p.absent(ctx, job, f)
	case err != nil:
		return sandbox.Result{}, sandbox.ErrPending // transient; asked again
	case !p.ours(pod, callOwner(job)):
		return sandbox.Result{}, p.foreign(api, job, f, pod)
	case ctx.Err() != nil:
		return sandbox.Result{}, p.stopping(ctx, job, pod)
	}
	return p.collect(api, job, pod)
}

// claimPending answers for an attempt whose warm pod's claim is not the
// call's yet (nil: it is, or there is none).
func (p *Provider) claimPending(key string, f *follower) error {
	c := p.claimOf(key)
	if c == nil || f == nil {
		return nil
	}
	select {
	case <-c.done:
		if c.err != nil && isDone(f) {
			// The warm pod never became the call's: nothing was handed
			// over, and the pod is not the call's to judge or stop.
			return f.err
		}
		return nil
	default:
		// Its claim is on its way: the pod is not the call's yet. The
		// follower hands the call over once it is, and its end wakes the
		// call.
		return sandbox.ErrPending
	}
}

// absent answers for an attempt that has no pod (any more): what its
// follower learned first, else a new pod, unless it was recorded and lost.
func (p *Provider) absent(ctx context.Context, job sandbox.Job, f *follower) (sandbox.Result, error) {
	switch {
	case f != nil && isDone(f) && f.res != nil && f.res.Code == codes.Timeout:
		// The runner's budget fired before the stop (the frame it sent
		// while its pod was being deleted says so): a timeout that came
		// first stays the outcome.
		return sandbox.Outcome(f.res.Header, f.res.Stdout, f.res.Stderr)
	case ctx.Err() != nil:
		// Never started, or stopped and now gone.
		return sandbox.Result{}, ctx.Err()
	case f != nil && isDone(f) && f.res != nil && (!stoppedWithPod(f.res) || p.seenOn(f) == nil):
		return sandbox.Outcome(f.res.Header, f.res.Stdout, f.res.Stderr)
	case f != nil && p.seenOn(f) != nil:
		// What the pod said before it went (an eviction) says more than
		// its absence.
		return sandbox.Result{}, p.seenOn(f)
	case f != nil && isDone(f) && f.err != nil:
		return sandbox.Result{}, f.err
	case f != nil:
		return sandbox.Result{}, pipeline.Fail(pipeline.CodeSandboxLost, "the tool's pod was deleted by someone else")
	case job.Resumed && !p.remaking(job.Key) && (job.Record == nil || job.Record.Where != ""):
		// Started by a previous manager, recorded, and gone: its outcome
		// is unknowable. Logged, since the call then ends interrupted (or
		// is run again) and the pod that would say why is gone. (A pod
		// never recorded was never handed the body: made again below.)
		log.FromContext(ctx).Info("attempt's pod not found on resume", "call", job.Owner.Name, "attempt", job.Attempt)
		return sandbox.Result{}, sandbox.ErrLost
	}
	return sandbox.Result{}, p.start(context.WithoutCancel(ctx), job, startFollowed)
}

// foreign answers for a pod under the attempt's name that is not the
// call's: never handed a call, never read (seal.go).
func (p *Provider) foreign(api context.Context, job sandbox.Job, f *follower, pod *corev1.Pod) error {
	switch {
	case !pod.DeletionTimestamp.IsZero():
		return sandbox.ErrPending // going (one whose seal failed); then gone
	case f != nil:
		// The pod this attempt follows was changed by someone else (its
		// owner reference taken away), or deleted and another made under
		// its name: the first is the attempt's own work, stopped; either
		// way its outcome cannot be trusted, and no pod is made again for
		// it.
		if pod.UID == f.uid {
			p.deleteExactly(api, client.ObjectKeyFromObject(pod), f.uid, "tampered")
		}
		return pipeline.Fail(pipeline.CodeSandboxLost, "the tool's pod was changed or replaced by someone else ("+pod.Name+")")
	case controlledBy(pod, callOwner(job)) && (!job.Resumed || neverSealed(pod)):
		// Created for this attempt by a manager that stopped before
		// sealing it, and no body was handed to it yet: made again. Also
		// when resuming, if the pod never carried a seal: only toolgate
		// may remove one (admission), so it was never sealed, and never
		// handed anything. A seal that does not verify (a key rotated
		// out, a copy) may have served: lost.
		p.deleteExactly(api, client.ObjectKeyFromObject(pod), pod.UID, "unsealed")
		p.mu.Lock()
		p.attemptLocked(job.Key).remade = true
		p.mu.Unlock()
		return sandbox.ErrPending
	case job.Resumed:
		return pipeline.Fail(pipeline.CodeSandboxLost, "the tool's pod was replaced by one toolgate did not create ("+pod.Name+")")
	}
	// Someone else's pod holds the attempt's name (a name is easy to
	// foresee): it is never handed anything, and the attempt's own pod is
	// made beside it (find finds it by its labels and seal).
	return p.start(api, job, startBeside)
}

// stopping stops the cancelled attempt's pod and reports the cancellation
// only once the pod is gone.
func (p *Provider) stopping(ctx context.Context, job sandbox.Job, pod *corev1.Pod) error {
	if pod.DeletionTimestamp.IsZero() {
		// A failure is retried: the attempt stays pending until the pod
		// is gone.
		if err := client.IgnoreNotFound(p.Client.Delete(context.WithoutCancel(ctx), pod, client.GracePeriodSeconds(5))); err != nil {
			log.FromContext(ctx).Error(err, "tool pod not stopped", "pod", pod.Name)
		}
	}
	p.adopt(job, pod)
	if stopped(pod) {
		return ctx.Err()
	}
	return sandbox.ErrPending
}

// collect follows the call's own pod: its frame once the follower has it,
// what the pod says when it can no longer give one, pending otherwise.
func (p *Provider) collect(api context.Context, job sandbox.Job, pod *corev1.Pod) (sandbox.Result, error) {
	f := p.adopt(job, pod)
	if r := job.Record; r != nil && r.Where == f.pod.Name {
		p.Recorded(job.Key, r.Where)
	}
	select {
	case <-f.done:
		// A timeout's frame is final too: the runner stopped the body at
		// its budget, and every process of the tool container's PID
		// namespace, before it sent it. The pod goes once the outcome is
		// durable (Discard, after the call's status write): deleted
		// before, a manager dying in between lost the outcome with the
		// pod (a kill storm ended such calls interrupted).
		if f.err != nil || stoppedWithPod(f.res) {
			if fail := failureOf(pod); fail != nil {
				return sandbox.Result{}, p.see(f, fail) // what the pod says now is the most precise
			}
		}
		if f.err != nil {
			return sandbox.Result{}, f.err
		}
		return sandbox.Outcome(f.res.Header, f.res.Stdout, f.res.Stderr)
	default:
	}
	if fail := failureOf(pod); fail != nil {
		return sandbox.Result{}, p.see(f, fail)
	}
	return sandbox.Result{}, sandbox.ErrPending
}

// remaking tells whether this process deleted the attempt's unsealed pod
// to make it again (the pipeline then asks as if resuming).
func (p *Provider) remaking(key string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	a := p.attempts[key]
	return a != nil && a.remade
}

// stoppedWithPod tells whether the runner's frame says the body died of
// its pod's stop: what the pod says (an eviction and its reason) is then
// the more precise outcome.
func stoppedWithPod(res *runner.Result) bool {
	return res != nil && res.Code == codes.SandboxLost
}

// see remembers the failure read on the attempt's pod and returns it.
func (p *Provider) see(f *follower, fail error) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	f.seen = fail
	return fail
}

// seenOn is the failure last read on f's pod, if any.
func (p *Provider) seenOn(f *follower) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return f.seen
}

// Prepare creates (or claims) the attempt's pod before its dispatch
// boundary is written. The pod holds nothing of the call, and nothing is
// handed to it until Run, which the pipeline calls only once the boundary
// is durable.
func (p *Provider) Prepare(ctx context.Context, job sandbox.Job) error {
	if p.isStopped() {
		return errStopped
	}
	api := context.WithoutCancel(ctx)
	if p.follower(job.Key) != nil {
		return nil
	}
	defer tracePrepare(p, job, time.Now())
	// From the cache: the attempt's own pod is there unless a manager
	// that stopped made it a moment ago. A pod the cache has not seen yet
	// is never handed anything (only the pod the boundary names is), and
	// goes with the call (Release); reading the API server instead put two
	// round trips before every dispatch.
	if _, err := p.find(api, p.Client, job, nil); !apierrors.IsNotFound(err) {
		return err // there already, or unknown: Run decides
	}
	if err := p.start(api, job, startPrepared); !errors.Is(err, sandbox.ErrPending) {
		return err
	}
	return nil
}

// find reads the attempt's pod: the one its follower f follows, else the
// pod of its deterministic name, else one of its own under another name (a
// warm pod it claimed, or one made beside a pod someone else made under
// its name), found after a restart. NotFound when it has none; someone
// else's pod under its name when that is all there is. It reads from the
// API server or the cache.
func (p *Provider) find(ctx context.Context, from client.Reader, job sandbox.Job, f *follower) (*corev1.Pod, error) {
	key := p.podKey(job)
	if f != nil {
		key = f.pod // a claimed warm pod has a name of its own
	} else if pod := p.preparedPod(job.Key); pod != nil {
		// Made or claimed by this process a moment ago, before the
		// boundary naming it: as fresh as a read, and one round trip
		// less on the way to the body.
		return pod, nil
	}
	pod := &corev1.Pod{}
	if f != nil && p.Client.Get(ctx, key, pod) == nil && pod.UID == f.uid && p.ours(pod, callOwner(job)) {
		// The cache shows the followed pod as the call's own: as good as
		// a read (the pod's events reconcile the call again), and a round
		// trip less between a body's end and its result.
		return pod, nil
	}
	pod = &corev1.Pod{}
	err := from.Get(ctx, key, pod)
	switch {
	case f != nil:
		return pod, err
	case err == nil && (p.sealed(pod) || controlledBy(pod, callOwner(job))):
		return pod, nil
	case err != nil && !apierrors.IsNotFound(err):
		return nil, err
	}
	claimed, cerr := p.claimed(ctx, from, job)
	switch {
	case cerr != nil:
		return nil, cerr // transient; asked again
	case claimed != nil:
		return claimed, nil
	case err == nil:
		return pod, nil // someone else's: Run decides
	}
	if from == p.Reader {
		if claimed, cerr = p.claimRecorded(ctx, job); cerr != nil || claimed != nil {
			return claimed, cerr
		}
	}
	return nil, err
}

// preparedPod is a copy of the pod Prepare made or claimed for the
// attempt with key, as the API server answered that write; nil if none.
func (p *Provider) preparedPod(key string) *corev1.Pod {
	p.mu.Lock()
	defer p.mu.Unlock()
	if a := p.attempts[key]; a.phase() == phasePrepared {
		return a.prepared.DeepCopy()
	}
	return nil
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

// startMode is how start gives an attempt its pod.
type startMode int

const (
	// startPrepared: ahead of the attempt's dispatch boundary (Prepare);
	// the pod is followed, and handed the call, only once Run asks.
	startPrepared startMode = iota
	// startFollowed: followed at once; the call is handed to the pod once
	// it listens (and is recorded).
	startFollowed
	// startBeside: as startFollowed, under a generated name, beside a pod
	// someone else made under the attempt's name.
	startBeside
)

// start gives the attempt a pod: a warm one of its session if one is
// ready, else a new one; either way the session's pool is replenished.
func (p *Provider) start(ctx context.Context, job sandbox.Job, mode startMode) error {
	if p.Key == nil {
		return pipeline.Fail(pipeline.CodeSandboxUnavailable, "the pod sandbox has no channel key")
	}
	key := p.podKey(job)
	pod, err := p.buildPod(job, key.Name)
	if err != nil {
		// Nothing ran: a definite failure.
		return pipeline.Fail(pipeline.CodeSandboxUnavailable, "the tool's pod cannot be built: "+err.Error())
	}
	if err := p.ensureNetworkPolicies(ctx, key.Namespace, EgressKind(job.Tool, job.Policy)); err != nil {
		return err
	}
	template := templateOf(pod)
	if warm, c := p.reserve(ctx, job, template); warm != nil {
		warmClaims.WithLabelValues("hit").Inc()
		p.claimInBackground(job, warm.DeepCopy(), c)
		// What the pod is once claimed: the hand-over waits for the claim.
		p.applyClaim(warm, job)
		if mode == startPrepared {
			// Prepared ahead of the boundary: the runner is greeted while
			// the boundary and the claim are written.
			p.greetEarly(job.Key, warm)
		}
		p.made(job, warm, mode)
		p.replenishAfter(job, template)
		return sandbox.ErrPending
	} else if job.Session.WarmPods > 0 {
		warmClaims.WithLabelValues("miss").Inc()
	}
	// A pool without a pod to give is filled at once.
	defer p.replenish(job, template)
	pod.Labels[toolgatev1alpha1.LabelCallUID] = string(job.OwnerUID)
	pod.OwnerReferences = []metav1.OwnerReference{callOwner(job)}
	if mode == startBeside {
		pod.Name, pod.GenerateName = "", pod.Name+"-"
	}
	if err := p.Client.Create(ctx, pod); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return sandbox.ErrPending // adopted on the next poll, if it is toolgate's
		}
		// No pod exists, so nothing ran: a definite failure, never a
		// phantom attempt that a later poll would report lost.
		return pipeline.Fail(pipeline.CodeSandboxUnavailable, "the tool's pod could not be created: "+err.Error())
	}
	podsCreated.WithLabelValues("cold").Inc()
	if err := p.sealCreated(ctx, pod); err != nil {
		return sandbox.ErrPending // the next poll waits for it to go and creates another
	}
	p.made(job, pod, mode)
	return sandbox.ErrPending
}

// made records the attempt's new pod: followed at once, or (prepared)
// named for Release until Run follows it.
func (p *Provider) made(job sandbox.Job, pod *corev1.Pod, mode startMode) {
	if mode != startPrepared {
		p.adopt(job, pod)
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.attemptLocked(job.Key).prepared = pod
}

func (p *Provider) now() time.Time {
	if p.Clock != nil {
		return p.Clock.Now()
	}
	return time.Now()
}
