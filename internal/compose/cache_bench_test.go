package compose

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/testenv"
)

// BenchmarkCachedCallMemory measures the manager's cache, side by side:
// the heap a synced ToolCall informer holds per call, for calls carrying
// 190 KiB of arguments and a 190 KiB result (what one tenant can send),
// with managed fields stripped only (the cache before StripCachedCall)
// and with the manager's cache (Cache). It reports heap bytes per call.
//
//	go test -run '^$' -bench CachedCallMemory ./internal/compose/
func BenchmarkCachedCallMemory(b *testing.B) {
	env, err := testenv.Start()
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = env.Stop() }()
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "mem-"}}
	if err := env.Client.Create(ctx, ns); err != nil {
		b.Fatal(err)
	}
	const calls = 100
	bulk := strings.Repeat("a", 190<<10)
	for i := range calls {
		tc := &toolgatev1alpha1.ToolCall{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: fmt.Sprintf("c%d", i)},
			Spec: toolgatev1alpha1.ToolCallSpec{SessionRef: toolgatev1alpha1.LocalObjectReference{Name: "missing"},
				CallID: fmt.Sprint(i), Tool: "t", Arguments: `{"a":"` + bulk + `"}`, TurnSize: 1, Requester: "agent"},
		}
		if err := env.Client.Create(ctx, tc); err != nil {
			b.Fatal(err)
		}
		tc.Status.Result = &toolgatev1alpha1.ToolCallResult{Outcome: toolgatev1alpha1.OutcomeSucceeded, Value: `"` + bulk + `"`, Content: bulk, SettledAt: metav1.Now()}
		if err := env.Client.Status().Update(ctx, tc); err != nil {
			b.Fatal(err)
		}
	}
	for _, tt := range []struct {
		name string
		opts cache.Options
	}{
		{"managed fields stripped", cache.Options{DefaultTransform: cache.TransformStripManagedFields()}},
		{"the manager's cache", Cache(Options{})},
	} {
		b.Run(tt.name, func(b *testing.B) {
			var held uint64
			for b.Loop() {
				held = cachedHeap(b, env, tt.opts)
			}
			b.ReportMetric(float64(held)/calls, "heapB/call")
		})
	}
}

// cachedHeap is the heap a synced ToolCall informer of opts holds.
func cachedHeap(b *testing.B, env *testenv.Env, opts cache.Options) uint64 {
	b.Helper()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	opts.Scheme = env.Scheme
	c, err := cache.New(env.Config, opts)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	defer func() { cancel(); <-stopped }() // the next measure starts without this cache
	if _, err := c.GetInformer(ctx, &toolgatev1alpha1.ToolCall{}); err != nil {
		b.Fatal(err)
	}
	go func() { defer close(stopped); _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		b.Fatal("cache not synced")
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	list := &toolgatev1alpha1.ToolCallList{}
	if err := c.List(ctx, list); err != nil || len(list.Items) == 0 {
		b.Fatalf("cache lists %d calls: %v", len(list.Items), err)
	}
	if after.HeapAlloc < before.HeapAlloc {
		return 0
	}
	return after.HeapAlloc - before.HeapAlloc
}
