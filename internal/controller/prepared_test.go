package controller

import (
	"context"
	"maps"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/providers/sandbox"
)

// preparing is the process sandbox with the pod provider's Prepare seam:
// Prepare makes a stand-in sandbox for the attempt and, like an agent
// cancelling at that moment, asks for the call's cancellation before the
// attempt's boundary is written (whose write then conflicts). Release
// removes the stand-in, and records whether the call had its result then.
// It acts only on calls of its spec's namespace: the manager it is mounted
// in also takes up calls an earlier spec left in flight (a CI run counted
// one such call's release as this spec's).
type preparing struct {
	sandbox.Provider
	mu   sync.Mutex
	ns   string
	made map[types.UID]bool
	// releasedWith counts the releases of a stand-in, by whether the
	// call had a result at that moment.
	releasedWith map[bool]int
}

func (p *preparing) Prepare(ctx context.Context, job sandbox.Job) error {
	p.mu.Lock()
	if job.Owner.Namespace != p.ns {
		p.mu.Unlock()
		return nil
	}
	p.made[job.OwnerUID] = true
	p.mu.Unlock()
	tc := &toolgatev1alpha1.ToolCall{}
	if err := k8s.Get(ctx, job.Owner, tc); err != nil {
		return err
	}
	base := tc.DeepCopy()
	tc.Spec.CancelRequested = true
	return k8s.Patch(ctx, tc, client.MergeFrom(base))
}

// Where names no sandbox, and Recorded has nothing to hand over: the
// stand-in is only what Prepare made.
func (p *preparing) Where(string) string { return "" }

func (p *preparing) Recorded(string, string) {}

var _ sandbox.Preparer = (*preparing)(nil)

func (p *preparing) Release(ctx context.Context, owner types.NamespacedName, uid types.UID) (bool, error) {
	p.mu.Lock()
	made := p.made[uid]
	p.mu.Unlock()
	if !made {
		return p.Provider.Release(ctx, owner, uid)
	}
	tc := &toolgatev1alpha1.ToolCall{}
	if err := k8s.Get(ctx, owner, tc); err != nil {
		return false, err
	}
	p.mu.Lock()
	delete(p.made, uid)
	p.releasedWith[tc.Status.Result != nil]++
	p.mu.Unlock()
	return false, nil // going; gone when asked again
}

var _ = Describe("a sandbox prepared for an attempt that never became durable", Ordered, func() {
	box := &preparing{made: map[types.UID]bool{}, releasedWith: map[bool]int{}}
	BeforeAll(func() {
		ownManagers()
		wrapSandbox = func(p sandbox.Provider) sandbox.Provider { box.Provider = p; return box }
		DeferCleanup(func() { wrapSandbox = func(p sandbox.Provider) sandbox.Provider { return p } })
		startManager(env.Config)
	})

	It("is stopped before the call settles", func() {
		ns := newNamespace()
		box.mu.Lock()
		box.ns = ns
		box.mu.Unlock()
		setup(processProfile(ns, shTool("work", "echo ran").Obj()).PreRule("allow", toolgatev1alpha1.ActionAllow, "", "work"))
		submit(ns, "c", "work", `{}`, 0, 0)
		tc := committedCall(ns, "c")
		Expect(tc.Status.Result.Outcome).To(Equal(toolgatev1alpha1.OutcomeCancelled))
		box.mu.Lock()
		defer box.mu.Unlock()
		Expect(box.made).To(BeEmpty(), "the stand-in sandbox is left")
		Expect(box.releasedWith).To(Equal(map[bool]int{false: 1}), "released once, before the result was written")
	})
})

var _ = Describe("a call whose arguments and result the cache leaves out", func() {
	It("runs with its whole arguments and commits its whole result", func() {
		ns := newNamespace()
		// The tool prints its arguments back, twice.
		setup(processProfile(ns, shTool("twice", "a=$(cat); printf '%s%s' \"$a\" \"$a\"").Obj()).PreRule("allow", toolgatev1alpha1.ActionAllow, "", "twice"))
		args := `{"text":"` + strings.Repeat("a", 150<<10) + `"}`
		submit(ns, "big", "twice", args, 0, 0)
		tc := committedCall(ns, "big", 60*time.Second)
		Expect(tc.Status.Result.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded), tc.Status.Result.Message)
		Expect(tc.Status.Result.Content).To(Equal(args+args), "the body saw the whole arguments")
		Expect(tc.Spec.Arguments).To(Equal(args))
	})
})

// discarding is the process sandbox that records, for each Discard of an
// attempt of its spec's namespace, whether the API server held the call's
// result at that moment.
type discarding struct {
	sandbox.Provider
	mu   sync.Mutex
	ns   string
	uids map[string]types.NamespacedName // attempt key -> call
	with map[string]bool                 // attempt key -> result stored
}

func (d *discarding) Run(ctx context.Context, job sandbox.Job) (sandbox.Result, error) {
	if job.Owner.Namespace == d.ns {
		d.mu.Lock()
		d.uids[job.Key] = job.Owner
		d.mu.Unlock()
	}
	return d.Provider.Run(ctx, job)
}

func (d *discarding) Discard(ctx context.Context, key string) {
	d.mu.Lock()
	owner, ok := d.uids[key]
	d.mu.Unlock()
	if ok {
		tc := &toolgatev1alpha1.ToolCall{}
		stored := k8s.Get(ctx, owner, tc) == nil && tc.Status.Result != nil
		d.mu.Lock()
		if before, seen := d.with[key]; !seen || before {
			d.with[key] = stored // a Discard without the result is kept
		}
		d.mu.Unlock()
	}
	d.Provider.Discard(ctx, key)
}

var _ = Describe("a settled call's work", Ordered, func() {
	box := &discarding{uids: map[string]types.NamespacedName{}, with: map[string]bool{}}
	BeforeAll(func() {
		ownManagers()
		wrapSandbox = func(p sandbox.Provider) sandbox.Provider { box.Provider = p; return box }
		DeferCleanup(func() { wrapSandbox = func(p sandbox.Provider) sandbox.Provider { return p } })
		startManager(env.Config)
	})

	It("ends for every attempt, once the API server holds the result", func() {
		ns := newNamespace()
		box.mu.Lock()
		box.ns = ns
		box.mu.Unlock()
		// Two attempts: the first fails (idempotent, retried), the second
		// succeeds.
		flaky := shTool("flaky", `if [ -e tried ]; then echo ok; else touch tried; exit 3; fi`).Obj()
		flaky.Idempotent = true
		flaky.Retry = &toolgatev1alpha1.RetryPolicy{MaxAttempts: 2}
		setup(processProfile(ns, flaky).PreRule("allow", toolgatev1alpha1.ActionAllow, "", "flaky"))
		submit(ns, "c", "flaky", `{}`, 0, 0)
		tc := committedCall(ns, "c")
		Expect(tc.Status.Result.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded), tc.Status.Result.Message)
		Eventually(func() map[string]bool {
			box.mu.Lock()
			defer box.mu.Unlock()
			return maps.Clone(box.with)
		}).Should(Equal(map[string]bool{
			sandbox.Key(tc.UID, 1): true,
			sandbox.Key(tc.UID, 2): true,
		}), "each attempt discarded once, after the result was written")
	})
})
