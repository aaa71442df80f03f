package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/profile"
	"github.com/toolgate/toolgate/internal/providers/approval"
	"github.com/toolgate/toolgate/internal/providers/sandbox"
	"github.com/toolgate/toolgate/internal/toolcalls"
)

// The phases of a ToolCall reconcile, in the order Reconcile runs them,
// and what they share.

// reconcileSession finds the call's session. Without one the call cannot
// be ordered; it still gets its one result (settleWithoutBody).
func (r *ToolCallReconciler) reconcileSession(ctx context.Context, s *callScope) (ctrl.Result, bool, error) {
	tc := s.tc
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
	return r.settleWithoutBody(ctx, s, pipeline.CodeSessionGone, "the call's AgentSession does not exist")
}

// settleWithoutBody is how a call that cannot run (its session or profile
// is gone, or the session refused it) gets its one result: the work of an
// attempt in flight is stopped first, then the state settles with code,
// and the step loop (reconcileSteps) drives it through finalize, observe
// and result and persists it like any other call: with the profile's
// pipeline when there is one (its finalizers and observers see every
// result), an empty one otherwise. The phases that need what is missing
// skip a settling call.
func (r *ToolCallReconciler) settleWithoutBody(ctx context.Context, s *callScope, code pipeline.Code, msg string) (ctrl.Result, bool, error) {
	if stopped, err := r.stopInFlight(ctx, s.tc, s.st); err != nil || !stopped {
		return ctrl.Result{RequeueAfter: time.Second}, true, err
	}
	s.st.Abort(code, msg, s.now)
	s.without = code
	if s.pipe == nil {
		s.pipe = pipeline.New(pipeline.NewRegistry(), pipeline.Options{Clock: r.Clock, PollInterval: r.PollInterval})
	}
	return ctrl.Result{}, false, nil
}

// finalizingPipe is the pipeline a call settled without its body finishes
// on: its profile's, when there is one, so that the tool's finalizeContent
// runs on this settlement as on any other (nil: none).
func finalizingPipe(compiled *profile.Compiled, opts pipeline.Options) *pipeline.Pipeline {
	if compiled == nil {
		return nil
	}
	return pipeline.New(compiled.Registry, opts)
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
	// As this process last wrote it, when the cache is behind: the
	// parent's write that its body ended wakes the call at once.
	parent = r.own.Current(parent)
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
	// A call without a session has no work to protect: it settles at
	// once.
	if controllerutil.ContainsFinalizer(s.tc, callFinalizer) || toolcalls.Deleting(s.tc) || s.session == nil {
		return ctrl.Result{}, false, nil
	}
	base := s.tc.DeepCopy()
	controllerutil.AddFinalizer(s.tc, callFinalizer)
	written, err := r.patchCall(ctx, s.tc, base, objectLocked)
	if err != nil {
		return ctrl.Result{}, true, fmt.Errorf("setting the finalizer: %w", err)
	}
	s.base = written
	return ctrl.Result{}, false, nil
}

// reconcileProfile builds the pipeline of the call's current profile, with
// the call's own approver and sandbox runner. A missing or unresolved
// profile settles the call with profile_unavailable (settleWithoutBody).
func (r *ToolCallReconciler) reconcileProfile(ctx context.Context, s *callScope) (ctrl.Result, bool, error) {
	if s.settling() {
		return ctrl.Result{}, false, nil
	}
	tc, session := s.tc, s.session
	key := types.NamespacedName{Namespace: tc.Namespace, Name: session.Spec.ProfileRef.Name}
	compiled, obj, cerr, err := r.Profiles.Resolve(ctx, key)
	if err != nil {
		return ctrl.Result{}, true, fmt.Errorf("resolving the profile: %w", err) // transient: never settle on it
	}
	opts := pipeline.Options{Clock: r.Clock, PollInterval: r.PollInterval}
	s.subject = subjectOf(tc)
	s.runner.job = sandbox.Job{
		Owner: client.ObjectKeyFromObject(tc), OwnerUID: tc.UID, Traceparent: tc.Annotations[toolgatev1alpha1.AnnotationTraceparent],
		Session: sandbox.Session{NamespacedName: client.ObjectKeyFromObject(session), UID: session.UID, ClaimName: session.Status.WorkspaceClaimName, WarmPods: warmPods(session)},
	}
	if ready := meta.FindStatusCondition(session.Status.Conditions, toolgatev1alpha1.ConditionReady); ready != nil &&
		ready.Reason == toolgatev1alpha1.AgentSessionReasonWorkspaceUnavailable && s.st.Next.Before(pipeline.StageExecute) {
		// Its sandbox could never mount the workspace: fail now, with the
		// cause, rather than after the sandbox's start bound.
		s.pipe = finalizingPipe(compiled, opts)
		return r.settleWithoutBody(ctx, s, pipeline.CodeWorkspaceUnavailable, "the session's workspace cannot be mounted: "+ready.Message)
	}
	if compiled == nil {
		msg := fmt.Sprintf("ToolProfile %s does not exist", key.Name)
		if cerr != nil {
			msg = fmt.Sprintf("ToolProfile %s is not Ready: %s", key.Name, cerr.Message)
		}
		// The profile may have gone away while a body ran: its work stops
		// first.
		return r.settleWithoutBody(ctx, s, pipeline.CodeProfileUnavailable, msg)
	}
	spec := obj.Spec
	if code, msg := neverRuns(tc, session, &spec, compiled, key.Name); code != "" && s.st.Next.Before(pipeline.StageExecute) {
		// A call that could never run: nobody is asked about it.
		s.pipe = finalizingPipe(compiled, opts)
		return r.settleWithoutBody(ctx, s, code, msg)
	}
	opts.Default = compiled.Default
	opts.ApprovalTimeout = time.Duration(spec.Approval.TimeoutSeconds) * time.Second
	if t := session.Spec.ApprovalTimeoutSeconds; t != nil {
		opts.ApprovalTimeout = time.Duration(*t) * time.Second
	}
	s.subject.Redact, s.subject.Notify, s.subject.RelayMessages = spec.Approval.RedactArguments, spec.Approval.Notify, spec.Approval.RelayApprovalMessages
	if a, ok := r.Approvals.Get(string(spec.Approval.Provider)); ok {
		opts.Approver = approval.For(a, s.subject)
	}
	s.runner.provider, _ = r.Sandboxes.Get(string(spec.Sandbox.Provider))
	s.runner.job.Policy = spec.Sandbox
	s.runner.tools = spec.RunnableTools()
	s.runner.recorded = func() string { return s.base.Status.Sandbox }
	s.runner.taken = func(ctx context.Context) []string { return r.sandboxesTaken(ctx, tc) }
	s.runner.prepared = func(attempt int) { r.mem.with(tc, func(m *memo) { m.prepared = attempt }) }
	opts.Runner = s.runner
	s.pipe = pipeline.New(compiled.Registry, opts)
	if _, ok := compiled.Registry.Lookup(tc.Spec.Tool); !ok && s.st.Next == pipeline.StageExecute {
		// The tool left the profile while its body ran: a call that cannot
		// run on, like one whose profile is gone.
		return r.settleWithoutBody(ctx, s, pipeline.CodeUnknownTool, fmt.Sprintf("tool %s left ToolProfile %s while its body ran", tc.Spec.Tool, key.Name))
	}
	return ctrl.Result{}, false, nil
}

// refusalMessages explain the session's refusals to the model.
var refusalMessages = map[pipeline.Code]string{
	pipeline.CodeTurnClosed:       "the session refused to schedule the call: a call later in model order had already started",
	pipeline.CodeDuplicateCall:    "the session refused the call: another call of the session has the same turn and index, or the same callID, and keeps the place; or its place was committed before (a call sent again after its predecessor's result expired is not run again)",
	pipeline.CodeTurnSizeMismatch: "the session refused the call: its turnSize disagrees with the other calls of its turn",
	pipeline.CodeNotSessionOwner:  "the session refused the call: its requester is not the session's owner",
	pipeline.CodeInvalidParent:    "the session refused the nested call: its parentRef does not name a call of the same session whose body is executing",
}

// reconcileRefusal settles a call the session refused to schedule (a
// refused call never started: nothing of it runs).
func (r *ToolCallReconciler) reconcileRefusal(ctx context.Context, s *callScope) (ctrl.Result, bool, error) {
	code := pipeline.Code(s.tc.Status.Schedule.Refusal)
	if code == "" || s.settling() {
		return ctrl.Result{}, false, nil
	}
	msg, ok := refusalMessages[code]
	if !ok {
		msg = "the session refused to schedule the call"
	}
	return r.settleWithoutBody(ctx, s, code, msg)
}

// reconcileSteps steps the pipeline as far as the schedule allows, writing
// the status before every stage with a side effect (asking a person,
// running the body) and once at the end, never when nothing changed.
func (r *ToolCallReconciler) reconcileSteps(ctx context.Context, s *callScope) (ctrl.Result, bool, error) {
	requeue, res, stop, err := r.stepWhileOpen(ctx, s)
	if err != nil || stop {
		return res, stop, err
	}
	return r.afterSteps(ctx, s, requeue)
}

// stepWhileOpen steps the pipeline while the call's gate is open (or
// opens), until it settles, waits, or the gate shuts; requeue is how long
// a wait asked for. It stops the reconcile (stop) while the body's
// sub-calls still run.
func (r *ToolCallReconciler) stepWhileOpen(ctx context.Context, s *callScope) (requeue time.Duration, res ctrl.Result, stop bool, err error) {
	callCtx := callContext(ctx, s.tc, s.session, s.parent)
	heldAt := toolcalls.HeldExecute(s.tc)
	childrenChecked := false
	for !s.st.Done() {
		if !childrenChecked && pipeline.BodyDone(s.st.Next) {
			childrenChecked = true
			if res, stop, err := r.awaitChildren(ctx, s); err != nil || stop {
				return 0, res, stop, err
			}
		}
		if !gateOpen(s) {
			opened, err := r.admitSelf(ctx, s)
			if err == nil && !opened {
				opened, err = r.releaseSelf(ctx, s)
			}
			if err != nil {
				return 0, ctrl.Result{}, true, err
			}
			if !opened {
				break
			}
		}
		// A dispatch gets its sandbox ready and named by the call's runner
		// (callRunner.Prepare) before its boundary is written below.
		progress, wait := s.pipe.Step(callCtx, s.st)
		if n := len(s.st.Records); !heldAt.IsZero() && n > 0 && s.st.Records[n-1].Stage == pipeline.StageExecute {
			// Collected again: the body ended when it first did.
			s.st.Records[n-1].Time, heldAt = heldAt, time.Time{}
		}
		r.remember(s.tc, s.st)
		if err := r.announceLive(ctx, s); err != nil {
			return 0, ctrl.Result{}, true, err
		}
		if progress == pipeline.Waiting {
			return wait, ctrl.Result{}, false, nil
		}
		if err := r.durableBeforeSideEffect(ctx, s); err != nil {
			return 0, ctrl.Result{}, true, err
		}
	}
	return 0, ctrl.Result{}, false, nil
}

// awaitChildren stops the reconcile while the ended body's sub-calls
// still run: they are its owned work, stopped and settled before it. The
// boundary is written so that they see the body ended (callContext); each
// one's result wakes the call.
func (r *ToolCallReconciler) awaitChildren(ctx context.Context, s *callScope) (ctrl.Result, bool, error) {
	settled, err := r.childrenSettled(ctx, s)
	if err != nil {
		return ctrl.Result{}, true, err
	}
	if settled {
		return ctrl.Result{}, false, nil
	}
	if err := r.persist(ctx, s); err != nil {
		return ctrl.Result{}, true, err
	}
	return ctrl.Result{RequeueAfter: r.PollInterval}, true, nil
}

// durableBeforeSideEffect writes the boundary when the next step has a
// side effect (asking a person, running the body), and says a question
// is asked.
func (r *ToolCallReconciler) durableBeforeSideEffect(ctx context.Context, s *callScope) error {
	if s.st.Next != pipeline.StageApproval && s.st.Next != pipeline.StageExecute {
		return nil
	}
	if err := r.persist(ctx, s); err != nil {
		return err
	}
	if s.st.Next == pipeline.StageApproval {
		emit(ctx, r.Client, r.Clock.Now(), regardingCall(s.tc), eventName(s.tc, "approval-requested"), corev1.EventTypeNormal,
			EventApprovalRequested, "Ask", "waiting for a person's approval: kubectl toolgate pending lists the request, kubectl toolgate approve or deny decides it", nil)
	}
	return nil
}

// afterSteps ends a reconcile's stepping: nothing to write for a call not
// admitted yet or one whose finished body waits for its turn; otherwise
// the status is written, and a settled call's durable result announced.
func (r *ToolCallReconciler) afterSteps(ctx context.Context, s *callScope, requeue time.Duration) (ctrl.Result, bool, error) {
	if !s.st.Done() && s.st.Next == pipeline.StageCall && len(s.st.Records) == 0 {
		// Not admitted yet: nothing has happened to the call to write. The
		// calls before it wake it (nextInLine); the poll is a safety net.
		return ctrl.Result{RequeueAfter: r.PollInterval}, true, nil
	}
	if !s.st.Done() && pipeline.BodyDone(s.st.Next) && !gateOpen(s) && pipeline.PastPreExecute(toolcalls.NextStage(s.base)) {
		// The body is done and the call waits for its turn: its output
		// stays in the sandbox and is collected again once the call is
		// released. The boundary before the body is durable; nothing
		// since is worth a write. (A call that got here without a body —
		// denied, say — writes its decision: the next call starts only
		// once it is durable.)
		return ctrl.Result{RequeueAfter: requeue}, true, nil
	}
	if s.st.Done() && r.preparedAhead(s.tc, s.st) {
		// Settled before the attempt it prepared became durable (a
		// cancellation as its boundary was written, say): that sandbox is
		// the call's work, stopped before the call settles.
		gone, err := r.release(ctx, s.tc)
		if err != nil {
			return ctrl.Result{}, true, fmt.Errorf("releasing the sandbox: %w", err)
		}
		if !gone {
			return ctrl.Result{RequeueAfter: r.PollInterval}, true, nil
		}
	}
	if err := r.persist(ctx, s); err != nil {
		return ctrl.Result{}, true, err
	}
	if !s.st.Done() {
		return ctrl.Result{RequeueAfter: requeue}, true, nil
	}
	r.mem.with(s.tc, func(m *memo) { m.prepared, m.live = 0, nil })
	r.announceDurable(ctx, s.tc)
	logger := log.FromContext(ctx)
	if seq := s.tc.Status.Schedule.CommitSequence; s.tc.Status.Phase == toolgatev1alpha1.PhaseCommitted && seq != nil {
		logger.Info("call committed", "call", s.tc.Name, "token", s.st.Token, "sequence", *seq, "outcome", s.st.Result.Outcome, "code", s.st.Result.Code)
	} else {
		logger.Info("call settled", "call", s.tc.Name, "token", s.st.Token, "outcome", s.st.Result.Outcome, "code", s.st.Result.Code)
	}
	return ctrl.Result{}, false, nil
}

// sandboxesTaken names the sandboxes the durable records of the other
// unsettled calls of the call's session name: never given to the call.
func (r *ToolCallReconciler) sandboxesTaken(ctx context.Context, tc *toolgatev1alpha1.ToolCall) []string {
	calls, err := r.plans().Calls(ctx, tc.Namespace, tc.Spec.SessionRef.Name)
	if err != nil {
		return nil // the cache answers: an error is its absence
	}
	var taken []string
	for _, c := range calls {
		if c.UID != tc.UID && c.Status.Result == nil && c.Status.Sandbox != "" {
			taken = append(taken, c.Status.Sandbox)
		}
	}
	return taken
}

// childrenSettled reports whether every nested call of the call has its
// result. Only a call whose body may ask for sub-calls has any: a call in
// the log (a nested call's own body asks in its parent's name).
func (r *ToolCallReconciler) childrenSettled(ctx context.Context, s *callScope) (bool, error) {
	if s.tc.Spec.ParentRef != nil || s.st.Attempt == 0 {
		return true, nil
	}
	calls, err := r.plans().Calls(ctx, s.tc.Namespace, s.tc.Spec.SessionRef.Name)
	if err != nil {
		return false, fmt.Errorf("listing the session's calls: %w", err)
	}
	for _, c := range calls {
		if toolcalls.NestedIn(c, s.tc.Name) && c.Status.Result == nil {
			return false, nil
		}
	}
	return true, nil
}

// reconcileSettled does what follows a durable result, idempotently, every
// time a settled call is reconciled: a crash right after the final status
// write loses none of it. It is the last phase.
func (r *ToolCallReconciler) reconcileSettled(ctx context.Context, s *callScope) (ctrl.Result, bool, error) {
	tc := s.tc
	if !tc.Settled() {
		return ctrl.Result{}, false, nil
	}
	if toolcalls.AskedApproval(tc) {
		subj := subjectOf(tc)
		for _, a := range r.Approvals.All() {
			if err := a.Close(ctx, subj, pipeline.Code(tc.Status.Result.ErrorCode)); err != nil {
				return ctrl.Result{}, true, fmt.Errorf("closing the approval request: %w", err)
			}
		}
	}
	workLeft := false
	if s.wasSettled || toolcalls.Deleting(tc) {
		// A pod left behind (by a crash between the result and its
		// cleanup) goes now, and providers forget the call's attempts; a
		// deleted call waits until nothing of it is left. A call settled
		// by this reconcile leaves it to the next, which its own write's
		// watch event brings.
		gone, err := r.release(ctx, tc)
		if err != nil {
			return ctrl.Result{}, true, fmt.Errorf("releasing the sandbox: %w", err)
		}
		workLeft = !gone
	}
	if tc.Status.Result.Outcome != toolgatev1alpha1.OutcomeSucceeded {
		// A success was counted as its result was written, and has no
		// Event whose loss this would make up for.
		r.announce(ctx, tc, durableSettlement(tc.Status.Result))
	}
	// Before a deleted call lets go: the record outlives it.
	r.auditCall(ctx, s)
	if toolcalls.Deleting(tc) {
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
	if _, err := r.patchCall(ctx, tc, base, objectLocked); err != nil {
		return ctrl.Result{}, true, client.IgnoreNotFound(err)
	}
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
	if !tc.Committed() || tc.Status.Schedule.Refusal == string(pipeline.CodeTurnClosed) {
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
	return session.DeletionTimestamp.IsZero() && toolcalls.CompleteThrough(session) < tc.Spec.Turn, nil
}

// stopInFlight stops the work of an attempt in flight before the call is
// settled without its pipeline (its session or profile is gone), through
// every mounted sandbox provider: which one ran it is in the profile that is
// gone. It reports whether no owned work is left.
func (r *ToolCallReconciler) stopInFlight(ctx context.Context, tc *toolgatev1alpha1.ToolCall, st *pipeline.State) (bool, error) {
	if st.Next != pipeline.StageExecute && !r.preparedAhead(tc, st) {
		return true, nil
	}
	return r.release(ctx, tc)
}

// preparedAhead reports whether this process prepared a sandbox for an
// attempt of the call beyond those st holds (its boundary was never
// written).
func (r *ToolCallReconciler) preparedAhead(tc *toolgatev1alpha1.ToolCall, st *pipeline.State) bool {
	ahead := false
	r.mem.with(tc, func(m *memo) { ahead = m.prepared > st.Attempt })
	return ahead
}

// release stops and forgets the call's work wherever it runs
// (releaseCall); it reports whether nothing is left.
func (r *ToolCallReconciler) release(ctx context.Context, tc *toolgatev1alpha1.ToolCall) (bool, error) {
	return releaseCall(ctx, r.Sandboxes, client.ObjectKeyFromObject(tc), tc.UID)
}

// reader reads from the API server itself when one is configured.
func (r *ToolCallReconciler) reader() client.Reader {
	if r.APIReader != nil {
		return r.APIReader
	}
	return r.Client
}

// remember records what this process knows of the current attempt, and
// restore puts it back into a state rebuilt from status.
func (r *ToolCallReconciler) remember(tc *toolgatev1alpha1.ToolCall, st *pipeline.State) {
	if st.Attempt == 0 {
		return
	}
	r.mem.with(tc, func(m *memo) {
		if m.live == nil {
			m.live = map[int]pipeline.LiveAttempt{}
		}
		m.live[st.Attempt] = st.Live()
	})
}

func (r *ToolCallReconciler) restore(tc *toolgatev1alpha1.ToolCall, st *pipeline.State) {
	r.mem.with(tc, func(m *memo) {
		if l, ok := m.live[st.Attempt]; ok {
			st.SetLive(l)
		}
	})
}

// Why a call was cancelled, for its result's message.
var (
	errCallDeleted     = errors.New("the ToolCall was deleted")
	errSessionDeleted  = errors.New("its AgentSession is being deleted")
	errParentCancelled = errors.New("its parent call was cancelled")
	errParentEnded     = errors.New("its parent call's body ended first")
)

// callContext is the caller's signal: cancelled once the call is deleted,
// cancellation is requested (of the call, or of a nested call's parent), a
// nested call's parent's body ended, or the session is being deleted, and
// never by the manager's own shutdown (a
// restart is not a cancellation). The cause says which. session is nil
// when it is gone.
func callContext(ctx context.Context, tc *toolgatev1alpha1.ToolCall, session *toolgatev1alpha1.AgentSession, parent *toolgatev1alpha1.ToolCall) context.Context {
	var why error
	switch {
	case toolcalls.Deleting(tc):
		why = errCallDeleted
	case session != nil && !session.DeletionTimestamp.IsZero():
		why = errSessionDeleted
	case tc.Spec.CancelRequested:
		why = context.Canceled // the caller asked: nothing to add
	case parent != nil && (parent.Spec.CancelRequested || toolcalls.Deleting(parent)):
		why = errParentCancelled
	case parent != nil && pipeline.BodyDone(toolcalls.NextStage(parent)): // a parent with its result too
		// A sub-call is its parent's owned work: once the parent's body
		// has ended (whatever the outcome: a timeout, say), nobody waits
		// for the sub-call's result, and it stops; the parent settles
		// only after it (childrenSettled).
		why = errParentEnded
	}
	callCtx := context.WithoutCancel(ctx)
	if why != nil {
		var cancel context.CancelCauseFunc
		callCtx, cancel = context.WithCancelCause(callCtx)
		cancel(why)
	}
	return callCtx
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
