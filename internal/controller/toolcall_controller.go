package controller

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/providers/approval"
	"github.com/toolgate/toolgate/internal/providers/sandbox"
)

// callFinalizer keeps a deleted call until its work has stopped, its one
// result is written and the session no longer needs its place in the log
// (reconcileSettled, letGo). It is set with the session's owner reference,
// before any work can start.
const callFinalizer = "toolgate.dev/stop-work"

// ToolCallReconciler drives one call through the pipeline. Each boundary is
// written to status before the side effect that follows it (asking a
// person, starting the body); the session decides when a call may start
// and when it may settle (status.schedule, which this controller only
// reads).
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

	// live remembers, per attempt, that this process dispatched it and
	// invoked its body; after a restart it is empty, which is what makes a
	// resumed attempt look interrupted to the pipeline.
	live sync.Map // attemptKey -> pipeline.LiveAttempt
	// announced remembers the settled calls whose Event and metrics this
	// process emitted (or found emitted); an entry goes with its call.
	announced sync.Map // types.NamespacedName -> types.UID
	// own remembers the versions this process's writes replaced, so that a
	// reconcile from a cache behind them waits for the watch instead.
	own ownWrites
}

type attemptKey struct {
	uid     types.UID
	attempt int
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
	base    *toolgatev1alpha1.ToolCall // the status last written
	session *toolgatev1alpha1.AgentSession
	parent  *toolgatev1alpha1.ToolCall // a nested call's parent, when it exists
	st      *pipeline.State
	now     time.Time

	pipe    *pipeline.Pipeline
	subject approval.Subject
	runner  callRunner

	justSettled bool // this reconcile wrote the result
}

// callPhase is one step of a reconcile. It returns stop once the reconcile
// has nothing more to do, with the result to return.
type callPhase func(ctx context.Context, s *callScope) (res ctrl.Result, stop bool, err error)

// Reconcile steps the call as far as the session's schedule allows. A
// settled call only gets its post-settlement work (closing its question,
// releasing its sandbox, announcing the outcome), which is idempotent, so
// it survives a crash after the final status write.
func (r *ToolCallReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	tc := &toolgatev1alpha1.ToolCall{}
	if err := r.Client.Get(ctx, req.NamespacedName, tc); err != nil {
		if apierrors.IsNotFound(err) {
			r.announced.Delete(req.NamespacedName)
			r.own.forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if r.own.behind(req.NamespacedName, tc.ResourceVersion) {
		// The write's watch event reconciles the call; the requeue is a
		// safety net only.
		return ctrl.Result{RequeueAfter: r.PollInterval}, nil
	}
	s := &callScope{tc: tc, base: tc.DeepCopy(), now: r.Clock.Now()}
	phases := []callPhase{
		r.reconcileSettled,
		r.reconcileSession,
		r.reconcileFinalizer,
		r.reconcileProfile,
		r.reconcileRefusal,
		r.reconcileSteps,
		r.reconcileSettled,
	}
	for _, phase := range phases {
		res, stop, err := phase(ctx, s)
		if err != nil || stop {
			return res, err
		}
	}
	return ctrl.Result{}, nil
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
		Complete(r)
}

// turnRecorded reports whether a session update may let a deleted call go:
// a turn was recorded complete, or the session is being deleted.
func turnRecorded(before, after client.Object) bool {
	o, n := before.(*toolgatev1alpha1.AgentSession), after.(*toolgatev1alpha1.AgentSession)
	return o.Status.CommittedTurn != n.Status.CommittedTurn || o.DeletionTimestamp.IsZero() != n.DeletionTimestamp.IsZero()
}

// deletedCallsOf lists the session's calls that are being deleted and still
// hold their finalizer, and the calls next in line (a turn recorded
// complete may let the next one start).
func (r *ToolCallReconciler) deletedCallsOf(ctx context.Context, o client.Object) []reconcile.Request {
	calls, err := r.currentCalls(ctx, o.GetNamespace(), o.GetName())
	if err != nil {
		return nil
	}
	out := nextOf(calls)
	for _, c := range calls {
		if deleting(c) && controllerutil.ContainsFinalizer(c, callFinalizer) {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(c)})
		}
	}
	return out
}

// deleting reports whether someone deleted the call.
func deleting(tc *toolgatev1alpha1.ToolCall) bool { return !tc.DeletionTimestamp.IsZero() }
