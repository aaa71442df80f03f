package main

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	tu "github.com/toolgate/toolgate/internal/testutil"
)

// limit measures the API server's status patches per second for ToolCalls
// carrying a settled call's status, by n writers for d, before the manager
// runs (nothing else writes).
func (b *bench) limit(n int, d time.Duration) (float64, error) {
	ns, err := b.namespace("limit")
	if err != nil {
		return 0, err
	}
	calls := make([]*toolgatev1alpha1.ToolCall, n)
	for i := range calls {
		calls[i] = tu.MakeToolCall(ns, fmt.Sprintf("c%d", i), "none").Obj()
		if err := b.c.Create(b.ctx, calls[i]); err != nil {
			return 0, err
		}
	}
	var total atomic.Int64
	var wg sync.WaitGroup
	end := time.Now().Add(d)
	errs := make(chan error, n)
	for _, tc := range calls {
		wg.Go(func() {
			for i := 0; time.Now().Before(end); i++ {
				base := tc.DeepCopy()
				settledStatus(tc, i)
				if err := b.c.Status().Patch(b.ctx, tc, client.MergeFrom(base)); err != nil {
					errs <- err
					return
				}
				total.Add(1)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		return 0, err
	}
	for _, tc := range calls {
		if err := b.c.Delete(b.ctx, tc); err != nil {
			return 0, err
		}
	}
	return float64(total.Load()) / d.Seconds(), nil
}

// settledStatus gives tc the status of a committed call, varied by i so
// that every patch is a change.
func settledStatus(tc *toolgatev1alpha1.ToolCall, i int) {
	now := metav1.NewMicroTime(time.Now())
	st := &tc.Status
	st.Phase, st.Token, st.Attempt, st.StartTime = toolgatev1alpha1.PhaseCommitted, fmt.Sprintf("tok-%d", i), 1, &now
	st.Stages = st.Stages[:0]
	for _, sv := range [][2]string{{"Call", "Admitted"}, {"PreExecute", "Allow"}, {"Guard", "Allow"}, {"Dispatch", "Dispatched"}, {"Execute", "OK"},
		{"PostExecute", "Accept"}, {"Finalize", "OK"}, {"Observe", "OK"}, {"Result", "Succeeded"}} {
		st.Stages = append(st.Stages, toolgatev1alpha1.StageRecord{Stage: sv[0], Verdict: sv[1], Time: metav1.NewTime(now.Time)})
	}
	seq := int64(i)
	st.Schedule = toolgatev1alpha1.CallSchedule{ExecutionMode: toolgatev1alpha1.ModeParallel, Released: true, CommitSequence: &seq}
	st.Result = &toolgatev1alpha1.ToolCallResult{Outcome: toolgatev1alpha1.OutcomeSucceeded, Content: fmt.Sprintf("hello %d\n", i), SettledAt: metav1.NewTime(now.Time)}
}
