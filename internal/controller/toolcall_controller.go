package controller

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/source"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/audit"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/providers/approval"
	"github.com/toolgate/toolgate/internal/providers/sandbox"
	"github.com/toolgate/toolgate/internal/toolcalls"
)

// callFinalizer keeps a deleted call until its work has stopped, its one
// result is written and the session no longer needs its place in the log
// (reconcileSettled, letGo). It is set before any work can start
// (reconcileFinalizer, or the admission policy toolcall-stop-work).
const callFinalizer = toolgatev1alpha1.FinalizerStopWork

// ToolCallReconciler drives one call through the pipeline. Each boundary is
// written to status before the side effect that follows it (asking a
// person, starting the body, announcing a failure); the session's plan
// decides when a call may start and when it may settle, and a call that
// starts writes its own admission and release into status.schedule when
// the plan allows them (admitSelf, releaseSelf; docs/architecture.md, "Who
// writes what").
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
	Wake *Wake
	// MaxConcurrentReconciles bounds how many calls step at once.
	MaxConcurrentReconciles int
	// APIReader reads from the API server itself, to confirm a NotFound the
	// cache reported before settling on it.
	APIReader client.Reader
	// Audit receives a record per settled call (nil: none); AuditDigests
	// make its digests.
	Audit        audit.Sink
	AuditDigests audit.Digests

	// mem is what this process remembers of each call between its
	// reconciles (callMemory); forget drops it with the call.
	mem callMemory
	// own remembers the versions this process's writes replaced, so that a
	// reconcile from a cache behind them waits for the watch instead.
	own toolcalls.OwnWrites
	// index reads a session's calls in place (Setup; nil: listed).
	index *toolcalls.Index
}

// Wake is the sandbox providers' Notifier: it wakes a call whose work
// ended, so it is reconciled at once instead of at the next poll.
type Wake struct{ ch chan event.GenericEvent }

// NewWake returns a Wake with room for n pending wake-ups.
func NewWake(n int) *Wake { return &Wake{ch: make(chan event.GenericEvent, n)} }

// Notify wakes the call owner.
func (w *Wake) Notify(owner types.NamespacedName) {
	tc := &toolgatev1alpha1.ToolCall{}
	tc.Namespace, tc.Name = owner.Namespace, owner.Name
	select {
	case w.ch <- event.GenericEvent{Object: tc}:
	default: // the poll will find it
	}
}

// callScope is what one reconcile of one call knows; the phases fill it in
// and read it.
type callScope struct {
	tc      *toolgatev1alpha1.ToolCall
	base    *toolgatev1alpha1.ToolCall // the call as last written (read only)
	session *toolgatev1alpha1.AgentSession
	parent  *toolgatev1alpha1.ToolCall // a nested call's parent, when it exists
	st      *pipeline.State
	now     time.Time
	// wasSettled: the call's result was durable when the reconcile began.
	wasSettled bool
	// without is why a phase settles the call without its body
	// (settleWithoutBody); empty otherwise.
	without pipeline.Code
	// frozen is the failure the status froze before announcing it
	// (toolcalls.FrozenOf); the result repeats it.
	frozen *pipeline.Failure

	pipe    *pipeline.Pipeline
	subject approval.Subject
	runner  callRunner
}

// callPhase is one step of a reconcile. It returns stop once the reconcile
// has nothing more to do, with the result to return.
type callPhase func(ctx context.Context, s *callScope) (res ctrl.Result, stop bool, err error)

// Reconcile steps the call as far as the session's schedule allows, each
// phase once, in order: find the session (reconcileSession), hold the
// finalizer (reconcileFinalizer), build the pipeline of the profile
// (reconcileProfile), settle a refused call (reconcileRefusal), step the
// pipeline and persist each boundary (reconcileSteps), then do what follows
// a durable result (reconcileSettled). A phase that finds the call cannot
// run (no session, no profile, a refusal) settles it without its body
// (settleWithoutBody) and the step loop drives it to its one result. A
// call settled before this reconcile only gets its post-settlement work,
// which is idempotent, so it survives a crash after the final status
// write.
func (r *ToolCallReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	tc := &toolgatev1alpha1.ToolCall{}
	if err := r.Client.Get(ctx, req.NamespacedName, tc); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if r.own.Behind(req.NamespacedName, tc.ResourceVersion) {
		// The write's watch event reconciles the call; the requeue is a
		// safety net only.
		return ctrl.Result{RequeueAfter: r.PollInterval}, nil
	}
	if strippedInCache(tc) && !tc.Settled() {
		// Its pipeline needs what the cache left out (cachestrip.go).
		if err := r.reader().Get(ctx, req.NamespacedName, tc); err != nil {
			return ctrl.Result{}, client.IgnoreNotFound(err)
		}
	}
	// Every log line of the call names who asked for what, in which
	// session (identities, never arguments or content).
	ctx = log.IntoContext(ctx, log.FromContext(ctx).WithValues("session", tc.Spec.SessionRef.Name, "tool", toolLabel(tc), "requester", tc.Spec.Requester))
	s := r.scopeOf(tc)
	var phases []callPhase
	if !s.wasSettled {
		phases = []callPhase{r.reconcileSession, r.reconcileFinalizer, r.reconcileProfile, r.reconcileRefusal, r.reconcileSteps}
	}
	phases = append(phases, r.reconcileSettled)
	for _, phase := range phases {
		res, stop, err := phase(ctx, s)
		if err != nil || stop {
			return res, err
		}
	}
	return ctrl.Result{}, nil
}

// scopeOf is the one place a reconcile builds the call's pipeline state:
// from its status, with what this process knows of its current attempt.
func (r *ToolCallReconciler) scopeOf(tc *toolgatev1alpha1.ToolCall) *callScope {
	s := &callScope{tc: tc, base: tc.DeepCopy(), now: r.Clock.Now(), wasSettled: tc.Settled(), frozen: toolcalls.FrozenOf(tc)}
	s.st = toolcalls.StateOf(tc)
	r.restore(tc, s.st)
	return s
}

// forget drops everything this process remembers of a call that is gone:
// its memory and its own writes.
func (r *ToolCallReconciler) forget(key types.NamespacedName) {
	r.mem.forget(key)
	r.own.Forget(key)
}

// settling reports whether a phase settles the call without its body.
func (s *callScope) settling() bool { return s.without != "" }

// plans is the planner of this controller: the cache, and this process's
// own writes where the cache is behind them.
func (r *ToolCallReconciler) plans() toolcalls.Planner {
	return toolcalls.Planner{Reader: r.Client, Index: r.index, Own: &r.own}
}

// SetupWithManager registers the reconciler.
func (r *ToolCallReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Wake == nil {
		r.Wake = NewWake(1024)
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
		// A deleted call that committed waits for its turn to be recorded
		// complete (or its session to go) before it lets go.
		Watches(&toolgatev1alpha1.AgentSession{}, handler.EnqueueRequestsFromMapFunc(r.deletedCallsOf), builder.WithPredicates(predicate.Funcs{
			CreateFunc:  func(event.CreateEvent) bool { return false },
			UpdateFunc:  func(e event.UpdateEvent) bool { return turnRecorded(e.ObjectOld, e.ObjectNew) },
			DeleteFunc:  func(event.DeleteEvent) bool { return true },
			GenericFunc: func(event.GenericEvent) bool { return false },
		})).
		// A call that is admitted, decides, finishes, commits or is refused
		// lets the next in line admit or release itself; so does one that
		// goes.
		Watches(&toolgatev1alpha1.ToolCall{}, handler.EnqueueRequestsFromMapFunc(r.nextInLine), builder.WithPredicates(predicate.Funcs{
			CreateFunc:  func(event.CreateEvent) bool { return false },
			UpdateFunc:  func(e event.UpdateEvent) bool { return planMoved(e.ObjectOld, e.ObjectNew) },
			DeleteFunc:  func(event.DeleteEvent) bool { return true },
			GenericFunc: func(event.GenericEvent) bool { return false },
		})).
		WatchesRawSource(source.Channel(r.Wake.ch, &handler.EnqueueRequestForObject{})).
		WithOptions(controllerOptions(r.MaxConcurrentReconciles)).
		Named("toolcall").
		Complete(conflictsRetried(r))
}
