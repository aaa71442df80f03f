package controller

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/providers/approval"
	"github.com/toolgate/toolgate/internal/providers/sandbox"
	"github.com/toolgate/toolgate/internal/toolcalls"
)

const (
	// sessionFinalizer keeps a deleted session until every call it owns has
	// settled and committed: deleting a session cancels its calls, and each
	// still gets its one result.
	sessionFinalizer = toolgatev1alpha1.FinalizerSettleCalls

	// indexSessionProfile indexes AgentSessions by their profile's name.
	indexSessionProfile = "spec.profileRef.name"
)

// AgentSessionReconciler is the agent loop's durable side: it plans a
// session's calls (admission in model order, exclusive barriers, a rolling
// pool of maxParallel; release for post-execute and commitment in model
// order) and keeps the session's log head. Calls that start admit and
// release themselves by that plan (admitSelf, releaseSelf); the session
// writes only refusals, nested calls' admission and the release of calls
// that never start (toolcalls.SessionPlan.Work).
type AgentSessionReconciler struct {
	Client   client.Client
	Profiles *Profiles
	// Sandboxes and Approvals, when set, let Ready say that the profile
	// selects a provider this manager has not mounted.
	Sandboxes *sandbox.Mounts
	Approvals *approval.Mounts
	Clock     clock.PassiveClock
	// Reader reads what the cache does not hold: StorageClasses, only
	// while a workspace claim is Pending (nil: they are not read).
	Reader client.Reader
	// MaxConcurrentReconciles bounds how many sessions are scheduled at
	// once.
	MaxConcurrentReconciles int
	// DefaultRetention replaces an unset spec.ttlSecondsAfterCommit (0:
	// none, every call is kept).
	DefaultRetention time.Duration

	// index reads a session's calls in place (Setup; nil: listed).
	index *toolcalls.Index
	// counting holds, per session, since when a change of only its counts
	// and cursor has waited to be written (deferCounts).
	counting sync.Map // types.NamespacedName -> time.Time
}

// Reconcile schedules one session and patches its status once. Every
// event of one of its calls brings it here (the event handler does no
// work of its own); a change of only the session's counts and cursor is
// written at most once per countsDelay (deferCounts).
func (r *AgentSessionReconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, retErr error) {
	s := &toolgatev1alpha1.AgentSession{}
	if err := r.Client.Get(ctx, req.NamespacedName, s); err != nil {
		r.counting.Delete(req.NamespacedName)
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	calls, err := r.plans().InModelOrder(ctx, s.Namespace, s.Name)
	if err != nil {
		return ctrl.Result{}, err
	}
	if !s.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, r.reconcileDelete(ctx, s, calls)
	}
	if !controllerutil.ContainsFinalizer(s, sessionFinalizer) {
		base := s.DeepCopy()
		controllerutil.AddFinalizer(s, sessionFinalizer)
		if err := patch(ctx, r.Client, s, base, objectLocked); err != nil {
			return ctrl.Result{}, err
		}
	}

	base := s.DeepCopy()
	wroteCalls := false
	defer func() {
		if equality.Semantic.DeepEqual(base.Status, s.Status) {
			r.counting.Delete(req.NamespacedName)
			return // nothing new: no API write (an empty patch still costs a request)
		}
		if retErr == nil && !wroteCalls {
			if wait := r.deferCounts(req.NamespacedName, base, s); wait > 0 {
				if res.RequeueAfter == 0 || wait < res.RequeueAfter {
					res.RequeueAfter = wait
				}
				return
			}
		}
		if err := patch(ctx, r.Client, s, base, statusUnlocked); err != nil && retErr == nil {
			retErr = client.IgnoreNotFound(err)
			return
		}
		r.counting.Delete(req.NamespacedName)
	}()
	ready, profile := r.profileCondition(ctx, s)
	conflict, err := r.reconcileWorkspace(ctx, s, profile)
	if err != nil {
		return ctrl.Result{}, err
	}
	workspace, err := r.workspaceProblem(ctx, s)
	if err != nil {
		return ctrl.Result{}, err
	}
	recheck := workspace.recheck
	if workspace.reason != "" && ready.Status == metav1.ConditionTrue {
		// Ready only with a usable workspace. While it is Pending, calls
		// go on (their pods wait for it to bind); once it is Unavailable,
		// the calls that have not started settle on it (reconcileProfile):
		// they are still scheduled, so they commit in order. A claim given
		// by name is not watched: look again.
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, workspace.reason, workspace.message
		if workspace.reason == toolgatev1alpha1.AgentSessionReasonWorkspaceUnavailable {
			recheck = workspaceBindGrace
		}
	}
	sp := toolcalls.PlanSession(s, calls, nil)
	logged := sp.Logged()
	work := sp.Work()
	wroteCalls = len(work) > 0
	if conflict.reason != "" {
		// No call starts without the workspace it was promised.
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, conflict.reason, conflict.message
	} else if logged, err = r.schedule(ctx, logged, work); err != nil {
		return ctrl.Result{}, err
	}
	toolcalls.SetSessionStatus(s, logged)
	meta.SetStatusCondition(&s.Status.Conditions, ready)
	if c := r.isolationCondition(ctx, s, profile); c != nil {
		meta.SetStatusCondition(&s.Status.Conditions, *c)
	}
	// Stamped whatever Ready says, so that Ready=False at the current
	// generation means rejected, not yet seen.
	s.Status.ObservedGeneration = s.Generation
	if _, retains := r.retention(s); retains && toolcalls.CompleteThrough(s) > toolcalls.CompleteThrough(base) {
		// A turn newly complete is written before its calls expire, in
		// this reconcile: waiting for the next one to read it back cost
		// a round of every session's reconciles per turn, and under load
		// the backlog of calls held grew without bound. This is the
		// reconcile's one status write; the defer finds nothing left.
		if err := patch(ctx, r.Client, s, base, statusUnlocked); err != nil {
			return ctrl.Result{}, client.IgnoreNotFound(err)
		}
		base = s.DeepCopy()
	}
	expireIn, err := r.expire(ctx, base, logged, calls)
	if err != nil {
		return ctrl.Result{}, err
	}
	if recheck > 0 && (expireIn == 0 || recheck < expireIn) {
		expireIn = recheck
	}
	return ctrl.Result{RequeueAfter: expireIn}, nil
}

// retention is how long the session keeps a committed call once its turn
// is complete (spec.ttlSecondsAfterCommit, else DefaultRetention), and
// whether it deletes them at all.
func (r *AgentSessionReconciler) retention(s *toolgatev1alpha1.AgentSession) (time.Duration, bool) {
	if t := s.Spec.TTLSecondsAfterCommit; t != nil {
		return time.Duration(*t) * time.Second, true
	}
	return r.DefaultRetention, r.DefaultRetention > 0
}

// callWriters bounds the writes on its calls one session's reconcile has
// in flight: expiring or cancelling a backlog of a few hundred calls one
// after another held the session's worker for seconds.
const callWriters = 8

// writeEach applies write to every call, callWriters at a time, and
// returns the first error.
func writeEach(ctx context.Context, calls []*toolgatev1alpha1.ToolCall, write func(context.Context, *toolgatev1alpha1.ToolCall) error) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(callWriters)
	for _, c := range calls {
		g.Go(func() error { return write(gctx, c) })
	}
	return g.Wait()
}

// expire deletes the committed calls whose time is up
// (spec.ttlSecondsAfterCommit, else DefaultRetention, after their result,
// once their turn is complete), and with them the settled sub-calls of
// each (a sub-call is never committed: it goes with its parent, or once
// its parent is gone), and returns when the next one is due (0: none). Completeness is
// read from the status as written (persisted), never from this reconcile's
// unwritten one: a turn whose calls are gone must already be recorded
// complete, or its size would hold the session back for good.
func (r *AgentSessionReconciler) expire(ctx context.Context, persisted *toolgatev1alpha1.AgentSession, calls, all []*toolgatev1alpha1.ToolCall) (time.Duration, error) {
	ttl, retains := r.retention(persisted)
	if !retains {
		return 0, nil
	}
	through, now := toolcalls.CompleteThrough(persisted), r.Clock.Now()
	var next time.Duration
	var due []*toolgatev1alpha1.ToolCall
	for _, c := range calls {
		if !c.Committed() || c.Spec.Turn > through || toolcalls.Deleting(c) {
			continue
		}
		left := c.Status.Result.SettledAt.Add(ttl).Sub(now)
		if left > 0 {
			if next == 0 || left < next {
				next = left
			}
			continue
		}
		due = append(due, c)
	}
	due = append(due, orphanedSubCalls(all, due)...)
	return next, writeEach(ctx, due, func(ctx context.Context, c *toolgatev1alpha1.ToolCall) error {
		uid := c.UID
		if err := r.Client.Delete(ctx, c, client.Preconditions{UID: &uid}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting an expired call: %w", err)
		}
		log.FromContext(ctx).V(1).Info("committed call expired", "call", c.Name)
		return nil
	})
}

// orphanedSubCalls are the settled sub-calls among all whose parent
// expires now (in due), is being deleted, or is gone.
func orphanedSubCalls(all, due []*toolgatev1alpha1.ToolCall) []*toolgatev1alpha1.ToolCall {
	live := make(map[string]bool, len(all))
	for _, c := range all {
		live[c.Name] = !toolcalls.Deleting(c)
	}
	for _, c := range due {
		live[c.Name] = false
	}
	var out []*toolgatev1alpha1.ToolCall
	for _, c := range all {
		if c.Spec.ParentRef != nil && c.Status.Result != nil && !toolcalls.Deleting(c) && !live[c.Spec.ParentRef.Name] {
			out = append(out, c)
		}
	}
	return out
}

// plans is the session's planner: the cache alone (patch.go says why).
func (r *AgentSessionReconciler) plans() toolcalls.Planner {
	return toolcalls.Planner{Reader: r.Client, Index: r.index}
}

// reconcileDelete cancels every unsettled call, keeps scheduling so each
// settles and commits (in model order, past any missing index:
// toolcalls.DrainRelease), and lets the session go once all have.
func (r *AgentSessionReconciler) reconcileDelete(ctx context.Context, s *toolgatev1alpha1.AgentSession, calls []*toolgatev1alpha1.ToolCall) error {
	pending := false
	var cancel []*toolgatev1alpha1.ToolCall
	for _, c := range calls {
		if c.Committed() || ((toolcalls.OutOfLog(c.Status.Schedule.Refusal) || c.Spec.ParentRef != nil) && c.Status.Result != nil) {
			continue
		}
		pending = true
		if !c.Spec.CancelRequested {
			cancel = append(cancel, c)
		}
	}
	err := writeEach(ctx, cancel, func(ctx context.Context, base *toolgatev1alpha1.ToolCall) error {
		c := base.DeepCopy() // base is the cache's, read only
		c.Spec.CancelRequested = true
		return patch(ctx, r.Client, c, base, objectLocked)
	})
	if err != nil {
		return err
	}
	if pending {
		sp := toolcalls.PlanSession(s, calls, nil)
		_, err = r.schedule(ctx, sp.Logged(), sp.Work())
		return err
	}
	// Every call committed: they go with the session (a call holds no
	// owner reference to it, which saves each call a write). One request,
	// by the selectable field; each call's finalizer lets it go at once.
	if len(calls) > 0 {
		if err := r.Client.DeleteAllOf(ctx, &toolgatev1alpha1.ToolCall{}, client.InNamespace(s.Namespace), client.MatchingFields{toolcalls.IndexCallSession: s.Name}); err != nil {
			return fmt.Errorf("deleting the session's calls: %w", err)
		}
	}
	base := s.DeepCopy()
	controllerutil.RemoveFinalizer(s, sessionFinalizer)
	return client.IgnoreNotFound(patch(ctx, r.Client, s, base, objectUnlocked))
}

// profileCondition reports whether the session's profile is usable.
func (r *AgentSessionReconciler) profileCondition(ctx context.Context, s *toolgatev1alpha1.AgentSession) (metav1.Condition, *toolgatev1alpha1.ToolProfile) {
	cond := metav1.Condition{Type: toolgatev1alpha1.ConditionReady, ObservedGeneration: s.Generation}
	compiled, obj, cerr, err := r.Profiles.Resolve(ctx, types.NamespacedName{Namespace: s.Namespace, Name: s.Spec.ProfileRef.Name})
	switch {
	case err != nil:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionUnknown, toolgatev1alpha1.AgentSessionReasonProfileNotReady, "the ToolProfile could not be read"
	case obj == nil:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, toolgatev1alpha1.AgentSessionReasonProfileNotFound, "ToolProfile "+s.Spec.ProfileRef.Name+" does not exist; calls settle as profile_unavailable"
	case compiled == nil:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, toolgatev1alpha1.AgentSessionReasonProfileNotReady, cerr.Message
	default:
		if missing := unmountedProviders(&obj.Spec, r.Sandboxes, r.Approvals); missing != "" {
			cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, toolgatev1alpha1.AgentSessionReasonProfileNotReady, "ToolProfile "+obj.Name+": "+missing
			break
		}
		cond.Status, cond.Reason, cond.Message = metav1.ConditionTrue, toolgatev1alpha1.AgentSessionReasonActive, "the session accepts calls"
	}
	return cond, obj
}

// reconcileWorkspace creates the session's workspace claim from its
// template, owned by the session, and records the claim to mount.
// A claim the session did not create is never adopted (it could be another
// session's workspace, whose name is predictable): it is a conflict, and
// deleting the session leaves it alone. A claim is created only within the
// bounds of the session's profile (sandbox.workspace), and only once the
// profile exists.
func (r *AgentSessionReconciler) reconcileWorkspace(ctx context.Context, s *toolgatev1alpha1.AgentSession, profile *toolgatev1alpha1.ToolProfile) (conflict workspaceConflict, err error) {
	ws := s.Spec.Workspace
	switch {
	case ws == nil:
		s.Status.WorkspaceClaimName = ""
		return conflict, nil
	case ws.ExistingClaim != "":
		s.Status.WorkspaceClaimName = ws.ExistingClaim
		return conflict, nil
	}
	key := client.ObjectKey{Namespace: s.Namespace, Name: workspaceClaimName(s)}
	pvc := &corev1.PersistentVolumeClaim{}
	switch err := r.Client.Get(ctx, key, pvc); {
	case apierrors.IsNotFound(err) && profile == nil:
		return conflict, nil // the session is not Ready: nothing to mount yet
	case apierrors.IsNotFound(err):
		if refused := outOfBounds(ws.VolumeClaimTemplate, profile.Spec.Sandbox.Workspace); refused != "" {
			s.Status.WorkspaceClaimName = ""
			return workspaceConflict{toolgatev1alpha1.AgentSessionReasonWorkspaceRefused, refused}, nil
		}
		pvc = &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name},
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				StorageClassName: ws.VolumeClaimTemplate.StorageClassName,
				Resources: corev1.VolumeResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceStorage: ws.VolumeClaimTemplate.Size},
				},
			},
		}
		if err := controllerutil.SetControllerReference(s, pvc, r.Client.Scheme()); err != nil {
			return conflict, err
		}
		if err := r.Client.Create(ctx, pvc); err != nil {
			return conflict, fmt.Errorf("creating the workspace claim: %w", err)
		}
	case err != nil:
		return conflict, fmt.Errorf("reading the workspace claim: %w", err)
	case !metav1.IsControlledBy(pvc, s):
		s.Status.WorkspaceClaimName = ""
		return workspaceConflict{toolgatev1alpha1.AgentSessionReasonWorkspaceConflict,
			"PersistentVolumeClaim " + key.Name + " exists and was not created by this session; toolgate does not adopt it (delete it, or name another session)"}, nil
	}
	s.Status.WorkspaceClaimName = pvc.Name
	return conflict, nil
}

// workspaceConflict is why the session's workspace cannot be what it
// asks for: a Ready reason and its message; empty when there is none.
type workspaceConflict struct{ reason, message string }

// outOfBounds says why a claim template exceeds its profile's bounds, or
// "" when it does not.
func outOfBounds(t *toolgatev1alpha1.WorkspaceClaimTemplate, b *toolgatev1alpha1.WorkspaceBounds) string {
	if b == nil {
		return ""
	}
	class := ""
	if t.StorageClassName != nil {
		class = *t.StorageClassName
	}
	if len(b.StorageClassNames) > 0 && !slices.Contains(b.StorageClassNames, class) {
		if class == "" {
			return "the workspace claim template names no storage class (the cluster's default), which the profile's sandbox.workspace.storageClassNames does not list"
		}
		return "the workspace claim template's storage class " + class + " is not one the profile's sandbox.workspace.storageClassNames allows"
	}
	if b.MaxSize != nil && t.Size.Cmp(*b.MaxSize) > 0 {
		return "the workspace claim template asks for " + t.Size.String() + ", more than the profile's sandbox.workspace.maxSize " + b.MaxSize.String()
	}
	return ""
}

// workspaceClaimName is the deterministic name of a session's claim.
func workspaceClaimName(s *toolgatev1alpha1.AgentSession) string { return s.Name + "-workspace" }

// SetupWithManager registers the reconciler and its indexes.
func (r *AgentSessionReconciler) SetupWithManager(mgr ctrl.Manager) error {
	ctx := context.Background()
	if err := mgr.GetFieldIndexer().IndexField(ctx, &toolgatev1alpha1.AgentSession{}, indexSessionProfile, func(o client.Object) []string {
		return []string{o.(*toolgatev1alpha1.AgentSession).Spec.ProfileRef.Name}
	}); err != nil {
		return err
	}
	if r.MaxConcurrentReconciles <= 0 {
		r.MaxConcurrentReconciles = 4
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&toolgatev1alpha1.AgentSession{}).
		WithOptions(controllerOptions(r.MaxConcurrentReconciles)).
		Owns(&corev1.PersistentVolumeClaim{}).
		// A call's event queues its session, nothing more: the plan is
		// made in Reconcile, which the queue runs once for a burst.
		Watches(&toolgatev1alpha1.ToolCall{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			return []reconcile.Request{sessionOf(o)}
		})).
		Watches(&toolgatev1alpha1.ToolProfile{}, handler.EnqueueRequestsFromMapFunc(r.sessionsOfProfile)).
		Named("agentsession").
		Complete(conflictsRetried(r))
}

func (r *AgentSessionReconciler) sessionsOfProfile(ctx context.Context, o client.Object) []reconcile.Request {
	list := &toolgatev1alpha1.AgentSessionList{}
	if err := r.Client.List(ctx, list, client.InNamespace(o.GetNamespace()), client.MatchingFields{indexSessionProfile: o.GetName()}); err != nil {
		return nil
	}
	out := make([]reconcile.Request, len(list.Items))
	for i, s := range list.Items {
		out[i] = reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&s)}
	}
	return out
}

// countsDelay is how long the session waits to record what changes only
// its counts and cursor: the calls of a turn created and committed within
// it cost the session one status write, not one each.
const countsDelay = 2 * time.Second

// sessionOf is the request of a call's session.
func sessionOf(o client.Object) reconcile.Request {
	return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: o.(*toolgatev1alpha1.ToolCall).Spec.SessionRef.Name}}
}

// deferCounts says how long the status write of a reconcile that changed
// only the session's counts and cursor (currentTurn, committedCalls,
// commitCursor, nextSequence, counts) waits, 0 to write it now: such a
// change waits up to countsDelay from the first of them, so that a turn's
// calls cost one write. Anything else (a turn newly complete and its
// contexts, a condition) is written at once, with the counts.
func (r *AgentSessionReconciler) deferCounts(key types.NamespacedName, base, s *toolgatev1alpha1.AgentSession) time.Duration {
	if !onlyCounts(base.Status, s.Status) {
		return 0
	}
	now := r.Clock.Now()
	v, _ := r.counting.LoadOrStore(key, now)
	return max(0, countsDelay-now.Sub(v.(time.Time)))
}

// onlyCounts reports whether before and after differ in the session's
// counts and cursor alone.
func onlyCounts(before, after toolgatev1alpha1.AgentSessionStatus) bool {
	for _, st := range []*toolgatev1alpha1.AgentSessionStatus{&before, &after} {
		st.CurrentTurn, st.CommittedCalls, st.CommitCursor, st.NextSequence, st.Counts = 0, 0, nil, 0, toolgatev1alpha1.OutcomeCounts{}
	}
	return equality.Semantic.DeepEqual(before, after)
}
