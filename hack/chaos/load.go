package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// load is the agents: each session submits its turns in order, the next
// once the previous has committed, until all calls are submitted; then it
// waits for every call's result.
func (r *chaos) load(ctx context.Context) error {
	tools := []string{"exclusive", "parallel", "parallel", "idempotent", "idempotent", "flaky", "asked", "overtime"}
	perSession := (r.o.calls + r.o.sessions - 1) / r.o.sessions
	var wg sync.WaitGroup
	errs := make(chan error, r.o.sessions)
	left := r.o.calls
	for s := range r.o.sessions {
		n := min(perSession, left)
		left -= n
		seed := r.rng.Uint64()
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(s)))
			session := fmt.Sprintf("s%d", s)
			for turn := int64(0); n > 0; turn++ {
				size := min(n, 1+rng.IntN(4))
				n -= size
				var names []string
				for i := range size {
					tool := tools[rng.IntN(len(tools))]
					name := fmt.Sprintf("%s-t%d-i%d", session, turn, i)
					tc := &toolgatev1alpha1.ToolCall{ObjectMeta: metav1.ObjectMeta{Namespace: r.ns, Name: name}, Spec: toolgatev1alpha1.ToolCallSpec{
						SessionRef: toolgatev1alpha1.LocalObjectReference{Name: session}, Turn: turn, Index: int32(i), TurnSize: int32(size),
						CallID: name, Tool: tool, Arguments: fmt.Sprintf(`{"id":%q}`, name), Requester: "admin",
					}}
					if err := r.retry(ctx, func() error { return client.IgnoreAlreadyExists(r.c.Create(ctx, tc)) }); err != nil {
						errs <- err
						return
					}
					r.mu.Lock()
					r.calls[name] = &call{session: session, name: name, tool: tool, turn: turn, index: int32(i)}
					r.mu.Unlock()
					names = append(names, name)
					if r.o.cancelEvery > 0 && rng.IntN(r.o.cancelEvery) == 0 {
						go r.cancel(ctx, name, time.Duration(rng.IntN(2000))*time.Millisecond)
					}
				}
				if err := r.waitFor(ctx, r.o.timeout-time.Since(r.start), func() bool { return r.allCommitted(names) }); err != nil {
					errs <- fmt.Errorf("session %s turn %d never committed: %w", session, turn, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return errors.Join(slices.Collect(func(yield func(error) bool) {
		for e := range errs {
			if !yield(e) {
				return
			}
		}
	})...)
}

func (r *chaos) allCommitted(names []string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range names {
		if c := r.calls[n]; c == nil || c.committedAt.IsZero() {
			return false
		}
	}
	return true
}

func (r *chaos) cancel(ctx context.Context, name string, after time.Duration) {
	time.Sleep(after)
	_ = r.retry(ctx, func() error {
		tc := &toolgatev1alpha1.ToolCall{ObjectMeta: metav1.ObjectMeta{Namespace: r.ns, Name: name}}
		return r.c.Patch(ctx, tc, client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"cancelRequested":true}}`)))
	})
	r.mu.Lock()
	r.calls[name].cancelled = true
	r.mu.Unlock()
}

// retry repeats f through API server and etcd restarts.
func (r *chaos) retry(ctx context.Context, f func() error) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func (r *chaos) waitFor(ctx context.Context, limit time.Duration, ok func() bool) error {
	deadline := time.Now().Add(limit)
	for !ok() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %s", limit)
		}
		time.Sleep(200 * time.Millisecond)
	}
	return nil
}

// watch records when each call committed, as it happens (a watch, listed
// again after every interruption: the API server restarts too).
func (r *chaos) watch(done <-chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-done; cancel() }()
	for ctx.Err() == nil {
		list := &toolgatev1alpha1.ToolCallList{}
		if err := r.c.List(ctx, list, client.InNamespace(r.ns)); err != nil {
			time.Sleep(300 * time.Millisecond)
			continue
		}
		for i := range list.Items {
			r.see(&list.Items[i])
		}
		w, err := r.c.Watch(ctx, &toolgatev1alpha1.ToolCallList{}, client.InNamespace(r.ns), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.ResourceVersion}})
		if err != nil {
			time.Sleep(300 * time.Millisecond)
			continue
		}
		for ev := range w.ResultChan() {
			if tc, ok := ev.Object.(*toolgatev1alpha1.ToolCall); ok {
				r.see(tc)
			}
		}
		w.Stop()
	}
}

func (r *chaos) see(tc *toolgatev1alpha1.ToolCall) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.calls[tc.Name]
	if c == nil {
		return // created, not yet recorded: seen again at its next change or list
	}
	c.obj = tc.DeepCopy()
	if tc.Committed() && c.committedAt.IsZero() {
		c.committedAt = time.Now()
	}
}

// approve is the test approver: every pending question is approved by
// demo-approver (never the requester).
func (r *chaos) approve(done <-chan struct{}) {
	cfg := rest.CopyConfig(r.cfg)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "demo-approver"}
	approver, err := client.New(cfg, client.Options{Scheme: r.c.Scheme()})
	if err != nil {
		return
	}
	// demo-approver needs the approver role here.
	_, _ = r.kubectl("-n", r.ns, "create", "rolebinding", "approver", "--clusterrole=toolgate-approver", "--user=demo-approver")
	ctx := context.Background()
	for {
		select {
		case <-done:
			return
		case <-time.After(500 * time.Millisecond):
		}
		list := &toolgatev1alpha1.ApprovalRequestList{}
		if r.c.List(ctx, list, client.InNamespace(r.ns)) != nil {
			continue
		}
		for i := range list.Items {
			ar := &list.Items[i]
			if ar.Spec.Decision != nil || ar.Status.Phase != toolgatev1alpha1.ApprovalPending {
				continue
			}
			_ = approver.Patch(ctx, ar, client.RawPatch("application/merge-patch+json",
				fmt.Appendf(nil, `{"spec":{"decision":{"action":"Approve","decidedBy":"demo-approver","message":"chaos approver","requestUID":%q,"question":%q}}}`, ar.UID, ar.QuestionID())))
		}
	}
}
