package controller

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/source"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/providers/approval"
	"github.com/toolgate/toolgate/internal/providers/sandbox"
)

// ToolCallReconciler drives one call through the pipeline. Each boundary is
// written to status before the side effect that follows it (asking a
// person, starting the body); the session controller decides when a call
// may start (executionMode) and when it may settle (released).
type ToolCallReconciler struct {
	Client    client.Client
	Profiles  *Profiles
	Sandboxes *sandbox.Mounts
	Approvals *approval.Mounts
	Clock     clock.PassiveClock
	// PollInterval is the safety-net requeue while a body runs or a
	// question is open; providers and watches normally wake the call first.
	PollInterval time.Duration
	// Wake receives the calls whose sandbox work ended.
	Wake chan event.GenericEvent
	// MaxConcurrentReconciles bounds how many calls step at once.
	MaxConcurrentReconciles int
	// Recorder emits an Event when a call settles (outcome and code only).
	Recorder events.EventRecorder
	// APIReader reads from the API server itself, to confirm a NotFound the
	// cache reported before settling on it.
	APIReader client.Reader

	// live remembers, per attempt, that this process dispatched it and
	// invoked its body; after a restart it is empty, which is what makes a
	// resumed attempt look interrupted to the pipeline.
	live sync.Map // attemptKey -> liveAttempt
}

type attemptKey struct {
	uid     types.UID
	attempt int
}

type liveAttempt struct{ dispatched, invoked bool }

// Notify is the sandbox providers' Notifier: it wakes the call.
func (r *ToolCallReconciler) Notify(owner types.NamespacedName) {
	tc := &toolgatev1alpha1.ToolCall{}
	tc.Namespace, tc.Name = owner.Namespace, owner.Name
	select {
	case r.Wake <- event.GenericEvent{Object: tc}:
	default: // the poll will find it
	}
}

// Reconcile steps the call as far as its gates allow.
func (r *ToolCallReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	logger := log.FromContext(ctx)
	tc := &toolgatev1alpha1.ToolCall{}
	if err := r.Client.Get(ctx, req.NamespacedName, tc); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if tc.Status.Result != nil && tc.Status.Checkpoint == nil {
		// Settled: the result is never rewritten. A pod left behind by a
		// crash between the result and its cleanup goes now.
		_, err := r.release(ctx, tc)
		return ctrl.Result{}, err
	}
	now := r.Clock.Now()
	st := stateOf(tc)
	r.restore(tc.UID, st)
	session := &toolgatev1alpha1.AgentSession{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: tc.Namespace, Name: tc.Spec.SessionRef.Name}, session); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
		}
		// The cache may not have seen a session created a moment ago: only
		// the API server's own answer settles the call.
		if err := r.reader().Get(ctx, client.ObjectKey{Namespace: tc.Namespace, Name: tc.Spec.SessionRef.Name}, session); !apierrors.IsNotFound(err) {
			if err == nil {
				return ctrl.Result{RequeueAfter: time.Second}, nil
			}
			return ctrl.Result{}, err
		}
		if stopped, err := r.stopInFlight(ctx, tc, st); err != nil || !stopped {
			return ctrl.Result{RequeueAfter: time.Second}, err
		}
		// Without a session the call cannot be ordered; it still gets its
		// one result.
		st.Abort(pipeline.CodeSessionGone, "the call's AgentSession does not exist", now)
		return ctrl.Result{}, r.settleAlone(ctx, tc, st)
	}
	if err := r.ensureOwner(ctx, tc, session); err != nil {
		return ctrl.Result{}, err
	}

	p, env, err := r.pipelineFor(ctx, tc, session, st, now)
	if err != nil {
		return ctrl.Result{}, err
	}
	if st.Failure != nil && st.Failure.Code == pipeline.CodeProfileUnavailable && st.Attempt > 0 {
		// The profile went away while a body ran: stop its work first.
		if stopped, err := r.stopInFlight(ctx, tc, st); err != nil || !stopped {
			return ctrl.Result{RequeueAfter: time.Second}, err
		}
	}
	if code := tc.Status.SchedulingError; code != "" {
		st.Abort(pipeline.Code(code), "the session refused to schedule the call: a call later in model order had already started", now)
	}
	callCtx := r.callContext(ctx, tc, session, env)
	base := tc.DeepCopy()
	var requeue time.Duration
	for st.Next != pipeline.StageDone && r.gateOpen(tc, st) {
		progress, wait := p.Step(callCtx, st)
		r.remember(tc.UID, st)
		if progress == pipeline.Waiting {
			requeue = wait
			break
		}
		if st.Next == pipeline.StageApproval || st.Next == pipeline.StageExecute {
			// The next step has a side effect: make this boundary durable
			// first.
			if err := r.persist(ctx, tc, base, st); err != nil {
				return ctrl.Result{}, err
			}
			base = tc.DeepCopy()
		}
	}
	if err := r.persist(ctx, tc, base, st); err != nil {
		return ctrl.Result{}, err
	}
	if st.Done() {
		r.finish(ctx, tc, st, env)
		logger.Info("call settled", "call", tc.Name, "token", st.Token, "outcome", st.Result.Outcome, "code", st.Result.Code)
		return ctrl.Result{}, nil
	}
	if requeue > 0 {
		return ctrl.Result{RequeueAfter: requeue}, nil
	}
	return ctrl.Result{}, nil
}

// callEnv is what the pipeline's providers need for this call.
type callEnv struct {
	approver approval.Provider
	sandbox  sandbox.Provider
	job      sandbox.Job
	redact   []string
}

// pipelineFor builds the pipeline of the call's current profile. A missing
// or unresolved profile settles the call with profile_unavailable.
func (r *ToolCallReconciler) pipelineFor(ctx context.Context, tc *toolgatev1alpha1.ToolCall, session *toolgatev1alpha1.AgentSession, st *pipeline.State, now time.Time) (*pipeline.Pipeline, callEnv, error) {
	key := types.NamespacedName{Namespace: tc.Namespace, Name: session.Spec.ProfileRef.Name}
	compiled, obj, cerr, err := r.Profiles.Resolve(ctx, key)
	opts := pipeline.Options{Clock: r.Clock, PollInterval: r.PollInterval}
	env := callEnv{job: sandbox.Job{
		Owner: client.ObjectKeyFromObject(tc), OwnerUID: tc.UID,
		Workspace: sandbox.Workspace{Session: client.ObjectKeyFromObject(session), ClaimName: session.Status.WorkspaceClaimName},
	}}
	if err != nil {
		return nil, env, err // transient: try again, never settle on it
	}
	if compiled == nil {
		msg := fmt.Sprintf("ToolProfile %s does not exist", key.Name)
		if cerr != nil {
			msg = fmt.Sprintf("ToolProfile %s is not Ready: %s", key.Name, cerr.Message)
		}
		st.Abort(pipeline.CodeProfileUnavailable, msg, now)
		return pipeline.New(pipeline.NewRegistry(), opts), env, nil
	}
	spec := obj.Spec
	opts.Default = compiled.Default
	opts.ApprovalTimeout = time.Duration(spec.Approval.TimeoutSeconds) * time.Second
	if t := session.Spec.ApprovalTimeoutSeconds; t != nil {
		opts.ApprovalTimeout = time.Duration(*t) * time.Second
	}
	if a, ok := r.Approvals.Get(string(spec.Approval.Provider)); ok {
		env.approver, opts.Approver = a, a
	}
	env.redact = spec.Approval.RedactArguments
	env.sandbox, _ = r.Sandboxes.Get(string(spec.Sandbox.Provider))
	env.job.Policy = spec.Sandbox
	return pipeline.New(compiled.Registry, opts), env, nil
}

func (r *ToolCallReconciler) reader() client.Reader {
	if r.APIReader != nil {
		return r.APIReader
	}
	return r.Client
}

// stopInFlight stops the work of an attempt in flight before the call is
// settled without its pipeline (its session or profile is gone), through
// every mounted sandbox provider: which one ran it is in the profile that is
// gone. It reports whether no owned work is left.
func (r *ToolCallReconciler) stopInFlight(ctx context.Context, tc *toolgatev1alpha1.ToolCall, st *pipeline.State) (bool, error) {
	if st.Next != pipeline.StageExecute {
		return true, nil
	}
	return r.release(ctx, tc)
}

// release asks every mounted sandbox provider to stop and forget the call's
// work; it reports whether nothing is left.
func (r *ToolCallReconciler) release(ctx context.Context, tc *toolgatev1alpha1.ToolCall) (bool, error) {
	gone := true
	for _, p := range r.Sandboxes.All() {
		g, err := p.Release(ctx, client.ObjectKeyFromObject(tc), tc.UID)
		if err != nil {
			return false, err
		}
		gone = gone && g
	}
	return gone, nil
}

// callContext is the caller's signal: cancelled once cancellation is
// requested or the session is being deleted, and never by the manager's
// own shutdown (a restart is not a cancellation).
func (r *ToolCallReconciler) callContext(ctx context.Context, tc *toolgatev1alpha1.ToolCall, session *toolgatev1alpha1.AgentSession, env callEnv) context.Context {
	callCtx := context.WithoutCancel(ctx)
	if tc.Spec.CancelRequested || !session.DeletionTimestamp.IsZero() {
		var cancel context.CancelFunc
		callCtx, cancel = context.WithCancel(callCtx)
		cancel()
	}
	callCtx = approval.WithSubject(callCtx, approval.Subject{Owner: tc, Redact: env.redact})
	return withJob(callCtx, jobContext{provider: env.sandbox, job: env.job})
}

// gateOpen applies the session's ordering: a call starts only once the
// session admitted it (or it is cancelled, which settles it at once), and
// settles only once the session released it.
func (r *ToolCallReconciler) gateOpen(tc *toolgatev1alpha1.ToolCall, st *pipeline.State) bool {
	switch st.Next {
	case pipeline.StageCall, pipeline.StagePreExecute:
		return tc.Status.ExecutionMode != "" || tc.Spec.CancelRequested || tc.Status.SchedulingError != ""
	case pipeline.StagePostExecute, pipeline.StageFinalize, pipeline.StageObserve, pipeline.StageResult:
		return tc.Status.Released
	}
	return true
}

// remember records what this process knows of the current attempt, and
// restores it into states rebuilt from status.
func (r *ToolCallReconciler) remember(uid types.UID, st *pipeline.State) {
	if st.Attempt == 0 {
		return
	}
	d, inv := st.Live()
	r.live.Store(attemptKey{uid, st.Attempt}, liveAttempt{d, inv})
}

func (r *ToolCallReconciler) restore(uid types.UID, st *pipeline.State) {
	if v, ok := r.live.Load(attemptKey{uid, st.Attempt}); ok {
		l := v.(liveAttempt)
		st.SetLive(l.dispatched, l.invoked)
	}
}

func (r *ToolCallReconciler) persist(ctx context.Context, tc, base *toolgatev1alpha1.ToolCall, st *pipeline.State) error {
	before := len(base.Status.Stages)
	writeState(tc, st, r.Clock.Now())
	if equality.Semantic.DeepEqual(base.Status, tc.Status) {
		return nil // nothing new: no API write
	}
	if err := r.Client.Status().Patch(ctx, tc, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return err
	}
	statusWrites.WithLabelValues("toolcall").Inc()
	for _, s := range tc.Status.Stages[min(before, len(tc.Status.Stages)):] {
		stageBoundaries.WithLabelValues(s.Stage, s.Verdict).Inc()
	}
	return nil
}

// finish releases what the call held once its result is durable.
func (r *ToolCallReconciler) finish(ctx context.Context, tc *toolgatev1alpha1.ToolCall, st *pipeline.State, env callEnv) {
	for a := 1; a <= st.Attempt; a++ {
		r.live.Delete(attemptKey{tc.UID, a})
		if env.sandbox != nil {
			env.sandbox.Forget(sandbox.Key(tc.UID, a))
		}
	}
	res := st.Result
	callsSettled.WithLabelValues(string(res.Outcome), string(res.Code)).Inc()
	callDuration.WithLabelValues(string(res.Outcome)).Observe(r.Clock.Since(tc.CreationTimestamp.Time).Seconds())
	if r.Recorder != nil {
		kind, reason := corev1.EventTypeNormal, "Settled"
		if res.Outcome != pipeline.Succeeded {
			kind = corev1.EventTypeWarning
		}
		r.Recorder.Eventf(tc, nil, kind, reason, "Settle", "outcome %s, code %s", string(res.Outcome), orNone(string(res.Code)))
	}
	if env.approver != nil && askedApproval(st) {
		if err := env.approver.Close(ctx, approval.Subject{Owner: tc}, st.Result.Code); err != nil {
			log.FromContext(ctx).Info("approval request not closed", "call", tc.Name, "code", st.Result.Code)
		}
	}
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func askedApproval(st *pipeline.State) bool {
	for _, r := range st.Records {
		if r.Stage == pipeline.StagePreExecute && r.Verdict == pipeline.VerdictAsk {
			return true
		}
	}
	return false
}

// settleAlone finalizes a call that has no session to order it.
func (r *ToolCallReconciler) settleAlone(ctx context.Context, tc *toolgatev1alpha1.ToolCall, st *pipeline.State) error {
	base := tc.DeepCopy()
	p := pipeline.New(pipeline.NewRegistry(), pipeline.Options{Clock: r.Clock})
	for !st.Done() {
		p.Step(context.Background(), st)
	}
	return r.persist(ctx, tc, base, st)
}

// ensureOwner makes the session own the call, so deleting the session
// deletes its calls (after the session's finalizer has settled them).
func (r *ToolCallReconciler) ensureOwner(ctx context.Context, tc *toolgatev1alpha1.ToolCall, session *toolgatev1alpha1.AgentSession) error {
	for _, ref := range tc.OwnerReferences {
		if ref.UID == session.UID {
			return nil
		}
	}
	base := tc.DeepCopy()
	if err := controllerutil.SetOwnerReference(session, tc, r.Client.Scheme()); err != nil {
		return err
	}
	return r.Client.Patch(ctx, tc, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
}

// SetupWithManager registers the reconciler.
func (r *ToolCallReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Wake == nil {
		r.Wake = make(chan event.GenericEvent, 1024)
	}
	if r.PollInterval <= 0 {
		r.PollInterval = 30 * time.Second
	}
	if r.MaxConcurrentReconciles <= 0 {
		r.MaxConcurrentReconciles = 16
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&toolgatev1alpha1.ToolCall{}).
		Owns(&toolgatev1alpha1.ApprovalRequest{}).
		Owns(&corev1.Pod{}).
		WatchesRawSource(source.Channel(r.Wake, &handler.EnqueueRequestForObject{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.MaxConcurrentReconciles}).
		Named("toolcall").
		Complete(r)
}
