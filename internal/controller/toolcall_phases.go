package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/providers/approval"
	"github.com/toolgate/toolgate/internal/providers/sandbox"
)

// The phases of a ToolCall reconcile, in the order Reconcile runs them.

// settled reports whether the call's result is durable: it is never
// rewritten, and only post-settlement work is left.
func settled(tc *toolgatev1alpha1.ToolCall) bool {
	return tc.Status.Result != nil && tc.Status.Checkpoint == nil
}

// reconcileSettled does what follows a durable result, idempotently, every
// time a settled call is reconciled: a crash right after the final status
// write loses none of it. It stops the reconcile of a settled call.
func (r *ToolCallReconciler) reconcileSettled(ctx context.Context, s *callScope) (ctrl.Result, bool, error) {
	tc := s.tc
	if !settled(tc) {
		return ctrl.Result{}, false, nil
	}
	if askedApproval(tc) {
		subj := subjectOf(tc)
		for _, a := range r.Approvals.All() {
			if err := a.Close(ctx, subj, pipeline.Code(tc.Status.Result.ErrorCode)); err != nil {
				return ctrl.Result{}, true, fmt.Errorf("closing the approval request: %w", err)
			}
		}
	}
	workLeft := false
	if !s.justSettled || deleting(tc) {
		// A pod left behind (by a crash between the result and its
		// cleanup) goes now, and providers forget the call's attempts; a
		// deleted call waits until nothing of it is left.
		gone, err := r.release(ctx, tc)
		if err != nil {
			return ctrl.Result{}, true, fmt.Errorf("releasing the sandbox: %w", err)
		}
		workLeft = !gone
	}
	if tc.Status.Result.Outcome != toolgatev1alpha1.OutcomeSucceeded {
		// A success was counted live, before its result was written, and
		// has no Event whose loss this would make up for.
		r.announce(ctx, tc, durableSettlement(tc.Status.Result))
	}
	if deleting(tc) {
		return r.letGo(ctx, s, workLeft)
	}
	return ctrl.Result{}, true, nil
}

// letGo removes the finalizer of a deleted, settled call once nothing of it
// is left: no sandbox work (the providers are asked again until they report
// none) and no place the session still needs (placeHeld).
func (r *ToolCallReconciler) letGo(ctx context.Context, s *callScope, workLeft bool) (ctrl.Result, bool, error) {
	tc := s.tc
	switch {
	case !controllerutil.ContainsFinalizer(tc, callFinalizer):
		return ctrl.Result{}, true, nil
	case workLeft:
		return ctrl.Result{RequeueAfter: time.Second}, true, nil
	}
	if held, err := r.placeHeld(ctx, s); err != nil || held {
		return ctrl.Result{}, true, err // the session's watch wakes the call
	}
	base := tc.DeepCopy()
	controllerutil.RemoveFinalizer(tc, callFinalizer)
	if err := r.Client.Patch(ctx, tc, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return ctrl.Result{}, true, client.IgnoreNotFound(err)
	}
	r.own.wrote(client.ObjectKeyFromObject(tc), base.ResourceVersion)
	log.FromContext(ctx).Info("deleted call let go", "call", tc.Name, "token", tc.Status.Token)
	return ctrl.Result{}, true, nil
}

// placeHeld reports whether the session still needs a deleted call to plan
// its turn: the call committed in a turn the session has not recorded
// complete. Until then the session counts a turn's committed calls among
// those present, and a missing one would hold back the rest of the turn.
// A call without a place in the log (out of it, nested, settled without a
// session) or in a closed turn (which has no size to wait for) is never
// held, nor is one whose session is going.
func (r *ToolCallReconciler) placeHeld(ctx context.Context, s *callScope) (bool, error) {
	tc := s.tc
	if !committed(tc) || tc.Status.Schedule.Refusal == string(pipeline.CodeTurnClosed) {
		return false, nil
	}
	session := s.session
	if session == nil {
		session = &toolgatev1alpha1.AgentSession{}
		err := r.Client.Get(ctx, client.ObjectKey{Namespace: tc.Namespace, Name: tc.Spec.SessionRef.Name}, session)
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("reading the session: %w", err)
		}
	}
	return session.DeletionTimestamp.IsZero() && completeThrough(session) < tc.Spec.Turn, nil
}

// reconcileSession finds the call's session. Without one the call cannot
// be ordered; it still gets its one result.
func (r *ToolCallReconciler) reconcileSession(ctx context.Context, s *callScope) (ctrl.Result, bool, error) {
	tc := s.tc
	s.st = stateOf(tc)
	r.restore(tc.UID, s.st)
	key := client.ObjectKey{Namespace: tc.Namespace, Name: tc.Spec.SessionRef.Name}
	session := &toolgatev1alpha1.AgentSession{}
	err := r.Client.Get(ctx, key, session)
	if err == nil {
		s.session = session
		return ctrl.Result{}, false, r.loadParent(ctx, s)
	}
	if !apierrors.IsNotFound(err) {
		return ctrl.Result{}, true, fmt.Errorf("reading the session: %w", err)
	}
	// The cache may not have seen a session created a moment ago: only the
	// API server's own answer settles the call.
	if err := r.reader().Get(ctx, key, session); !apierrors.IsNotFound(err) {
		if err == nil {
			return ctrl.Result{RequeueAfter: time.Second}, true, nil
		}
		return ctrl.Result{}, true, fmt.Errorf("confirming the session is gone: %w", err)
	}
	if stopped, err := r.stopInFlight(ctx, tc, s.st); err != nil || !stopped {
		return ctrl.Result{RequeueAfter: time.Second}, true, err
	}
	s.st.Abort(pipeline.CodeSessionGone, "the call's AgentSession does not exist", s.now)
	p := pipeline.New(pipeline.NewRegistry(), pipeline.Options{Clock: r.Clock})
	for !s.st.Done() {
		p.Step(context.Background(), s.st)
		r.announceLive(ctx, s)
	}
	if err := r.persist(ctx, s); err != nil {
		return ctrl.Result{}, true, err
	}
	return r.reconcileSettled(ctx, s)
}

// loadParent finds a nested call's parent: the call carries the parent's
// token (its execution identity, never just a name), and the parent's
// cancellation reaches it.
func (r *ToolCallReconciler) loadParent(ctx context.Context, s *callScope) error {
	ref := s.tc.Spec.ParentRef
	if ref == nil {
		return nil
	}
	parent := &toolgatev1alpha1.ToolCall{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: s.tc.Namespace, Name: ref.Name}, parent); err != nil {
		return client.IgnoreNotFound(err) // the session refuses a call without a parent
	}
	s.parent = parent
	if s.st.Request.Parent = parent.Status.Token; s.st.Request.Parent == "" {
		s.st.Request.Parent = "parent:" + ref.Name // still nested: no contexts
	}
	return nil
}

// reconcileFinalizer gives the call its finalizer before any work can
// start: deleting the call then stops its work first and still commits its
// result (letGo). The admission policy toolcall-stop-work sets it at
// creation, which saves this write; without the policy it is added here.
// The session deletes its calls when it goes (reconcileDelete), so a call
// needs no owner reference, and none is written.
func (r *ToolCallReconciler) reconcileFinalizer(ctx context.Context, s *callScope) (ctrl.Result, bool, error) {
	// A call being deleted takes no new finalizer (the API server refuses
	// it); it is cancelled instead, and nothing more starts.
	if controllerutil.ContainsFinalizer(s.tc, callFinalizer) || deleting(s.tc) {
		return ctrl.Result{}, false, nil
	}
	base := s.tc.DeepCopy()
	controllerutil.AddFinalizer(s.tc, callFinalizer)
	if err := r.Client.Patch(ctx, s.tc, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return ctrl.Result{}, true, fmt.Errorf("setting the finalizer: %w", err)
	}
	r.own.wrote(client.ObjectKeyFromObject(s.tc), base.ResourceVersion)
	s.base = s.tc.DeepCopy()
	return ctrl.Result{}, false, nil
}

// reconcileProfile builds the pipeline of the call's current profile, with
// the call's own approver and sandbox runner. A missing or unresolved
// profile settles the call with profile_unavailable, after stopping any
// body still running.
func (r *ToolCallReconciler) reconcileProfile(ctx context.Context, s *callScope) (ctrl.Result, bool, error) {
	tc, session := s.tc, s.session
	key := types.NamespacedName{Namespace: tc.Namespace, Name: session.Spec.ProfileRef.Name}
	compiled, obj, cerr, err := r.Profiles.Resolve(ctx, key)
	if err != nil {
		return ctrl.Result{}, true, fmt.Errorf("resolving the profile: %w", err) // transient: never settle on it
	}
	opts := pipeline.Options{Clock: r.Clock, PollInterval: r.PollInterval}
	s.subject = subjectOf(tc)
	s.runner.job = sandbox.Job{
		Owner: client.ObjectKeyFromObject(tc), OwnerUID: tc.UID,
		Workspace: sandbox.Workspace{Session: client.ObjectKeyFromObject(session), SessionUID: session.UID, ClaimName: session.Status.WorkspaceClaimName},
		WarmPods:  warmPods(session),
	}
	if compiled == nil {
		msg := fmt.Sprintf("ToolProfile %s does not exist", key.Name)
		if cerr != nil {
			msg = fmt.Sprintf("ToolProfile %s is not Ready: %s", key.Name, cerr.Message)
		}
		if s.st.Attempt > 0 {
			// The profile went away while a body ran: stop its work first.
			if stopped, err := r.stopInFlight(ctx, tc, s.st); err != nil || !stopped {
				return ctrl.Result{RequeueAfter: time.Second}, true, err
			}
		}
		s.st.Abort(pipeline.CodeProfileUnavailable, msg, s.now)
		s.pipe = pipeline.New(pipeline.NewRegistry(), opts)
		return ctrl.Result{}, false, nil
	}
	spec := obj.Spec
	opts.Default = compiled.Default
	opts.ApprovalTimeout = time.Duration(spec.Approval.TimeoutSeconds) * time.Second
	if t := session.Spec.ApprovalTimeoutSeconds; t != nil {
		opts.ApprovalTimeout = time.Duration(*t) * time.Second
	}
	s.subject.Redact = spec.Approval.RedactArguments
	if a, ok := r.Approvals.Get(string(spec.Approval.Provider)); ok {
		opts.Approver = approval.For(a, s.subject)
	}
	s.runner.provider, _ = r.Sandboxes.Get(string(spec.Sandbox.Provider))
	s.runner.job.Policy = spec.Sandbox
	s.runner.tools = spec.Tools
	opts.Runner = s.runner
	s.pipe = pipeline.New(compiled.Registry, opts)
	return ctrl.Result{}, false, nil
}

// refusalMessages explain the session's refusals to the model.
var refusalMessages = map[pipeline.Code]string{
	pipeline.CodeTurnClosed:       "the session refused to schedule the call: a call later in model order had already started",
	pipeline.CodeDuplicateCall:    "the session refused the call: another call of the session has the same turn and index, or the same callID; that call keeps the place",
	pipeline.CodeTurnSizeMismatch: "the session refused the call: its turnSize disagrees with the other calls of its turn",
	pipeline.CodeNotSessionOwner:  "the session refused the call: its requester is not the session's owner",
	pipeline.CodeInvalidParent:    "the session refused the nested call: its parentRef does not name a call of the same session whose body is executing",
}

// reconcileRefusal settles a call the session refused to schedule.
func (r *ToolCallReconciler) reconcileRefusal(_ context.Context, s *callScope) (ctrl.Result, bool, error) {
	if code := pipeline.Code(s.tc.Status.Schedule.Refusal); code != "" {
		msg, ok := refusalMessages[code]
		if !ok {
			msg = "the session refused to schedule the call"
		}
		s.st.Abort(code, msg, s.now)
	}
	return ctrl.Result{}, false, nil
}

// reconcileSteps steps the pipeline as far as the schedule allows, writing
// the status before every stage with a side effect (asking a person,
// running the body) and once at the end, never when nothing changed.
func (r *ToolCallReconciler) reconcileSteps(ctx context.Context, s *callScope) (ctrl.Result, bool, error) {
	callCtx := callContext(ctx, s.tc, s.session, s.parent)
	heldAt := heldExecute(s.tc)
	var requeue time.Duration
	for !s.st.Done() {
		if !gateOpen(s.tc, s.st) {
			opened, err := r.admitSelf(ctx, s)
			if err == nil && !opened {
				opened, err = r.releaseSelf(ctx, s)
			}
			if err != nil {
				return ctrl.Result{}, true, err
			}
			if !opened {
				break
			}
		}
		before := s.st.Next
		progress, wait := s.pipe.Step(callCtx, s.st)
		if before == pipeline.StageDispatch && s.st.Next == pipeline.StageExecute {
			// The boundary is written next: its sandbox first, so that a
			// successor finds it (idle) whenever this process dies.
			s.runner.prepare(ctx, s.st)
		}
		if n := len(s.st.Records); !heldAt.IsZero() && n > 0 && s.st.Records[n-1].Stage == pipeline.StageExecute {
			// Collected again: the body ended when it first did.
			s.st.Records[n-1].Time, heldAt = heldAt, time.Time{}
		}
		r.remember(s.tc.UID, s.st)
		r.announceLive(ctx, s)
		if progress == pipeline.Waiting {
			requeue = wait
			break
		}
		if s.st.Next == pipeline.StageApproval || s.st.Next == pipeline.StageExecute {
			// The next step has a side effect: make this boundary durable
			// first.
			if err := r.persist(ctx, s); err != nil {
				return ctrl.Result{}, true, err
			}
			if s.st.Next == pipeline.StageApproval {
				emit(ctx, r.Client, r.Clock.Now(), regardingCall(s.tc), eventName(s.tc, "approval-requested"), corev1.EventTypeNormal,
					EventApprovalRequested, "Ask", "waiting for a person's approval: kubectl toolgate pending lists the request, kubectl toolgate approve or deny decides it")
			}
		}
	}
	if !s.st.Done() && s.st.Next == pipeline.StageCall && len(s.st.Records) == 0 {
		// Not admitted yet: nothing has happened to the call to write. The
		// calls before it wake it (nextInLine); the poll is a safety net.
		return ctrl.Result{RequeueAfter: r.PollInterval}, true, nil
	}
	if !s.st.Done() && pipeline.BodyDone(s.st.Next) && !gateOpen(s.tc, s.st) && pipeline.PastPreExecute(nextStage(s.base)) {
		// The body is done and the call waits for its turn: its output
		// stays in the sandbox and is collected again once the call is
		// released. The boundary before the body is durable; nothing
		// since is worth a write. (A call that got here without a body —
		// denied, say — writes its decision: the next call starts only
		// once it is durable.)
		return ctrl.Result{RequeueAfter: requeue}, true, nil
	}
	if err := r.persist(ctx, s); err != nil {
		return ctrl.Result{}, true, err
	}
	if !s.st.Done() {
		return ctrl.Result{RequeueAfter: requeue}, true, nil
	}
	s.justSettled = true
	for a := 1; a <= s.st.Attempt; a++ {
		r.live.Delete(attemptKey{s.tc.UID, a})
		if s.runner.provider != nil {
			s.runner.provider.Forget(sandbox.Key(s.tc.UID, a))
		}
	}
	logger := log.FromContext(ctx)
	if seq := s.tc.Status.Schedule.CommitSequence; s.tc.Status.Phase == toolgatev1alpha1.PhaseCommitted && seq != nil {
		logger.Info("call committed", "call", s.tc.Name, "token", s.st.Token, "sequence", *seq, "outcome", s.st.Result.Outcome, "code", s.st.Result.Code)
	} else {
		logger.Info("call settled", "call", s.tc.Name, "token", s.st.Token, "outcome", s.st.Result.Outcome, "code", s.st.Result.Code)
	}
	return ctrl.Result{}, false, nil
}

// admitSelf starts a call the session's plan admits now: it is the next in
// model order, every call before it has its pre-execute decision behind
// it (durable: seen in the cache), and the pool or a barrier does not hold
// it back. It classifies itself just before it starts (the seed's
// reclassification) and its admission is written with its first boundary,
// which saves the session a write on the call and a round trip per call.
// Each call admits only itself, and only once the writes of every call
// before it are seen, so two calls never take one place; a stale cache only
// delays. The first call of a turn is released with its admission, as the
// session's plan says. It reports whether the call was admitted.
func (r *ToolCallReconciler) admitSelf(ctx context.Context, s *callScope) (bool, error) {
	tc := s.tc
	sch := &tc.Status.Schedule
	if sch.ExecutionMode != "" || s.session == nil || s.pipe == nil || tc.Spec.ParentRef != nil || sch.Refusal != "" || pipeline.PastPreExecute(s.st.Next) {
		return false, nil
	}
	me, calls, plan, err := r.planOfSelf(ctx, s, func(i, me int) pipeline.Mode {
		if i != me {
			return pipeline.Exclusive // another call's turn: not this call's to start
		}
		return s.pipe.Classify(requestOf(tc))
	})
	if err != nil || me < 0 || plan.Admit != me || slices.Contains(plan.Refuse, me) {
		return false, err
	}
	log.FromContext(ctx).V(1).Info("call admitted", "call", tc.Name, "mode", plan.AdmitMode)
	sch.ExecutionMode = toolgatev1alpha1.ExecutionMode(plan.AdmitMode)
	if plan.Release == me {
		seq := nextPlace(s.session, calls)
		sch.Released, sch.CommitSequence = true, &seq
	}
	return true, nil
}

// releaseSelf releases a call whose body is done when the session's plan
// would: it is the first uncommitted call of the current turn, every call
// before it committed (as the cache shows them, after their writes). Its
// place in the log is set here and written with its result, which saves
// the session a write and a round trip per call. It reports whether the
// call was released.
func (r *ToolCallReconciler) releaseSelf(ctx context.Context, s *callScope) (bool, error) {
	tc := s.tc
	sch := &tc.Status.Schedule
	if sch.Released || s.session == nil || tc.Spec.ParentRef != nil || sch.Refusal != "" || !pipeline.BodyDone(s.st.Next) {
		return false, nil
	}
	me, calls, plan, err := r.planOfSelf(ctx, s, func(int, int) pipeline.Mode { return pipeline.Exclusive })
	if err != nil || me < 0 || plan.Release != me {
		return false, err
	}
	seq := nextPlace(s.session, calls)
	sch.Released, sch.CommitSequence = true, &seq
	return true, nil
}

// planOfSelf is the session's plan as the call's reconcile sees it: the
// session's calls in its log from the cache (not copied: read only), this
// call's place among them
// (-1 when it has none) with its stage as this reconcile knows it (ahead of
// the cache), and planOf's answer; classify is asked of call i given this
// call's place me.
func (r *ToolCallReconciler) planOfSelf(ctx context.Context, s *callScope, classify func(i, me int) pipeline.Mode) (int, []*toolgatev1alpha1.ToolCall, pipeline.Plan, error) {
	all, err := r.currentCalls(ctx, s.session.Namespace, s.session.Name)
	if err != nil {
		return -1, nil, pipeline.Plan{}, fmt.Errorf("listing the session's calls: %w", err)
	}
	sortModelOrder(all)
	calls, _, _ := screen(s.session.Spec.Owner, all)
	me := slices.IndexFunc(calls, func(c *toolgatev1alpha1.ToolCall) bool { return c.UID == s.tc.UID })
	if me < 0 {
		return -1, nil, pipeline.Plan{}, nil
	}
	view := planView(calls, completeThrough(s.session))
	view[me].Next = s.st.Next
	return me, calls, planOf(s.session, view, func(i int) pipeline.Mode { return classify(i, me) }), nil
}

// nextInLine maps a call whose place in its session's plan changed to the
// calls that may now move (nextOf).
func (r *ToolCallReconciler) nextInLine(ctx context.Context, o client.Object) []reconcile.Request {
	tc := o.(*toolgatev1alpha1.ToolCall)
	calls, err := r.currentCalls(ctx, tc.Namespace, tc.Spec.SessionRef.Name)
	if err != nil {
		return nil
	}
	return nextOf(calls)
}

// currentCalls are a session's calls as this process knows them: from the
// cache, not copied, or as this process last wrote them while the cache is
// behind that write (ownWrites.current). Read only.
func (r *ToolCallReconciler) currentCalls(ctx context.Context, namespace, session string) ([]*toolgatev1alpha1.ToolCall, error) {
	calls, err := cachedCalls(ctx, r.Client, namespace, session)
	if err != nil {
		return nil, err
	}
	for i, c := range calls {
		calls[i] = r.own.current(c)
	}
	return calls, nil
}

// cachedCalls lists a session's calls from the cache without copying them
// (read only).
func cachedCalls(ctx context.Context, c client.Reader, namespace, session string) ([]*toolgatev1alpha1.ToolCall, error) {
	list := &toolgatev1alpha1.ToolCallList{}
	if err := c.List(ctx, list, client.InNamespace(namespace), client.MatchingFields{indexCallSession: session}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	out := make([]*toolgatev1alpha1.ToolCall, len(list.Items))
	for i := range list.Items {
		out[i] = &list.Items[i]
	}
	return out, nil
}

// nextOf are the calls of a session that may move: the first uncommitted
// one in model order (which may release itself) and the first that has not
// started (which may admit itself).
func nextOf(items []*toolgatev1alpha1.ToolCall) []reconcile.Request {
	calls := make([]*toolgatev1alpha1.ToolCall, 0, len(items))
	for _, c := range items {
		if !committed(c) && c.Spec.ParentRef == nil && c.Status.Schedule.Refusal == "" {
			calls = append(calls, c)
		}
	}
	sortModelOrder(calls)
	var out []reconcile.Request
	if len(calls) > 0 {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(calls[0])})
	}
	for i, c := range calls {
		if v := turnCallOf(c); !v.Started() && !v.BodyDone() {
			if i > 0 {
				out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(c)})
			}
			break
		}
	}
	return out
}

// planMoved reports whether a call's update may let another call of its
// session start or settle: what the plan reads of it changed.
func planMoved(before, after client.Object) bool {
	return turnCallOf(before.(*toolgatev1alpha1.ToolCall)) != turnCallOf(after.(*toolgatev1alpha1.ToolCall))
}

// warmPods is how many sandboxes the provider may keep ready for the
// session's next calls: spec.warmPods (default 1), never more than
// maxParallel.
func warmPods(session *toolgatev1alpha1.AgentSession) int {
	n := int32(1)
	if session.Spec.WarmPods != nil {
		n = *session.Spec.WarmPods
	}
	return int(max(0, min(n, session.Spec.MaxParallel)))
}

// heldExecute is when the body ended of a call whose output is held by the
// sandbox (PipelineCheckpoint.BodyHeld); zero otherwise.
func heldExecute(tc *toolgatev1alpha1.ToolCall) time.Time {
	stages := tc.Status.Stages
	if cp := tc.Status.Checkpoint; cp == nil || !cp.BodyHeld || len(stages) == 0 || stages[len(stages)-1].Stage != string(pipeline.StageExecute) {
		return time.Time{}
	}
	return stages[len(stages)-1].Time.Time
}

// Why a call was cancelled, for its result's message.
var (
	errCallDeleted     = errors.New("the ToolCall was deleted")
	errSessionDeleted  = errors.New("its AgentSession is being deleted")
	errParentCancelled = errors.New("its parent call was cancelled")
)

// callContext is the caller's signal: cancelled once the call is deleted,
// cancellation is requested (of the call, or of a nested call's parent) or
// the session is being deleted, and never by the manager's own shutdown (a
// restart is not a cancellation). The cause says which.
func callContext(ctx context.Context, tc *toolgatev1alpha1.ToolCall, session *toolgatev1alpha1.AgentSession, parent *toolgatev1alpha1.ToolCall) context.Context {
	var why error
	switch {
	case deleting(tc):
		why = errCallDeleted
	case !session.DeletionTimestamp.IsZero():
		why = errSessionDeleted
	case tc.Spec.CancelRequested:
		why = context.Canceled // the caller asked: nothing to add
	case parent != nil && (parent.Spec.CancelRequested || deleting(parent)):
		why = errParentCancelled
	}
	callCtx := context.WithoutCancel(ctx)
	if why != nil {
		var cancel context.CancelCauseFunc
		callCtx, cancel = context.WithCancelCause(callCtx)
		cancel(why)
	}
	return callCtx
}

// gateOpen applies the session's schedule: a call starts only once the
// session admitted it (or it is cancelled, deleted or refused, which
// settles it at once), and settles only once the session released it. A
// call kept out of the session's log settles at once: it has no place to
// wait for.
func gateOpen(tc *toolgatev1alpha1.ToolCall, st *pipeline.State) bool {
	sch := tc.Status.Schedule
	switch {
	case outOfLog(sch.Refusal):
		return true
	case !pipeline.PastPreExecute(st.Next):
		return sch.ExecutionMode != "" || tc.Spec.CancelRequested || deleting(tc) || sch.Refusal != ""
	case pipeline.BodyDone(st.Next):
		return sch.Released
	}
	return true
}

// persist writes the call's status when the state changed it.
func (r *ToolCallReconciler) persist(ctx context.Context, s *callScope) error {
	tc := s.tc
	before := len(s.base.Status.Stages)
	writeState(tc, s.st, r.Clock.Now())
	if equality.Semantic.DeepEqual(s.base.Status, tc.Status) {
		return nil // nothing new: no API write
	}
	if err := r.Client.Status().Patch(ctx, tc, client.MergeFromWithOptions(s.base, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("writing the call's status: %w", err)
	}
	written := tc.DeepCopy()
	r.own.wroteCall(s.base.ResourceVersion, written)
	statusWrites.WithLabelValues("toolcall").Inc()
	r.observeStages(s, before)
	moved := planMoved(s.base, written)
	s.base = written // read only, as ownWrites keeps it
	if moved {
		r.wakeNext(ctx, written)
	}
	return nil
}

// wakeNext wakes the calls of tc's session that may move now that tc's
// write is durable (nextOf, planning from it: ownWrites.current), without
// waiting for the write's watch event (nextInLine, which follows).
func (r *ToolCallReconciler) wakeNext(ctx context.Context, tc *toolgatev1alpha1.ToolCall) {
	if tc.Spec.ParentRef != nil {
		return
	}
	calls, err := r.currentCalls(ctx, tc.Namespace, tc.Spec.SessionRef.Name)
	if err != nil {
		return
	}
	for _, req := range nextOf(calls) {
		if req.Name != tc.Name {
			r.Wake.Notify(req.NamespacedName)
		}
	}
}

// observeStages counts the boundaries a write made durable, from the
// state's records (precise times; the status keeps whole seconds).
func (r *ToolCallReconciler) observeStages(s *callScope, before int) {
	recs := s.st.Records
	for i := min(before, len(recs)); i < len(recs); i++ {
		rec := recs[i]
		stageBoundaries.WithLabelValues(string(rec.Stage), rec.Verdict).Inc()
		if i > 0 && !rec.Time.Before(recs[i-1].Time) {
			stageSeconds.WithLabelValues(string(rec.Stage)).Observe(rec.Time.Sub(recs[i-1].Time).Seconds())
		}
		if rec.Stage == pipeline.StageApproval && !s.st.AskedAt.IsZero() {
			approvalWait.WithLabelValues(rec.Verdict).Observe(rec.Time.Sub(s.st.AskedAt).Seconds())
		}
	}
}

// reader reads from the API server itself when one is configured.
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

// remember records what this process knows of the current attempt, and
// restore puts it back into a state rebuilt from status.
func (r *ToolCallReconciler) remember(uid types.UID, st *pipeline.State) {
	if st.Attempt == 0 {
		return
	}
	r.live.Store(attemptKey{uid, st.Attempt}, st.Live())
}

func (r *ToolCallReconciler) restore(uid types.UID, st *pipeline.State) {
	if v, ok := r.live.Load(attemptKey{uid, st.Attempt}); ok {
		st.SetLive(v.(pipeline.LiveAttempt))
	}
}

// announceWindow is how long after settling a call's outcome is still
// announced by a manager that did not see it settle: long enough to cover a
// crash right after the final write, short enough that a restart does not
// re-announce old calls.
const announceWindow = 10 * time.Minute

// settlement is what announce says of a call's outcome.
type settlement struct {
	outcome toolgatev1alpha1.Outcome
	code    string
	at      time.Time
}

// durableSettlement is the settlement of a call's written result.
func durableSettlement(res *toolgatev1alpha1.ToolCallResult) settlement {
	return settlement{outcome: res.Outcome, code: res.ErrorCode, at: res.SettledAt.Time}
}

// announceLive is the live tools/result of the seed: once the observe stage
// has run, the frozen outcome is announced before the durable result is
// written. A crash between the two repeats the stages from the last
// boundary, and a failure's Event, named after the call, is not created
// twice.
func (r *ToolCallReconciler) announceLive(ctx context.Context, s *callScope) {
	if s.st.Next != pipeline.StageResult || s.st.Result == nil {
		return
	}
	res := s.st.Result
	r.announce(ctx, s.tc, settlement{outcome: toolgatev1alpha1.Outcome(res.Outcome), code: string(res.Code), at: r.Clock.Now()})
}

// announce counts the call's outcome in the metrics and, for an outcome
// other than success, emits its Settled Event (Warning): someone may act
// on a failure, nobody on a success, which would cost a write per call.
// A failure is counted once per outcome: the Event's name is derived from
// the call and the outcome, so a second manager (or this one after a
// restart) finds it already exists and counts nothing. A success is
// counted once per process; only a crash between the live and the durable
// result lets the next process count it again. Only when such a crash
// loses the body's work (the process sandbox, a pod deleted by someone
// else) can the durable outcome differ from the live one; it is then
// announced too.
// Events are for people and the result does not depend on one: a failure
// to create one is logged, and the metrics still count the call.
func (r *ToolCallReconciler) announce(ctx context.Context, tc *toolgatev1alpha1.ToolCall, res settlement) {
	key := client.ObjectKeyFromObject(tc)
	if uid, done := r.announced.Load(key); done && uid == tc.UID {
		return
	}
	if r.Clock.Since(res.at) > announceWindow {
		r.announced.Store(key, tc.UID)
		return
	}
	if res.outcome == toolgatev1alpha1.OutcomeSucceeded || emit(ctx, r.Client, r.Clock.Now(), regardingCall(tc), eventName(tc, strings.ToLower(string(res.outcome))),
		corev1.EventTypeWarning, EventSettled, "Settle", fmt.Sprintf("outcome %s, code %s", res.outcome, orNone(res.code))) {
		callsSettled.WithLabelValues(toolLabel(tc), string(res.outcome), orNone(res.code)).Inc()
		callDuration.WithLabelValues(string(res.outcome)).Observe(res.at.Sub(tc.CreationTimestamp.Time).Seconds())
	}
	r.announced.Store(key, tc.UID)
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// subjectOf is what an approval provider is asked about: the call, named
// with its session.
func subjectOf(tc *toolgatev1alpha1.ToolCall) approval.Subject {
	return approval.Subject{Owner: tc, Session: tc.Spec.SessionRef.Name}
}

// askedApproval reports whether pre-execute asked a person about the call.
func askedApproval(tc *toolgatev1alpha1.ToolCall) bool {
	for _, r := range tc.Status.Stages {
		if r.Stage == string(pipeline.StagePreExecute) && r.Verdict == pipeline.VerdictAsk {
			return true
		}
	}
	return false
}
