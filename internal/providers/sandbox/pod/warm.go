package pod

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/providers/sandbox"
	"github.com/toolgate/toolgate/internal/textutil"
)

// Warm pods. A warm pod is a tool pod started before any call needs it:
// the pod a call of its session would get (same image, policy, workspace
// mount and sandbox mode, hence the same template), holding no call,
// controlled by the AgentSession. A call dispatched in that session claims
// one (the claim moves its control to the ToolCall, atomically: one
// winner), hands it the call over the channel like any other pod, and the
// provider starts a replacement. Each warm pod still serves exactly one
// call. Pools are per session and template, learned from the calls made;
// a session's pools go once it made no call for WarmIdle.
const (
	// WarmIdle is how long a session's warm pods are kept after its last
	// call.
	WarmIdle = 5 * time.Minute
	// warmMaxAge is the oldest a warm pod may be to be claimed; older ones
	// are replaced (a pod's active deadline runs from its start).
	warmMaxAge = 10 * time.Minute
	// warmSweep is how often pools are aged and idle ones released.
	warmSweep = 30 * time.Second
)

// pool is the warm pods of one session and template.
type pool struct {
	job      sandbox.Job // the latest call of this template: how to build its pods
	template string
	size     int
	lastUse  time.Time
	creating bool
}

type pools struct {
	mu    sync.Mutex
	byKey map[string]*pool
	// refills are the replacements of claimed warm pods not started yet,
	// by the claiming attempt's key (replenishAfter).
	refills map[string]*refill
	started bool
	stopped bool
	stop    chan struct{}
	done    chan struct{}
	poke    chan struct{} // a sweep now (pokeSweeper)
	fills   sync.WaitGroup
}

func poolKey(session types.NamespacedName, template string) string {
	return session.String() + "/" + template
}

// poolLabels are the labels of the warm pods of job's session and
// template: how the pool is listed, and spread over nodes.
func poolLabels(job sandbox.Job, template string) map[string]string {
	return map[string]string{
		toolgatev1alpha1.LabelWarm: "true", toolgatev1alpha1.LabelSession: textutil.LabelValue(job.Session.Name), toolgatev1alpha1.LabelTemplate: template,
	}
}

// templateOf is the hash of what makes two tool pods interchangeable: the
// spec (without the active deadline and the spread over nodes, which only
// warm pods have) and the egress label the network policies select on.
func templateOf(pod *corev1.Pod) string {
	spec := pod.Spec.DeepCopy()
	spec.ActiveDeadlineSeconds = nil
	spec.TopologySpreadConstraints = nil
	b, _ := json.Marshal(struct {
		Spec   *corev1.PodSpec
		Egress string
	}{spec, pod.Labels[toolgatev1alpha1.LabelEgress]})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])[:16]
}

// Claims. A warm pod is the attempt's once this process reserves it: in
// memory (never given to two attempts here) and not named by another
// unsettled call's durable record (job.Record.Taken: a manager that stopped may
// have recorded one it had not finished taking). The claim itself, one
// optimistic-locked write moving the pod's control to the ToolCall, runs
// beside the write of the dispatch boundary that names the pod, not
// before it; the body is handed over only once both are durable. A
// successor that finds the boundary naming a pod still the session's
// finishes the claim (claimRecorded).

// pendingClaim is a claim on its way: done closes once it is durable or
// failed (err).
type pendingClaim struct {
	pod  types.UID
	done chan struct{}
	err  error
}

// reserve picks a warm pod of the job's session and template for the
// job's attempt and reserves it, or returns nil. Only a pod toolgate made
// for the session (its seal and owner reference: seal.go) that is running,
// young enough and not being deleted is taken.
func (p *Provider) reserve(ctx context.Context, job sandbox.Job, template string) (*corev1.Pod, *pendingClaim) {
	if !job.Session.Warm() {
		return nil, nil
	}
	list := &corev1.PodList{}
	if err := p.Client.List(ctx, list, client.InNamespace(job.Owner.Namespace), client.MatchingLabels(poolLabels(job, template))); err != nil {
		return nil, nil
	}
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := range list.Items {
		pod := &list.Items[i]
		if !claimable(pod, now) || !p.ours(pod, sessionOwner(job)) || (job.Record != nil && slices.Contains(job.Record.Taken, pod.Name)) || p.reservedLocked(pod.UID) {
			continue
		}
		c := &pendingClaim{pod: pod.UID, done: make(chan struct{})}
		p.attemptLocked(job.Key).claim = c
		return pod.DeepCopy(), c
	}
	return nil, nil
}

// claimable reports whether a warm pod can serve a call now.
func claimable(pod *corev1.Pod, now time.Time) bool {
	return pod.DeletionTimestamp.IsZero() && pod.Status.PodIP != "" && running(pod) && !terminated(pod) &&
		now.Sub(pod.CreationTimestamp.Time) <= warmMaxAge
}

// reservedLocked reports whether an attempt of this process holds the
// pod (p.mu held).
func (p *Provider) reservedLocked(uid types.UID) bool {
	for _, a := range p.attempts {
		if a.claim != nil && a.claim.pod == uid {
			return true
		}
	}
	return false
}

// claimInBackground writes the claim of the pod reserved with c beside
// the dispatch boundary; the attempt's follower waits for it (claimOf).
func (p *Provider) claimInBackground(job sandbox.Job, pod *corev1.Pod, c *pendingClaim) {
	p.warm.fills.Add(1) // Stop waits for it
	go func() {
		defer p.warm.fills.Done()
		start := time.Now()
		_, c.err = p.takeOver(context.Background(), job, pod)
		traceClaim(job, pod, start, c.err)
		if c.err != nil {
			log.Log.Info("warm pod not claimed", "call", job.Owner.Name, "pod", pod.Name, "reason", c.err.Error())
		}
		close(c.done)
	}()
}

// claimOf is the claim of the attempt with key, nil when it has none on
// its way or done.
func (p *Provider) claimOf(key string) *pendingClaim {
	p.mu.Lock()
	defer p.mu.Unlock()
	if a := p.attempts[key]; a != nil {
		return a.claim
	}
	return nil
}

// takeOver moves a warm pod of the job's session to the job's attempt:
// its control to the ToolCall, the call's name in its annotations. The write is
// optimistic-locked; a conflict (the kubelet writes the pod's status) is
// retried on the pod as read again, as long as it is still the session's
// own warm pod and can serve.
func (p *Provider) takeOver(ctx context.Context, job sandbox.Job, pod *corev1.Pod) (*corev1.Pod, error) {
	for try := 0; ; try++ {
		base := pod.DeepCopy()
		p.applyClaim(pod, job)
		err := p.Client.Patch(ctx, pod, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
		if err == nil {
			return pod, nil
		}
		if !apierrors.IsConflict(err) || try >= 5 {
			return nil, err
		}
		uid := base.UID
		pod = &corev1.Pod{}
		if err := p.Reader.Get(ctx, client.ObjectKeyFromObject(base), pod); err != nil {
			return nil, err
		}
		if pod.UID != uid || !toolgatev1alpha1.WarmWaiting(pod) || !claimable(pod, p.now()) || !p.ours(pod, sessionOwner(job)) {
			return nil, fmt.Errorf("warm pod %s changed meanwhile: no longer the session's, or unable to serve", base.Name)
		}
	}
}

// applyClaim makes pod, a warm pod, the job's attempt's: its control
// moves to the ToolCall, and its annotations name the call. Its labels
// stay as they are: a pod's label change makes the node's policy engine
// resync every chain (kube-router), or gives the pod a new identity
// (Cilium), on the warm call's path.
func (p *Provider) applyClaim(pod *corev1.Pod, job sandbox.Job) {
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[toolgatev1alpha1.LabelCall] = job.Owner.Name
	pod.Annotations[toolgatev1alpha1.LabelCallUID] = string(job.OwnerUID)
	pod.Annotations[toolgatev1alpha1.LabelAttempt] = fmt.Sprint(job.Attempt)
	pod.Annotations[toolgatev1alpha1.AnnotationClaimed] = p.now().UTC().Format(time.RFC3339Nano)
	pod.OwnerReferences = []metav1.OwnerReference{callOwner(job)}
}

// claimRecorded finishes the claim of the pod the attempt's durable
// boundary names, when it is still the session's warm pod: its claim was
// on its way when the manager that wrote the boundary stopped, and no
// body was handed to it (the hand-over waits for the claim). nil when the
// boundary names no such pod.
func (p *Provider) claimRecorded(ctx context.Context, job sandbox.Job) (*corev1.Pod, error) {
	if job.Record == nil || job.Record.Where == "" || job.Session.WarmPods <= 0 {
		return nil, nil
	}
	pod := &corev1.Pod{}
	if err := p.Reader.Get(ctx, types.NamespacedName{Namespace: job.Owner.Namespace, Name: job.Record.Where}, pod); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	if !toolgatev1alpha1.WarmWaiting(pod) || !p.ours(pod, sessionOwner(job)) || !claimable(pod, p.now()) {
		return nil, nil
	}
	return p.takeOver(ctx, job, pod)
}

// claimed finds the pod an attempt claimed (by this process or a previous
// one), or nil; the one the call's status names where it names one (a
// manager that stopped between a claim and its boundary may have left
// another, which is never handed anything).
func (p *Provider) claimed(ctx context.Context, from client.Reader, job sandbox.Job) (*corev1.Pod, error) {
	list := &corev1.PodList{}
	if err := from.List(ctx, list, client.InNamespace(job.Owner.Namespace), client.MatchingLabels{
		toolgatev1alpha1.LabelCallUID: string(job.OwnerUID), toolgatev1alpha1.LabelAttempt: fmt.Sprint(job.Attempt),
	}); err != nil {
		return nil, err
	}
	if job.Session.Warm() {
		// A claimed warm pod keeps the labels of its pool, and names its
		// call in its annotations.
		warm := &corev1.PodList{}
		if err := from.List(ctx, warm, client.InNamespace(job.Owner.Namespace), client.MatchingLabels{
			toolgatev1alpha1.LabelWarm: "true", toolgatev1alpha1.LabelSession: textutil.LabelValue(job.Session.Name),
		}); err != nil {
			return nil, err
		}
		for _, pod := range warm.Items {
			if _, uid, attempt := toolgatev1alpha1.PodCall(&pod); uid == string(job.OwnerUID) && attempt == fmt.Sprint(job.Attempt) {
				list.Items = append(list.Items, pod)
			}
		}
	}
	var found *corev1.Pod
	for i := range list.Items {
		if pod := &list.Items[i]; p.ours(pod, callOwner(job)) && (found == nil || pod.Name == recordedWhere(job)) {
			found = pod
		}
	}
	return found, nil
}

// callOwner and sessionOwner are the owner references toolgate writes on
// a call's pod and on a session's warm pod.
func callOwner(job sandbox.Job) metav1.OwnerReference {
	return metav1.OwnerReference{
		APIVersion: toolgatev1alpha1.GroupVersion.String(), Kind: "ToolCall", Name: job.Owner.Name, UID: job.OwnerUID,
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
	}
}

func sessionOwner(job sandbox.Job) metav1.OwnerReference {
	return metav1.OwnerReference{
		APIVersion: toolgatev1alpha1.GroupVersion.String(), Kind: "AgentSession", Name: job.Session.Name, UID: job.Session.UID,
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
	}
}

// refillDelay is how long the replacement of a claimed warm pod waits
// for its call to settle before it starts anyway.
const refillDelay = time.Second

// refill is a replacement put off (replenishAfter).
type refill struct {
	job      sandbox.Job
	template string
	timer    *time.Timer
}

// replenishAfter replenishes the job's pool once its call settles
// (Discard, Release) or after refillDelay, whichever comes first: a pod
// starting on the node (its sandbox, network rules and containers) takes
// the CPU a warm call's own few milliseconds need on a small node, and a
// replacement is rarely needed before the call that emptied the pool
// ends.
func (p *Provider) replenishAfter(job sandbox.Job, template string) {
	if !job.Session.Warm() {
		return
	}
	p.warm.mu.Lock()
	defer p.warm.mu.Unlock()
	if p.warm.refills == nil {
		p.warm.refills = map[string]*refill{}
	}
	if _, ok := p.warm.refills[job.Key]; ok || p.warm.stopped {
		return
	}
	r := &refill{job: job, template: template}
	delay := refillDelay
	if p.refillAfter > 0 {
		delay = p.refillAfter
	}
	r.timer = time.AfterFunc(delay, func() { p.refillNow(func(key string) bool { return key == job.Key }) })
	p.warm.refills[job.Key] = r
}

// refillNow starts the replacements put off for the attempts whose key
// matches, if they have not started yet.
func (p *Provider) refillNow(matches func(key string) bool) {
	p.warm.mu.Lock()
	var due []*refill
	for key, r := range p.warm.refills {
		if matches(key) {
			r.timer.Stop()
			delete(p.warm.refills, key)
			due = append(due, r)
		}
	}
	p.warm.mu.Unlock()
	for _, r := range due {
		p.replenish(r.job, r.template)
	}
}

// replenish records that the job's session used template now, and starts
// warm pods until the pool holds its size. It runs beside the call, never
// in its way: a failure only means the next call starts cold.
func (p *Provider) replenish(job sandbox.Job, template string) {
	if !job.Session.Warm() {
		return
	}
	p.warm.mu.Lock()
	if p.warm.stopped {
		p.warm.mu.Unlock()
		return
	}
	p.startSweeper()
	if p.warm.byKey == nil {
		p.warm.byKey = map[string]*pool{}
	}
	key := poolKey(job.Session.NamespacedName, template)
	pl := p.warm.byKey[key]
	if pl == nil {
		pl = &pool{template: template}
		p.warm.byKey[key] = pl
	}
	pl.job, pl.size, pl.lastUse = job, job.Session.WarmPods, p.now()
	if pl.creating {
		p.warm.mu.Unlock()
		return
	}
	pl.creating = true
	p.warm.fills.Add(1)
	p.warm.mu.Unlock()
	go func() {
		defer p.warm.fills.Done()
		defer func() {
			p.warm.mu.Lock()
			pl.creating = false
			p.warm.mu.Unlock()
		}()
		if err := p.fill(context.Background(), job, template, job.Session.WarmPods); err != nil {
			log.Log.Error(err, "warm pods not started", "session", job.Session.Name)
		}
	}()
}

// fill starts warm pods of template until size are waiting (counted from
// the API server itself: the cache may not have seen the last ones).
func (p *Provider) fill(ctx context.Context, job sandbox.Job, template string, size int) error {
	list := &corev1.PodList{}
	if err := p.Reader.List(ctx, list, client.InNamespace(job.Owner.Namespace), client.MatchingLabels(poolLabels(job, template))); err != nil {
		return err
	}
	have := 0
	for i := range list.Items {
		pod := &list.Items[i]
		if pod.DeletionTimestamp.IsZero() && !terminated(pod) && p.now().Sub(pod.CreationTimestamp.Time) <= warmMaxAge && p.ours(pod, sessionOwner(job)) {
			have++
		}
	}
	for ; have < size; have++ {
		pod, err := p.warmPod(job, template)
		if err != nil {
			return err
		}
		if err := p.Client.Create(ctx, pod); err != nil {
			return err
		}
		podsCreated.WithLabelValues("warm").Inc()
		if err := p.sealCreated(ctx, pod); err != nil {
			return err
		}
	}
	return nil
}

// warmPod is the pod a call of job's kind would get, holding no call,
// controlled by the session.
func (p *Provider) warmPod(job sandbox.Job, template string) (*corev1.Pod, error) {
	pod, err := p.buildPod(job, "")
	if err != nil {
		return nil, err
	}
	if got := templateOf(pod); got != template {
		return nil, fmt.Errorf("warm pod template %s, want %s", got, template)
	}
	prefix := job.Session.Name
	if len(prefix) > 40 {
		prefix = prefix[:40]
	}
	pod.GenerateName = prefix + "-warm-"
	delete(pod.Labels, toolgatev1alpha1.LabelCall)
	delete(pod.Labels, toolgatev1alpha1.LabelAttempt)
	maps.Copy(pod.Labels, poolLabels(job, template))
	// A warm pod may wait up to warmMaxAge before its call starts.
	pod.Spec.ActiveDeadlineSeconds = ptr.To(*pod.Spec.ActiveDeadlineSeconds + int64(warmMaxAge.Seconds()))
	pod.OwnerReferences = []metav1.OwnerReference{sessionOwner(job)}
	// A pool is spread over the nodes where it can be: one node lost or
	// drained leaves the session warm pods on the others. Best effort (a
	// workspace only one node mounts keeps them all there).
	pod.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{
		MaxSkew: 1, TopologyKey: corev1.LabelHostname, WhenUnsatisfiable: corev1.ScheduleAnyway,
		LabelSelector: &metav1.LabelSelector{MatchLabels: poolLabels(job, template)},
	}}
	return pod, nil
}

// waiting reports whether a warm pod waits for a call: unclaimed, and
// controlled by an AgentSession (a claim moves the controller to the
// ToolCall, whatever its annotations say).
func waiting(pod *corev1.Pod) bool {
	ref := metav1.GetControllerOfNoCopy(pod)
	return toolgatev1alpha1.WarmWaiting(pod) && ref != nil && ref.Kind == "AgentSession" &&
		ref.APIVersion == toolgatev1alpha1.GroupVersion.String()
}

// ended reports whether a pod's runner can no longer serve: its container
// ended, or the pod did.
func ended(pod *corev1.Pod) bool {
	return terminated(pod) || pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded
}

// recordedWhere is where the call's durable record says the attempt runs
// ("" when it keeps none, or names nothing yet).
func recordedWhere(job sandbox.Job) string {
	if job.Record == nil {
		return ""
	}
	return job.Record.Where
}
