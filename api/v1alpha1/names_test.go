package v1alpha1

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestCallStates(t *testing.T) {
	result := &ToolCallResult{Outcome: OutcomeSucceeded}
	notCommitted := []metav1.Condition{{Type: ToolCallConditionCommitted, Status: metav1.ConditionFalse}}
	unknown := []metav1.Condition{{Type: ToolCallConditionCommitted, Status: metav1.ConditionUnknown}}
	for _, tc := range []struct {
		name                      string
		status                    ToolCallStatus
		settled, committed, final bool
	}{
		{name: "new", status: ToolCallStatus{}},
		{name: "running", status: ToolCallStatus{Phase: PhaseRunning, Checkpoint: &PipelineCheckpoint{Next: "execute"}, Conditions: unknown}},
		{name: "result with a checkpoint: settling", status: ToolCallStatus{Result: result, Checkpoint: &PipelineCheckpoint{}, Conditions: unknown}},
		{name: "settled, waiting for its place", status: ToolCallStatus{Phase: PhaseSettled, Result: result, Conditions: unknown}, settled: true},
		{name: "committed", status: ToolCallStatus{Phase: PhaseCommitted, Result: result}, settled: true, committed: true, final: true},
		{name: "settled out of the log", status: ToolCallStatus{Phase: PhaseSettled, Result: result, Conditions: notCommitted}, settled: true, final: true},
		{name: "not committed without a result", status: ToolCallStatus{Conditions: notCommitted}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &ToolCall{Status: tc.status}
			if got := c.Settled(); got != tc.settled {
				t.Errorf("Settled() = %t, want %t", got, tc.settled)
			}
			if got := c.Committed(); got != tc.committed {
				t.Errorf("Committed() = %t, want %t", got, tc.committed)
			}
			if got := c.Final(); got != tc.final {
				t.Errorf("Final() = %t, want %t", got, tc.final)
			}
		})
	}
}
