package controller

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	tu "github.com/toolgate/toolgate/internal/testutil"
)

// The durable log against a reference model (issue 51): a generator makes
// schedules of a session's life (turns of calls of several kinds, created
// out of order within a turn, resent, cancelled, approved, denied or left
// to expire, retried, timed out, expired by retention and then sent again,
// the manager restarted), runs
// each against the controllers, and compares every observable to what the
// seed's rules allow: one committed result per call, the log in model
// order with no gap, outcome precedence (cancellation replaces only a
// success; a failure after invocation stays), at most one body for a
// body that is not idempotent (and one for each attempt of one that is),
// exclusive calls as barriers, and the session's head derived from its
// calls.
//
// The corpus (modelSeeds) runs in make test; TOOLGATE_MODEL_SCHEDULES=N
// runs N more from TOOLGATE_MODEL_SEED (default: the time), the longer run
// of docs/reliability.md.

// modelKinds are the tools of the model's profile, by what their body
// does.
const (
	kindOK    = "ok"    // parallel-safe, succeeds
	kindSlow  = "slow"  // exclusive (a barrier), succeeds after a moment
	kindFail  = "fail"  // parallel-safe, fails (tool_error)
	kindFlaky = "flaky" // idempotent, 2 attempts: the first fails
	kindAsk   = "ask"   // asks a person, then succeeds
	kindLate  = "late"  // parallel-safe, runs past its 1 s timeout (timeout)
)

var modelKindList = []string{kindOK, kindSlow, kindFail, kindFlaky, kindAsk, kindLate}

// modelTools log "start ID" and "end ID" around their body.
func modelTools() []toolgatev1alpha1.ToolDefinition {
	const id = `id=$(sed 's/.*"id":"\([A-Za-z0-9-]*\)".*/\1/'); echo "start $id" >> log; `
	ok := shTool(kindOK, id+`echo "end $id" >> log; printf %s "$id"`).ConcurrencySafe("true")
	slow := shTool(kindSlow, id+`sleep 0.3; echo "end $id" >> log; printf %s "$id"`)
	fail := shTool(kindFail, id+`echo "end $id" >> log; echo broken >&2; exit 3`).ConcurrencySafe("true")
	flaky := shTool(kindFlaky, id+`if [ -e "seen-$id" ]; then echo "end $id" >> log; printf %s "$id"; else touch "seen-$id"; echo "end $id" >> log; exit 3; fi`)
	flaky.Idempotent = true
	flaky.Retry = &toolgatev1alpha1.RetryPolicy{MaxAttempts: 2, BackoffSeconds: 0}
	ask := shTool(kindAsk, id+`echo "end $id" >> log; printf %s "$id"`)
	late := shTool(kindLate, id+`sleep 5; echo "end $id" >> log; printf %s "$id"`).ConcurrencySafe("true").Obj()
	late.TimeoutSeconds = 1
	return []toolgatev1alpha1.ToolDefinition{ok.Obj(), slow.Obj(), fail.Obj(), flaky.Obj(), ask.Obj(), late}
}

// modelCall is one generated call and what the schedule does to it.
type modelCall struct {
	name        string
	turn        int64
	index, size int32
	kind        string
	cancel      bool   // the agent cancels it right after creating it
	resend      bool   // the agent sends it again (attaches)
	decision    string // kindAsk: Approve, Deny, or "" (let it expire)
}

// modelSchedule is one generated session.
type modelSchedule struct {
	seed        uint64
	maxParallel int32
	retention   bool // ttlSecondsAfterCommit 0: calls expire once their turn is complete
	restartAt   int  // restart the manager after creating this many calls (-1: never)
	calls       []*modelCall
	// lateResend is the call sent again once retention deleted it (-1:
	// none): a client resending what it sent long ago.
	lateResend int
}

func generateSchedule(seed uint64) *modelSchedule {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	s := &modelSchedule{seed: seed, maxParallel: int32(1 + r.IntN(3)), retention: r.IntN(2) == 0, restartAt: -1}
	turns := 1 + r.IntN(3)
	for t := range turns {
		size := int32(1 + r.IntN(3))
		var turn []*modelCall
		for i := range size {
			c := &modelCall{name: fmt.Sprintf("t%d-i%d", t, i), turn: int64(t), index: i, size: size, kind: modelKindList[r.IntN(len(modelKindList))]}
			c.cancel = r.IntN(6) == 0
			c.resend = r.IntN(5) == 0
			if c.kind == kindAsk {
				c.decision = []string{"Approve", "Approve", "Deny", "Deny", ""}[r.IntN(5)]
			}
			turn = append(turn, c)
		}
		// Within a turn the model's calls arrive in any order.
		r.Shuffle(len(turn), func(i, j int) { turn[i], turn[j] = turn[j], turn[i] })
		s.calls = append(s.calls, turn...)
	}
	if r.IntN(3) == 0 {
		s.restartAt = r.IntN(len(s.calls) + 1)
	}
	s.lateResend = -1
	if s.retention && r.IntN(2) == 0 {
		s.lateResend = r.IntN(len(s.calls))
	}
	return s
}

func (s *modelSchedule) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: maxParallel %d, retention %v, restart after %d, late resend %d;", s.seed, s.maxParallel, s.retention, s.restartAt, s.lateResend)
	for _, c := range s.calls {
		fmt.Fprintf(&b, " %s:%s", c.name, c.kind)
		if c.cancel {
			b.WriteString("+cancel")
		}
		if c.resend {
			b.WriteString("+resend")
		}
		if c.decision != "" {
			b.WriteString("+" + c.decision)
		}
	}
	return b.String()
}

// allowed are the results the seed's rules allow a call, as
// "Outcome/code", and how many times its body may start ("start" lines):
// min and max; restarted says the manager restarted during the schedule.
func (c *modelCall) allowed(restarted bool) (results []string, minStarts, maxStarts int) {
	ran := func(r string) []string {
		if c.cancel {
			// Before dispatch, or replacing a success; a failure stays.
			return []string{r, "Cancelled/cancelled"}
		}
		return []string{r}
	}
	switch c.kind {
	case kindOK, kindSlow:
		results, minStarts, maxStarts = ran("Succeeded/"), 1, 1
	case kindFail:
		results, minStarts, maxStarts = ran("Failed/tool_error"), 1, 1
	case kindLate:
		results, minStarts, maxStarts = ran("TimedOut/timeout"), 1, 1
	case kindFlaky:
		results, minStarts, maxStarts = ran("Succeeded/"), 2, 2
		if c.cancel {
			// Cancelled after its first attempt failed: the failure stays.
			results = append(results, "Failed/tool_error")
			minStarts = 0
		}
	case kindAsk:
		switch c.decision {
		case "Approve":
			results, minStarts, maxStarts = ran("Succeeded/"), 1, 1
		case "Deny":
			results, minStarts, maxStarts = ran("Denied/approval_rejected"), 0, 0
		default:
			results, minStarts, maxStarts = ran("Denied/approval_expired"), 0, 0
		}
		if c.cancel {
			results = append(results, "Cancelled/approval_cancelled")
		}
	}
	if c.cancel {
		minStarts = 0
	}
	if restarted && maxStarts > 0 {
		// A body in flight when the manager stopped is lost (the process
		// provider cannot re-attach): a body that is not idempotent is
		// never run again (interrupted); an idempotent one is, within the
		// bound of lost attempts.
		results = append(results, "Failed/interrupted")
		if c.kind == kindFlaky {
			maxStarts = 3
		}
	}
	return results, minStarts, maxStarts
}

// modelSeeds is the corpus make test runs.
var modelSeeds = []uint64{1, 2, 3, 5, 8, 13}

func modelSchedules() []uint64 {
	seeds := slices.Clone(modelSeeds)
	n, _ := strconv.Atoi(os.Getenv("TOOLGATE_MODEL_SCHEDULES"))
	base, err := strconv.ParseUint(os.Getenv("TOOLGATE_MODEL_SEED"), 10, 64)
	if err != nil {
		base = uint64(time.Now().UnixNano())
	}
	for i := range n {
		seeds = append(seeds, base+uint64(i))
	}
	return seeds
}

var _ = Describe("a session's durable log against the seed's model", Ordered, func() {
	BeforeAll(func() {
		ownManagers()
		startManager(env.Config)
	})

	for _, seed := range modelSchedules() {
		It(fmt.Sprintf("keeps every promise in schedule %d", seed), func() {
			s := generateSchedule(seed)
			By(s.String())
			runSchedule(s)
		})
	}
})

func runSchedule(s *modelSchedule) {
	ns := newNamespace()
	setup(processProfile(ns, modelTools()...).
		PreRule("ask-people", toolgatev1alpha1.ActionAsk, "", kindAsk).
		PreRule("allow-all", toolgatev1alpha1.ActionAllow, ""),
		func(w *tu.AgentSessionWrapper) {
			w.MaxParallel(s.maxParallel).ApprovalTimeout(10) // the least allowed
			if s.retention {
				w.Spec.TTLSecondsAfterCommit = ptr.To[int32](0)
			}
		})
	create := func(c *modelCall) *toolgatev1alpha1.ToolCall {
		tc := tu.MakeToolCall(ns, c.name, "s").Tool(c.kind, fmt.Sprintf(`{"id":%q}`, c.name)).At(c.turn, c.index).Of(c.size).Obj()
		tc.Spec.CallID = "call-" + c.name
		// Held, so that a call retention deletes can still be read.
		tc.Finalizers = append(tc.Finalizers, keepFinalizer)
		return tc
	}
	for i, c := range s.calls {
		if i == s.restartAt {
			stopRunningManager()
			startManager(env.Config)
		}
		Expect(k8s.Create(ctx, create(c))).To(Succeed(), c.name)
		if c.resend {
			// Sent again, as a client that lost the answer does: the API
			// server answers that it exists (the client attaches).
			err := k8s.Create(ctx, create(c))
			Expect(apierrors.IsAlreadyExists(err)).To(BeTrue(), "%s sent again: %v", c.name, err)
		}
		if c.cancel {
			tc := &toolgatev1alpha1.ToolCall{}
			tc.Namespace, tc.Name = ns, c.name
			Expect(k8s.Patch(ctx, tc, client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"cancelRequested":true}}`)))).To(Succeed())
		}
	}
	if s.restartAt == len(s.calls) {
		stopRunningManager()
		startManager(env.Config)
	}
	ordered := modelOrder(s.calls)
	// People answer the questions, in model order (a question is asked
	// only once the calls before it allow).
	for _, c := range ordered {
		if c.kind != kindAsk || c.decision == "" || c.cancel {
			continue
		}
		ar := &toolgatev1alpha1.ApprovalRequest{}
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: c.name}, ar)).To(Succeed())
		}, 60*time.Second, 50*time.Millisecond).Should(Succeed(), "the question of %s", c.name)
		decide(ar, toolgatev1alpha1.DecisionAction(c.decision))
	}

	// Every call settles, and commits, once.
	got := map[string]*toolgatev1alpha1.ToolCall{}
	for _, c := range s.calls {
		got[c.name] = committedCall(ns, c.name, 60*time.Second)
	}
	log := strings.Split(workspaceFile(ns, "log"), "\n")
	starts := func(name string) int { return strings.Count("\n"+strings.Join(log, "\n")+"\n", "\nstart "+name+"\n") }
	first := func(line string) int { return slices.Index(log, line) }
	last := func(line string) int {
		for i := len(log) - 1; i >= 0; i-- {
			if log[i] == line {
				return i
			}
		}
		return -1
	}

	// Model order: the log holds every call once, in (turn, index) order,
	// numbered without a gap.
	for i, c := range ordered {
		tc := got[c.name]
		Expect(tc.Status.Schedule.CommitSequence).NotTo(BeNil(), c.name)
		Expect(*tc.Status.Schedule.CommitSequence).To(Equal(int64(i)), "%s's place in the log", c.name)
		r := tc.Status.Result
		results, minStarts, maxStarts := c.allowed(s.restartAt >= 0)
		Expect(results).To(ContainElement(string(r.Outcome)+"/"+r.ErrorCode), "%s settled %s/%s (%s): %s", c.name, r.Outcome, r.ErrorCode, r.Message, stageTrace(tc))
		if r.ErrorCode == "interrupted" {
			minStarts = 0 // the manager stopped it before its first line
		}
		n := starts(c.name)
		Expect(n).To(BeNumerically(">=", minStarts), "%s's body starts", c.name)
		Expect(n).To(BeNumerically("<=", maxStarts), "%s's body starts", c.name)
		if r.Outcome == toolgatev1alpha1.OutcomeSucceeded {
			Expect(n).To(BeNumerically(">=", 1), "%s succeeded without its body", c.name)
		}
	}
	// An exclusive call is a barrier: every earlier call's body ended
	// before it started, and every later one started after it ended.
	for i, c := range ordered {
		if c.kind != kindSlow || starts(c.name) == 0 {
			continue
		}
		for j, o := range ordered {
			if starts(o.name) == 0 || j == i {
				continue
			}
			if j < i {
				Expect(last("end "+o.name)).To(BeNumerically("<", first("start "+c.name)), "%s ran across the barrier %s", o.name, c.name)
			} else {
				Expect(first("start "+o.name)).To(BeNumerically(">", last("end "+c.name)), "%s ran across the barrier %s", o.name, c.name)
			}
		}
	}
	// The session's head is derived from its calls.
	Eventually(func(g Gomega) {
		st := session(ns).Status
		g.Expect(st.NextSequence).To(Equal(int64(len(s.calls))))
		g.Expect(st.CommittedTurn).To(Equal(ordered[len(ordered)-1].turn))
		last := ordered[len(ordered)-1]
		g.Expect(st.CommitCursor).To(Equal(&toolgatev1alpha1.CallPosition{Turn: last.turn, Index: last.index}))
	}, 30*time.Second).Should(Succeed())
	if s.retention {
		// Retention marks every call deleted once its turn is complete;
		// the keeper lets go of them now.
		names := make([]string, len(s.calls))
		for i, c := range s.calls {
			names[i] = c.name
		}
		release(ns, names...)
	}
	if s.lateResend >= 0 {
		// Sent again once gone: its place in the log is taken, so it is
		// refused (duplicate_call, or turn_closed for an older turn) and
		// its body never runs again.
		c := s.calls[s.lateResend]
		Eventually(callGone(ns, c.name), 30*time.Second).Should(BeTrue(), "%s expired", c.name)
		before := starts(c.name)
		Expect(k8s.Create(ctx, create(c))).To(Succeed(), c.name)
		tc := &toolgatev1alpha1.ToolCall{}
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: c.name}, tc)).To(Succeed())
			g.Expect(tc.Status.Result).NotTo(BeNil())
		}, 60*time.Second, 50*time.Millisecond).Should(Succeed(), func() string {
			return fmt.Sprintf("%s sent again settles: phase %q, schedule %+v, conditions %+v", c.name, tc.Status.Phase, tc.Status.Schedule, tc.Status.Conditions)
		})
		Expect(tc.Status.Result.ErrorCode).To(BeElementOf("duplicate_call", "turn_closed"), "%s sent again: %s", c.name, tc.Status.Result.Message)
		log = strings.Split(workspaceFile(ns, "log"), "\n")
		Expect(starts(c.name)).To(Equal(before), "%s's body ran again when it was sent again", c.name)
		if tc.DeletionTimestamp.IsZero() {
			Expect(client.IgnoreNotFound(k8s.Delete(ctx, tc))).To(Succeed())
		}
		release(ns, c.name)
	}
}

// modelOrder is calls in (turn, index) order.
func modelOrder(calls []*modelCall) []*modelCall {
	ordered := slices.Clone(calls)
	slices.SortFunc(ordered, func(a, b *modelCall) int {
		if a.turn != b.turn {
			return int(a.turn - b.turn)
		}
		return int(a.index - b.index)
	})
	return ordered
}
