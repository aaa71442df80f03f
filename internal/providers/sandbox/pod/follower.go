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
	// Ended by Stop: nothing of the provider outlives its scope. The pod
	// stays, for a successor to adopt.
	ctx := p.lifeContext()
	workspace := ""
	if job.Workspace.ClaimName != "" {
		workspace = job.Policy.WorkspaceRoot
	}
	req := runner.Request{Op: runner.OpRun, Call: job.Key, Spec: sandbox.RunnerSpec(job, workspace), Arguments: job.Arguments}
	handed, proxied := false, false
	// Between looks the follower waits for the pod to change (PodChanged)
	// or for a poll that backs off, the safety net where no informer tells.
	// Once the pod has an address, the runner's listening is awaited: no
	// event marks it, so the poll restarts short.
	minPoll, maxPoll := p.pollBounds()
	backoff := minPoll
	addressed, sawRunning := false, false
	var endSeen time.Time // when the runner's container was first seen ended
	wait := func(most time.Duration) {
		t := time.NewTimer(min(backoff, most))
		defer t.Stop()
		select {
		case <-f.wake:
		case <-t.C:
			backoff = min(2*backoff, most)
		case <-ctx.Done():
		}
	}
	notReady := func(pod *corev1.Pod) error {
		why := ""
		if w := whyNotUp(pod); w != "" {
			why = ": " + w
		}
		return pipeline.Fail(pipeline.CodeSandboxNotReady, fmt.Sprintf(
			"the tool's pod was not ready within %s of dispatch%s; the body never started", p.Config.startTimeout(), why))
	}
	managerLate := func() error {
		return pipeline.Fail(pipeline.CodeManagerUnavailable,
			"the tool's pod was ready in time, but no manager handed it the call while its deadline left the body its timeout; the body never started")
	}
	if c := p.claimOf(job.Key); c != nil {
		// A warm pod is handed its call only once its claim is durable.
		select {
		case <-c.done:
		case <-ctx.Done():
			f.err = errStopped
			return
		}
		if c.err != nil {
			f.err = pipeline.Fail(pipeline.CodeSandboxLost, "the warm pod reserved for the call could not be claimed (changed or deleted by someone else); the body never started")
			return
		}
	}
	for {
		if ctx.Err() != nil {
			f.err = errStopped
			return
		}
		pod, err := first, error(nil)
		first = nil
		if pod == nil { // looks after the first read the pod
			pod = &corev1.Pod{}
			err = p.Reader.Get(ctx, f.pod, pod)
		}
		if err != nil {
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
			// The kubelet reports the runner's container ended before it
			// gives the pod its phase and reason (an eviction's): those
			// are awaited a little, so that the outcome names the cause.
			if endSeen.IsZero() {
				endSeen = time.Now()
			}
			if !final(pod) && time.Since(endSeen) < finalWait {
				wait(maxPoll)
				continue
			}
			f.err = pipeline.Fail(pipeline.CodeSandboxLost, "the tool's runner ended without a result")
			return
		}
		// Judged on the pod's own record, never on when a manager looked:
		// a pod up by its bound met it, however late a manager (one that
		// was not leading, or restarting) comes to hand it the call.
		ready := p.startBound(job, pod)
		late := !handed && p.now().After(ready) && !upBy(pod, ready)
		up := running(pod)
		if pod.Status.PodIP == "" || (late && !up) {
			if late {
				f.err = notReady(pod)
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
		// Never start a body past the bound, nor one the pod's active
		// deadline would cut short; collect one already started.
		noRoom := !handed && !late && p.now().After(ready) && !p.roomFor(pod, job)
		if late || noRoom {
			req.Op = runner.OpCollect
		}
		// The body is handed only to a pod the call's status names: a
		// successor that finds no pod where the status names none knows
		// that nothing ran, and makes it again.
		if req.Op == runner.OpRun && !handed && !p.isRecorded(f) {
			wait(maxPoll)
			continue
		}
		// A tool naming its hosts gets its proxy and grant with the call:
		// the grant names the pod's address, known only now.
		// Without them the body is not started; one already started (a
		// manager resuming) is collected all the same.
		var noProxy error
		if req.Op == runner.OpRun && job.Tool.Egress != nil && !proxied {
			env, proxy, err := p.egressEnv(ctx, job, pod)
			if err == nil {
				req.Spec.Await = proxy
				req.Spec.Env = maps.Clone(req.Spec.Env)
				if req.Spec.Env == nil {
					req.Spec.Env = map[string]string{}
				}
				maps.Copy(req.Spec.Env, env)
				proxied = true
			} else {
				noProxy, req.Op = err, runner.OpCollect
			}
		}
		hello, res, err := p.exchangeWatching(ctx, f, pod, req, job)
		if noProxy != nil {
			if hello != nil && hello.State == runner.StateIdle {
				f.err = noProxy
				return
			}
			req.Op = runner.OpRun
		}
		if hello != nil && hello.State != runner.StateIdle {
			handed = true
		}
		switch {
		case err == nil:
			f.res = res
			traceBody(job, pod, res)
			return
		case errors.Is(err, runner.ErrRefused) && late && !handed:
			f.err = notReady(pod)
			return
		case errors.Is(err, runner.ErrRefused) && noRoom && !handed:
			f.err = managerLate()
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
