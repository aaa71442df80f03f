package controller

import (
	"context"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/pipeline"
)

// sortModelOrder sorts calls by (turn, index), then name for determinism.
func sortModelOrder(calls []*toolgatev1alpha1.ToolCall) {
	slices.SortStableFunc(calls, func(a, b *toolgatev1alpha1.ToolCall) int {
		switch {
		case a.Spec.Turn != b.Spec.Turn:
			return cmpInt(a.Spec.Turn, b.Spec.Turn)
		case a.Spec.Index != b.Spec.Index:
			return cmpInt(int64(a.Spec.Index), int64(b.Spec.Index))
		}
		return strings.Compare(a.Name, b.Name)
	})
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// nextStage is where a call stands in the pipeline, from its status.
func nextStage(c *toolgatev1alpha1.ToolCall) pipeline.Stage {
	switch {
	case c.Status.Checkpoint != nil && c.Status.Checkpoint.Next != "":
		return pipeline.Stage(c.Status.Checkpoint.Next)
	case c.Status.Result != nil:
		return pipeline.StageDone
	}
	return pipeline.StageCall
}

func committed(c *toolgatev1alpha1.ToolCall) bool {
	return c.Status.Phase == toolgatev1alpha1.PhaseCommitted
}

// bodyDone: the call has nothing left to do before post-execute.
func bodyDone(c *toolgatev1alpha1.ToolCall) bool {
	switch nextStage(c) {
	case pipeline.StagePostExecute, pipeline.StageFinalize, pipeline.StageObserve, pipeline.StageResult, pipeline.StageDone:
		return true
	}
	return false
}

// passedPreExecute: the call's pre-execute decision is durable.
func passedPreExecute(c *toolgatev1alpha1.ToolCall) bool {
	switch nextStage(c) {
	case pipeline.StageCall, pipeline.StagePreExecute:
		return false
	}
	return true
}

// schedule moves the session's current turn forward: commit what settled in
// model order, release the first uncommitted call for post-execute, and
// admit calls to start.
func (r *AgentSessionReconciler) schedule(ctx context.Context, s *toolgatev1alpha1.AgentSession, calls []*toolgatev1alpha1.ToolCall) error {
	if err := r.refuseLateCalls(ctx, calls); err != nil {
		return err
	}
	turn := currentTurn(calls)
	if turn == nil {
		return nil
	}
	// Never below what the session already handed out: a deleted committed
	// call must not free its number.
	next := max(nextSequence(calls), s.Status.NextSequence)
	first := -1 // the first uncommitted call of the turn
	for i, c := range turn {
		if committed(c) {
			continue
		}
		if c.Status.Result == nil || first >= 0 {
			if first < 0 {
				first = i
			}
			continue
		}
		// Every earlier call of the turn has committed: commit this one.
		if err := r.commit(ctx, c, next); err != nil {
			return err
		}
		next++
	}
	if first < 0 {
		return nil
	}
	// The first uncommitted call of the turn has every earlier call
	// committed: it may settle as soon as its body is done. Releasing it
	// together with its admission saves a write.
	if u := turn[first]; !u.Status.Released && u.Status.ExecutionMode != "" {
		if err := r.patchCall(ctx, u, func(c *toolgatev1alpha1.ToolCall) { c.Status.Released = true }); err != nil {
			return err
		}
	}
	return r.admit(ctx, s, turn, first)
}

// refuseLateCalls refuses calls that arrived after a call later in model
// order had started (a later turn, or a higher index of the same turn):
// they can no longer be ordered before it. Each still settles (turn_closed)
// and commits.
func (r *AgentSessionReconciler) refuseLateCalls(ctx context.Context, calls []*toolgatev1alpha1.ToolCall) error {
	var started *toolgatev1alpha1.ToolCall // the latest call in model order that started
	for _, c := range calls {
		if c.Status.ExecutionMode != "" || committed(c) {
			started = c // calls are sorted in model order
		}
	}
	if started == nil {
		return nil
	}
	for _, c := range calls {
		before := c.Spec.Turn < started.Spec.Turn || (c.Spec.Turn == started.Spec.Turn && c.Spec.Index < started.Spec.Index)
		if before && c.Status.ExecutionMode == "" && c.Status.Result == nil && c.Status.SchedulingError == "" {
			log.FromContext(ctx).Info("call refused", "call", c.Name, "code", pipeline.CodeTurnClosed)
			if err := r.patchCall(ctx, c, func(c *toolgatev1alpha1.ToolCall) {
				c.Status.SchedulingError = string(pipeline.CodeTurnClosed)
			}); err != nil {
				return err
			}
		}
	}
	return nil
}

// currentTurn returns the calls of the earliest turn that has an
// uncommitted call: a turn starts only once the previous one committed.
func currentTurn(calls []*toolgatev1alpha1.ToolCall) []*toolgatev1alpha1.ToolCall {
	for i, c := range calls {
		if committed(c) {
			continue
		}
		j := i
		for j > 0 && calls[j-1].Spec.Turn == c.Spec.Turn {
			j--
		}
		k := i
		for k < len(calls) && calls[k].Spec.Turn == c.Spec.Turn {
			k++
		}
		return calls[j:k]
	}
	return nil
}

func nextSequence(calls []*toolgatev1alpha1.ToolCall) int64 {
	var next int64
	for _, c := range calls {
		if c.Status.CommitSequence != nil && *c.Status.CommitSequence >= next {
			next = *c.Status.CommitSequence + 1
		}
	}
	return next
}

// admit starts calls in model order. An exclusive call starts only when
// every earlier call has committed and nothing starts after it until it
// has; parallel calls start while the pool has room, each after the
// previous one's pre-execute is durable. Classification happens here, just
// before start, on the current profile.
func (r *AgentSessionReconciler) admit(ctx context.Context, s *toolgatev1alpha1.AgentSession, turn []*toolgatev1alpha1.ToolCall, first int) error {
	inflight := 0
	for _, c := range turn[first:] {
		if c.Status.ExecutionMode != "" && !committed(c) && !bodyDone(c) {
			inflight++
		}
	}
	var p *pipeline.Pipeline
	for i := first; i < len(turn); i++ {
		c := turn[i]
		if committed(c) {
			continue
		}
		if mode := c.Status.ExecutionMode; mode != "" {
			if mode == toolgatev1alpha1.ModeExclusive || !passedPreExecute(c) {
				return nil // a barrier, or pre-execute order
			}
			continue
		}
		if p == nil {
			p = r.classifier(ctx, s)
		}
		mode := toolgatev1alpha1.ModeExclusive
		if p != nil && p.Classify(requestOf(c)) == pipeline.Parallel {
			mode = toolgatev1alpha1.ModeParallel
		}
		switch {
		case mode == toolgatev1alpha1.ModeExclusive && i != first:
			return nil // waits for every earlier call to commit
		case mode == toolgatev1alpha1.ModeParallel && inflight >= int(s.Spec.MaxParallel):
			return nil // the pool is full
		}
		log.FromContext(ctx).V(1).Info("call admitted", "call", c.Name, "mode", mode)
		return r.patchCall(ctx, c, func(c *toolgatev1alpha1.ToolCall) {
			c.Status.ExecutionMode = mode
			c.Status.Released = c.Status.Released || i == first
		})
	}
	return nil
}

// classifier is the pipeline of the session's current profile, or nil
// (every call exclusive) when it is not usable.
func (r *AgentSessionReconciler) classifier(ctx context.Context, s *toolgatev1alpha1.AgentSession) *pipeline.Pipeline {
	compiled, _, _, err := r.Profiles.Resolve(ctx, types.NamespacedName{Namespace: s.Namespace, Name: s.Spec.ProfileRef.Name})
	if err != nil || compiled == nil {
		return nil
	}
	return pipeline.New(compiled.Registry, pipeline.Options{})
}

// commit appends a settled call to the session's log.
func (r *AgentSessionReconciler) commit(ctx context.Context, c *toolgatev1alpha1.ToolCall, seq int64) error {
	log.FromContext(ctx).Info("call committed", "call", c.Name, "sequence", seq, "outcome", c.Status.Result.Outcome)
	return r.patchCall(ctx, c, func(c *toolgatev1alpha1.ToolCall) {
		c.Status.CommitSequence = &seq
		c.Status.Phase = toolgatev1alpha1.PhaseCommitted
	})
}

// patchCall changes a call's status under optimistic locking: a conflict
// with the call's own controller is retried, never overwritten.
func (r *AgentSessionReconciler) patchCall(ctx context.Context, c *toolgatev1alpha1.ToolCall, edit func(*toolgatev1alpha1.ToolCall)) error {
	base := c.DeepCopy()
	edit(c)
	if err := r.Client.Status().Patch(ctx, c, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return err
	}
	statusWrites.WithLabelValues("agentsession").Inc()
	return nil
}
