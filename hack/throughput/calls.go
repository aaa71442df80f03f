package main

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// commit is when the bench saw a call committed, and its outcome.
type commit struct {
	at      time.Time
	outcome toolgatev1alpha1.Outcome
	code    string // the error code and message of an outcome other than success
	seq     int64
}

// watch counts every change to the objects a call's path writes (each a
// new resourceVersion: an effective write) and records commits.
func (b *bench) watch() error {
	for _, list := range []client.ObjectList{&toolgatev1alpha1.ToolCallList{}, &toolgatev1alpha1.AgentSessionList{}, &toolgatev1alpha1.ApprovalRequestList{}, &eventsv1.EventList{}} {
		w, err := b.c.Watch(b.ctx, list)
		if err != nil {
			return err
		}
		go b.count(list, w)
	}
	return nil
}

// count consumes a watch, and watches again from the last version seen
// when the API server ends it.
func (b *bench) count(list client.ObjectList, w watch.Interface) {
	rv := ""
	for {
		for ev := range w.ResultChan() {
			if ev.Type != watch.Added && ev.Type != watch.Modified && ev.Type != watch.Deleted {
				continue
			}
			o, ok := ev.Object.(client.Object)
			if !ok {
				continue
			}
			rv = o.GetResourceVersion()
			b.changes.Add(1)
			kind := fmt.Sprintf("%T", ev.Object)
			v, _ := b.byKind.LoadOrStore(kind[strings.LastIndex(kind, ".")+1:], &atomic.Int64{})
			v.(*atomic.Int64).Add(1)
			tc, isCall := ev.Object.(*toolgatev1alpha1.ToolCall)
			if isCall && ev.Type == watch.Added {
				b.held.Add(1)
			} else if isCall && ev.Type == watch.Deleted {
				b.held.Add(-1)
			}
			// A call on its way out was seen committed before: the
			// sustained run forgets a turn's commits once checked, and its
			// deletion must not bring them back.
			if isCall && tc.Committed() && tc.DeletionTimestamp == nil && ev.Type != watch.Deleted {
				b.mu.Lock()
				if _, seen := b.done[tc.Namespace+"/"+tc.Name]; !seen {
					b.commits.Add(1)
					b.done[tc.Namespace+"/"+tc.Name] = commit{at: time.Now(), outcome: tc.Status.Result.Outcome, code: strings.TrimSpace(tc.Status.Result.ErrorCode + " " + tc.Status.Result.Message + trail(tc)), seq: *tc.Status.Schedule.CommitSequence}
				}
				b.mu.Unlock()
			}
		}
		if b.ctx.Err() != nil {
			return
		}
		var err error
		for w, err = b.c.Watch(b.ctx, list, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: rv}}); err != nil; {
			fmt.Fprintln(os.Stderr, "throughput: watching again:", err)
			time.Sleep(time.Second)
			w, err = b.c.Watch(b.ctx, list, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: rv}})
		}
	}
}

// waitCommitted waits until every call has committed and returns the time
// from start to the last commit.
func (b *bench) waitCommitted(calls []*toolgatev1alpha1.ToolCall, start time.Time, limit time.Duration) (time.Duration, error) {
	deadline := start.Add(limit)
	progress, lastMissing, reported := time.Now(), -1, false
	for {
		var last time.Time
		missing := 0
		b.mu.Lock()
		for _, tc := range calls {
			c, ok := b.done[tc.Namespace+"/"+tc.Name]
			if !ok {
				missing++
				continue
			}
			if c.at.After(last) {
				last = c.at
			}
		}
		b.mu.Unlock()
		if missing == 0 {
			return last.Sub(start), b.checkOutcomes(calls)
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("%d of %d calls not committed after %s", missing, len(calls), limit)
		}
		if missing != lastMissing {
			progress, lastMissing = time.Now(), missing
		} else if !reported && time.Since(progress) > stallReport {
			reported = true
			b.stalls.Add(1)
			b.reportStall(calls)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stallReport is how long a turn may go without a commit before the bench
// prints where its calls stand.
const stallReport = 20 * time.Second

// reportStall prints the state of a turn's uncommitted calls and of their
// session, as the API server has them, to find what holds them.
func (b *bench) reportStall(calls []*toolgatev1alpha1.ToolCall) {
	var out strings.Builder
	fmt.Fprintf(&out, "stall: no commit for %s in turn %d of %s\n", stallReport, calls[0].Spec.Turn, calls[0].Spec.SessionRef.Name)
	s := &toolgatev1alpha1.AgentSession{}
	if err := b.c.Get(b.ctx, client.ObjectKey{Namespace: calls[0].Namespace, Name: calls[0].Spec.SessionRef.Name}, s); err == nil {
		fmt.Fprintf(&out, "  session: nextSequence %d committedTurn %d currentTurn %d committedCalls %d deleting %t\n",
			s.Status.NextSequence, s.Status.CommittedTurn, s.Status.CurrentTurn, s.Status.CommittedCalls, !s.DeletionTimestamp.IsZero())
	}
	list := &toolgatev1alpha1.ToolCallList{}
	if err := b.c.List(b.ctx, list, client.InNamespace(calls[0].Namespace)); err == nil {
		for i := range list.Items {
			tc := &list.Items[i]
			if tc.Spec.SessionRef.Name != calls[0].Spec.SessionRef.Name {
				continue
			}
			sch := tc.Status.Schedule
			fmt.Fprintf(&out, "  %s: phase %q mode %q released %t refusal %q deleting %t finalizers %v attempt %d next %q trail",
				tc.Name, tc.Status.Phase, sch.ExecutionMode, sch.Released, sch.Refusal, !tc.DeletionTimestamp.IsZero(), tc.Finalizers, tc.Status.Attempt, nextOf(tc))
			for _, r := range tc.Status.Stages {
				fmt.Fprintf(&out, " %s/%s", r.Stage, r.Verdict)
			}
			out.WriteString("\n")
		}
	}
	fmt.Fprint(os.Stderr, out.String())
}

// nextOf is a call's next stage as its checkpoint says.
func nextOf(tc *toolgatev1alpha1.ToolCall) string {
	if tc.Status.Checkpoint == nil {
		return ""
	}
	return tc.Status.Checkpoint.Next
}

// trail is the boundaries a call that did not succeed crossed, each with
// its time, to find the first that diverged; empty for a success.
func trail(tc *toolgatev1alpha1.ToolCall) string {
	if tc.Status.Result.Outcome == toolgatev1alpha1.OutcomeSucceeded {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "; attempt %d, created %s:", tc.Status.Attempt, tc.CreationTimestamp.Format("15:04:05"))
	for _, r := range tc.Status.Stages {
		fmt.Fprintf(&b, " %s/%s", r.Stage, r.Verdict)
		if r.Reason != "" {
			fmt.Fprintf(&b, "(%s)", r.Reason)
		}
		fmt.Fprintf(&b, "@%s", r.Time.Format("15:04:05"))
	}
	return b.String()
}

// checkOutcomes fails the run when a call did not succeed: a figure for
// calls that failed would measure nothing.
func (b *bench) checkOutcomes(calls []*toolgatev1alpha1.ToolCall) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	var bad []string
	last := map[string]commit{} // by session: the previous call's commit
	for _, tc := range calls {
		c := b.done[tc.Namespace+"/"+tc.Name]
		if c.outcome != toolgatev1alpha1.OutcomeSucceeded {
			bad = append(bad, tc.Name+" ("+string(c.outcome)+" "+c.code+")")
		}
		// The calls are given in model order per session: their places in
		// the log must follow it.
		if prev, ok := last[tc.Spec.SessionRef.Name]; ok && c.seq <= prev.seq {
			bad = append(bad, fmt.Sprintf("%s (sequence %d after %d: out of model order)", tc.Name, c.seq, prev.seq))
		}
		last[tc.Spec.SessionRef.Name] = c
	}
	if len(bad) > 0 {
		slices.Sort(bad)
		return fmt.Errorf("calls that did not succeed in %s: %s", calls[0].Namespace, strings.Join(bad[:min(len(bad), 10)], ", "))
	}
	return nil
}
