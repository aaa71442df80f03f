package pod

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/providers/sandbox"
	"github.com/toolgate/toolgate/internal/runner"
)

type follower struct {
	pod  types.NamespacedName
	uid  types.UID
	done chan struct{}
	wake chan struct{} // the pod changed (PodChanged): look again now
	res  *runner.Result
	err  error // a final answer (a pipeline failure)
	// seen is the failure Run last read on the pod itself (guarded by
	// the provider's mu): it stays the answer once the pod is gone.
	seen error
	// recorded: the call's durable status names this pod (or the caller
	// keeps no record): the body may be handed to it (guarded by mu).
	recorded bool
}

// Recorded implements sandbox.Preparer's Recorded: the attempt's pod named where is
// durably recorded, and may be handed its body.
func (p *Provider) Recorded(key, where string) {
	p.mu.Lock()
	f := p.followerLocked(key)
	ready := f != nil && !f.recorded && f.pod.Name == where
	if ready {
		f.recorded = true
	}
	p.mu.Unlock()
	if ready {
		select {
		case f.wake <- struct{}{}:
		default:
		}
	}
}

// isRecorded tells whether f's pod may be handed its body.
func (p *Provider) isRecorded(f *follower) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return f.recorded
}

func (p *Provider) follower(key string) *follower {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.followerLocked(key)
}

// followerLocked is the follower of the attempt with key, nil when none
// (p.mu held).
func (p *Provider) followerLocked(key string) *follower {
	if a := p.attempts[key]; a != nil {
		return a.follower
	}
	return nil
}

// adopt returns the attempt's follower, starting one for a pod this
// process has not followed yet (after a restart, the adopted pod's).
func (p *Provider) adopt(job sandbox.Job, pod *corev1.Pod) *follower {
	p.mu.Lock()
	defer p.mu.Unlock()
	a := p.attemptLocked(job.Key)
	if a.follower != nil {
		return a.follower
	}
	a.prepared = nil // followed from now on
	f := &follower{pod: client.ObjectKeyFromObject(pod), uid: pod.UID, done: make(chan struct{}), wake: make(chan struct{}, 1),
		recorded: job.Record == nil || job.Record.Where == pod.Name}
	a.follower = f
	go p.follow(f, job, pod.DeepCopy())
	return f
}

// follow hands the call to the pod's runner once it listens, or collects
// the call handed over before (by this process or a previous one), until
// the frame arrives or the pod can no longer give one. first is the pod as
// its adopter just read or wrote it: the first look, without a read.
func (p *Provider) follow(f *follower, job sandbox.Job, first *corev1.Pod) {
	defer func() {
		close(f.done)
		if p.Notify != nil {
			p.Notify(job.Owner)
		}
	}()
	l := p.newLooks(f, job)
	if f.err = l.awaitClaim(); f.err != nil {
		return
	}
	for {
		if l.ctx.Err() != nil {
			f.err = errStopped
			return
		}
		pod, err := first, error(nil)
		first = nil
		if pod == nil { // looks after the first read the pod
			pod = &corev1.Pod{}
			err = p.Reader.Get(l.ctx, f.pod, pod)
		}
		res, most, final := l.look(pod, err)
		if most == 0 { // the look's answer is final: the frame, or why none
			f.res, f.err = res, final
			return
		}
		l.wait(most)
	}
}

// looks is what a follower carries from one look at its pod to the next.
type looks struct {
	p   *Provider
	f   *follower
	job sandbox.Job
	// ctx is the provider's life: ended by Stop, nothing of the provider
	// outlives its scope (the pod stays, for a successor to adopt).
	ctx context.Context
	req runner.Request
	// handed: the runner has the call (its greeting said it is not idle);
	// proxied: the request carries the egress proxy's grant.
	handed, proxied bool
	// addressed and sawRunning: the pod had an address, and its runner's
	// container was reported running, at a look before.
	addressed, sawRunning bool
	// Between looks the follower waits for the pod to change (PodChanged)
	// or for a poll that backs off, the safety net where no informer
	// tells. Once the pod has an address, the runner's listening is
	// awaited: no event marks it, so the poll restarts short.
	backoff, maxPoll time.Duration
	endSeen          time.Time // when the runner's container was first seen ended
}

func (p *Provider) newLooks(f *follower, job sandbox.Job) *looks {
	workspace := ""
	if job.Session.ClaimName != "" {
		workspace = job.Policy.WorkspaceRoot
	}
	minPoll, maxPoll := p.pollBounds()
	return &looks{p: p, f: f, job: job, ctx: p.lifeContext(), backoff: minPoll, maxPoll: maxPoll,
		req: runner.Request{Op: runner.OpRun, Call: job.Key, Spec: sandbox.RunnerSpec(job, workspace), Arguments: job.Arguments}}
}

// wait waits for the pod to change, the poll (at most most), or the
// provider's end.
func (l *looks) wait(most time.Duration) {
	t := time.NewTimer(min(l.backoff, most))
	defer t.Stop()
	select {
	case <-l.f.wake:
	case <-t.C:
		l.backoff = min(2*l.backoff, most)
	case <-l.ctx.Done():
	}
}

// awaitClaim waits for a warm pod's claim: its pod is handed its call
// only once the claim is durable.
func (l *looks) awaitClaim() error {
	c := l.p.claimOf(l.job.Key)
	if c == nil {
		return nil
	}
	select {
	case <-c.done:
	case <-l.ctx.Done():
		return errStopped
	}
	if c.err != nil {
		return pipeline.Fail(pipeline.CodeSandboxLost, "the warm pod reserved for the call could not be claimed (changed or deleted by someone else); the body never started")
	}
	return nil
}

// look judges the pod as just read (err: the read's): the frame or a
// final failure (and no wait), or how long at most to wait for the next
// look (never 0).
func (l *looks) look(pod *corev1.Pod, err error) (*runner.Result, time.Duration, error) {
	p, job := l.p, l.job
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil, 0, pipeline.Fail(pipeline.CodeSandboxLost, "the tool's pod is gone")
		}
		return nil, l.maxPoll, nil
	}
	if pod.UID != l.f.uid {
		return nil, 0, pipeline.Fail(pipeline.CodeSandboxLost, "the tool's pod was replaced by another of the same name")
	}
	if fail := failureOf(pod); fail != nil {
		return nil, 0, fail
	}
	if terminated(pod) {
		// The kubelet reports the runner's container ended before it
		// gives the pod its phase and reason (an eviction's): those are
		// awaited a little, so that the outcome names the cause.
		if l.endSeen.IsZero() {
			l.endSeen = time.Now()
		}
		if !final(pod) && time.Since(l.endSeen) < finalWait {
			return nil, l.maxPoll, nil
		}
		return nil, 0, pipeline.Fail(pipeline.CodeSandboxLost, "the tool's runner ended without a result")
	}
	// Judged on the pod's own record, never on when a manager looked: a
	// pod up by its bound met it, however late a manager (one that was
	// not leading, or restarting) comes to hand it the call.
	ready := p.startBound(job, pod)
	late := !l.handed && p.now().After(ready) && !upBy(pod, ready)
	up := running(pod)
	if pod.Status.PodIP == "" || (late && !up) {
		if late {
			return nil, 0, l.notReady(pod)
		}
		return nil, l.maxPoll, nil
	}
	// The runner listens before the kubelet reports its container running
	// (the kubelet reports at its next relist, up to a second later): it
	// is tried as soon as the pod has an address.
	if !l.addressed || (up && !l.sawRunning) {
		l.addressed, l.sawRunning, l.backoff = true, up, min(l.backoff, runningPoll)
	}
	// Never start a body past the bound, nor one the pod's active deadline
	// would cut short; collect one already started.
	noRoom := !l.handed && !late && p.now().After(ready) && !p.roomFor(pod, job)
	if late || noRoom {
		l.req.Op = runner.OpCollect
	}
	// The body is handed only to a pod the call's status names: a
	// successor that finds no pod where the status names none knows that
	// nothing ran, and makes it again.
	if l.req.Op == runner.OpRun && !l.handed && !p.isRecorded(l.f) {
		return nil, l.maxPoll, nil
	}
	noProxy := l.grant(pod)
	hello, res, err := p.exchangeWatching(l.ctx, l.f, pod, l.req, job)
	if noProxy != nil {
		if hello != nil && hello.State == runner.StateIdle {
			return nil, 0, noProxy
		}
		l.req.Op = runner.OpRun
	}
	if hello != nil && hello.State != runner.StateIdle {
		l.handed = true
	}
	switch {
	case err == nil:
		traceBody(job, pod, res)
		return res, 0, nil
	case errors.Is(err, runner.ErrRefused) && late && !l.handed:
		return nil, 0, l.notReady(pod)
	case errors.Is(err, runner.ErrRefused) && noRoom && !l.handed:
		return nil, 0, pipeline.Fail(pipeline.CodeManagerUnavailable,
			"the tool's pod was ready in time, but no manager handed it the call while its deadline left the body its timeout; the body never started")
	case errors.Is(err, runner.ErrProtocol):
		return nil, 0, pipeline.Fail(pipeline.CodeSandboxUnavailable, "the runner in the tool's pod is of another release ("+err.Error()+
			"): give the tool image the runner of the manager's release, or unset its runnerPath")
	case errors.Is(err, runner.ErrRefused), errors.Is(err, runner.ErrForged):
		return nil, 0, pipeline.Fail(pipeline.CodeSandboxLost, "the tool's result could not be verified: "+err.Error())
	}
	// Not listening yet, or the connection broke: asked again, often
	// until the container is reported running.
	if up {
		return nil, l.maxPoll, nil
	}
	return nil, min(l.maxPoll, startingPoll), nil
}

// grant gives a tool naming its hosts its proxy and grant with the call:
// the grant names the pod's address, known only now. Without them (the
// error) the body is not started, and this look only collects one already
// started (a manager resuming).
func (l *looks) grant(pod *corev1.Pod) error {
	if l.req.Op != runner.OpRun || l.job.Tool.Egress == nil || l.proxied {
		return nil
	}
	env, proxy, err := l.p.egressEnv(l.ctx, l.job, pod)
	if err != nil {
		l.req.Op = runner.OpCollect
		return err
	}
	l.req.Spec.Await = proxy
	l.req.Spec.Env = maps.Clone(l.req.Spec.Env)
	if l.req.Spec.Env == nil {
		l.req.Spec.Env = map[string]string{}
	}
	maps.Copy(l.req.Spec.Env, env)
	l.proxied = true
	return nil
}

// notReady is the failure of a pod not up by its start bound: what it
// waited for, when the pod says.
func (l *looks) notReady(pod *corev1.Pod) error {
	why := ""
	if w := whyNotUp(pod); w != "" {
		why = ": " + w
	}
	return pipeline.Fail(pipeline.CodeSandboxNotReady, fmt.Sprintf(
		"the tool's pod was not ready within %s of dispatch%s; the body never started", l.p.Config.startTimeout(), why))
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
	if unschedulable(pod) && !waiting(pod) {
		p.pokeSweeper() // waiting warm pods give it their room
	}
	key := client.ObjectKeyFromObject(pod)
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, a := range p.attempts {
		if f := a.follower; f != nil && f.pod == key {
			select {
			case f.wake <- struct{}{}:
			default: // a wake is already pending
			}
		}
	}
}

// exchangeWatching is exchange, cut short once the pod changes into one
// that can no longer give a frame (failureOf), or is gone: a pod on a lost
// node is evicted by the cluster while the connection to it would hang
// until TCP gives up, minutes later. A change that ends nothing is handed
// back to the follower's next wait (a cold pod's runner starting).
func (p *Provider) exchangeWatching(ctx context.Context, f *follower, pod *corev1.Pod, req runner.Request, job sandbox.Job) (*runner.Hello, *runner.Result, error) {
	ctx, cancel := context.WithCancel(ctx)
	woke := make(chan bool, 1)
	go func() {
		changed := false
		defer func() { woke <- changed }()
		for {
			select {
			case <-ctx.Done():
				return
			case <-f.wake:
			}
			now := &corev1.Pod{}
			err := p.Reader.Get(ctx, f.pod, now)
			if apierrors.IsNotFound(err) || (err == nil && (now.UID != f.uid || failureOf(now) != nil)) {
				cancel() // the follower's next look says why
				return
			}
			changed = true
		}
	}()
	hello, res, err := p.exchange(ctx, pod, req, job)
	cancel()
	if <-woke {
		select {
		case f.wake <- struct{}{}:
		default:
		}
	}
	return hello, res, err
}

// exchange is one connection to the pod's runner, closed when ctx ends:
// the one greeted ahead of the hand-over if there is one, else a new one.
func (p *Provider) exchange(ctx context.Context, pod *corev1.Pod, req runner.Request, job sandbox.Job) (*runner.Hello, *runner.Result, error) {
	g := p.takeGreeted(ctx, job.Key, pod)
	if g == nil {
		conn, err := p.dialer()(ctx, runnerAddr(pod))
		if err != nil {
			return nil, nil, err
		}
		if g, err = runner.Greet(conn, p.keyOf(pod)); err != nil {
			_ = conn.Close()
			return g.Hello(), nil, err
		}
	}
	defer func() { _ = g.Close() }()
	defer context.AfterFunc(ctx, func() { _ = g.Close() })()
	var sub func(runner.SubCall) runner.SubResult
	if p.SubCalls != nil {
		sub = func(c runner.SubCall) runner.SubResult { return p.SubCalls(ctx, job, c) }
	}
	res, err := g.Exchange(req, sub)
	return g.Hello(), res, err
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

// startBound is when the attempt's pod must be up: the start bound from
// the later of the dispatch and the pod's creation (a warm or prepared pod
// started before its call; a pod made again later starts its own count).
func (p *Provider) startBound(job sandbox.Job, pod *corev1.Pod) time.Time {
	from := job.Dispatched
	if created := pod.CreationTimestamp.Time; created.After(from) {
		from = created
	}
	return from.Add(p.Config.startTimeout())
}

// upBy reports whether the pod's record shows its runner's container
// running since t or before.
func upBy(pod *corev1.Pod, t time.Time) bool {
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == containerTool && cs.State.Running != nil {
			return !cs.State.Running.StartedAt.After(t)
		}
	}
	return false
}

// handOverMargin is what a body handed over late must have left, beyond
// its timeout, before its pod's active deadline: the runner's stop and
// the frame's collection.
const handOverMargin = 30 * time.Second

// roomFor reports whether the pod's active deadline still leaves a body
// handed over now its whole timeout.
func (p *Provider) roomFor(pod *corev1.Pod, job sandbox.Job) bool {
	if pod.Spec.ActiveDeadlineSeconds == nil || pod.Status.StartTime == nil {
		return true
	}
	end := pod.Status.StartTime.Add(time.Duration(*pod.Spec.ActiveDeadlineSeconds) * time.Second)
	timeout := int64(defaultTimeout)
	if job.Tool != nil && job.Tool.TimeoutSeconds > 0 {
		timeout = int64(job.Tool.TimeoutSeconds)
	}
	return !p.now().Add(time.Duration(timeout)*time.Second + handOverMargin).After(end)
}

func isDone(f *follower) bool {
	select {
	case <-f.done:
		return true
	default:
		return false
	}
}

// final tells whether the kubelet gave the pod its last phase.
func final(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

// finalWait bounds how long a follower waits, once the runner's container
// ended without a frame, for the kubelet to say why (a node's status
// updates come within seconds).
const finalWait = 10 * time.Second

func terminated(pod *corev1.Pod) bool {
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == containerTool && cs.State.Terminated != nil {
			return true
		}
	}
	return final(pod)
}
