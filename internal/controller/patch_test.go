package controller

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/pipeline"
	tu "github.com/toolgate/toolgate/internal/testutil"
	"github.com/toolgate/toolgate/internal/toolcalls"
)

// scheduleWriters is who writes each field of status.schedule (patch.go):
// a field added to CallSchedule must be listed here, with its writers.
var scheduleWriters = map[string][]string{
	"ExecutionMode":  {"agentsession", "toolcall"}, // a nested call's admission; a call's own
	"Released":       {"agentsession", "toolcall"}, // a call that never starts, a nested call, a drained session; a call's own
	"CommitSequence": {"agentsession", "toolcall"}, // with released
	"Refusal":        {"agentsession"},
}

// TestScheduleWriters: every field of status.schedule has its writers
// listed, and the session's writes touch only the fields listed for it.
func TestScheduleWriters(t *testing.T) {
	typ := reflect.TypeOf(toolgatev1alpha1.CallSchedule{})
	var fields []string
	for i := range typ.NumField() {
		fields = append(fields, typ.Field(i).Name)
		if _, ok := scheduleWriters[typ.Field(i).Name]; !ok {
			t.Errorf("status.schedule.%s has no writers listed in scheduleWriters (and patch.go)", typ.Field(i).Name)
		}
	}
	for f := range scheduleWriters {
		if !slices.Contains(fields, f) {
			t.Errorf("scheduleWriters lists %s, which CallSchedule does not have", f)
		}
	}

	session := func(deleted bool) *toolgatev1alpha1.AgentSession {
		s := tu.MakeAgentSession("ns", "s", "p").Obj()
		s.Spec.MaxParallel = 2
		if deleted {
			now := metav1.Now()
			s.DeletionTimestamp = &now
		}
		return s
	}
	call := func(name string, turn int64, index int32) *tu.ToolCallWrapper {
		return tu.MakeToolCall("ns", name, "s").At(turn, index)
	}
	par := toolgatev1alpha1.ModeParallel
	for _, tt := range []struct {
		name    string
		deleted bool
		calls   []*tu.ToolCallWrapper
		writes  int
	}{
		{name: "a call of someone else is refused", calls: []*tu.ToolCallWrapper{call("a", 0, 0).Requester("other")}, writes: 1},
		{name: "a duplicate is refused", calls: []*tu.ToolCallWrapper{call("a", 0, 0).Admitted(par), call("b", 0, 0)}, writes: 1},
		{name: "a late call is refused and released", calls: []*tu.ToolCallWrapper{
			call("a", 0, 0).Of(2).Admitted(par).Committed(0), call("c", 1, 0).Admitted(par).NextStage(string(pipeline.StageExecute)), call("late", 0, 1).Of(2),
		}, writes: 1},
		{name: "a nested call is admitted", calls: []*tu.ToolCallWrapper{
			call("p", 0, 0).Admitted(par).Released(0).NextStage(string(pipeline.StageExecute)), call("n", 0, 0).Parent("p"),
		}, writes: 1},
		{name: "a deleted session releases its first call", deleted: true, calls: []*tu.ToolCallWrapper{call("a", 0, 0).Admitted(par).NextStage(string(pipeline.StagePostExecute))}, writes: 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			calls := make([]*toolgatev1alpha1.ToolCall, len(tt.calls))
			for i, w := range tt.calls {
				calls[i] = w.Obj()
			}
			toolcalls.SortModelOrder(calls)
			work := toolcalls.PlanSession(session(tt.deleted), calls, nil).Work()
			if len(work) != tt.writes {
				t.Fatalf("%d writes, want %d", len(work), tt.writes)
			}
			for _, w := range work {
				before := w.Call.Status.Schedule
				after := *before.DeepCopy()
				for _, edit := range w.Edits {
					edit(&after)
				}
				bv, av := reflect.ValueOf(before), reflect.ValueOf(after)
				changed := 0
				for i := range typ.NumField() {
					if reflect.DeepEqual(bv.Field(i).Interface(), av.Field(i).Interface()) {
						continue
					}
					changed++
					if f := typ.Field(i).Name; !slices.Contains(scheduleWriters[f], "agentsession") {
						t.Errorf("the session writes status.schedule.%s of %s, which patch.go leaves to the call", f, w.Call.Name)
					}
				}
				if changed == 0 {
					t.Errorf("a write of %s that changes nothing", w.Call.Name)
				}
			}
		})
	}
}

var _ = Describe("the one write path", func() {
	It("writes a call's status as field owner toolgate-manager", func() {
		ns := newNamespace()
		setup(processProfile(ns, shTool("echo", "cat").Obj()).PreRule("allow-all", toolgatev1alpha1.ActionAllow, ""))
		submit(ns, "c1", "echo", `{}`, 0, 0)
		c := committedCall(ns, "c1")
		var owners []string
		for _, m := range c.ManagedFields {
			if m.Subresource == "status" {
				owners = append(owners, m.Manager)
			}
		}
		Expect(owners).To(ContainElement(string(fieldOwner)))
	})
})

// TestConflictsAreRetriedNotErrors checks a reconcile whose locked write met
// a conflict is run again soon without an error (no Reconciler error with
// a stack trace), while any other error reaches the controller.
func TestConflictsAreRetriedNotErrors(t *testing.T) {
	conflict := apierrors.NewConflict(schema.GroupResource{Group: "toolgate.dev", Resource: "toolcalls"}, "c", errors.New("the object has been modified"))
	for _, c := range []struct {
		name    string
		res     reconcile.Result
		err     error
		wantErr bool
		want    time.Duration
	}{
		{"a conflict", reconcile.Result{}, conflict, false, conflictRetry},
		{"a wrapped conflict, asked back later", reconcile.Result{RequeueAfter: time.Minute}, fmt.Errorf("status: %w", conflict), false, conflictRetry},
		{"a conflict, asked back sooner", reconcile.Result{RequeueAfter: time.Millisecond}, conflict, false, time.Millisecond},
		{"another error", reconcile.Result{}, apierrors.NewForbidden(schema.GroupResource{Resource: "toolcalls"}, "c", errors.New("no")), true, 0},
	} {
		r := conflictsRetried(reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) { return c.res, c.err }))
		res, err := r.Reconcile(context.Background(), reconcile.Request{})
		if (err != nil) != c.wantErr || res.RequeueAfter != c.want {
			t.Errorf("%s: %+v %v", c.name, res, err)
		}
	}
}
