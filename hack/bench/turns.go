package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// A turn of parallel calls, on one node and on every node of the cluster
// side by side: how much a second node adds where pods start in parallel.

// turnSession runs the parallel turns: cold pods, as many at once as the
// turn has calls.
var turnSession = fmt.Sprintf("bench-turn-%d", time.Now().Unix())

// printTurns times rounds turns of n cold calls each, alternately with
// every node but the first cordoned and with all of them (one node only:
// the first figure alone), and prints the makespans, the calls per second
// and where the pods ran.
func printTurns(ctx context.Context, c client.Client, ns string, n, rounds int) error {
	s := &toolgatev1alpha1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: turnSession},
		Spec: toolgatev1alpha1.AgentSessionSpec{Owner: "admin", ProfileRef: toolgatev1alpha1.LocalObjectReference{Name: "bench"},
			MaxParallel: int32(n), WarmPods: ptr.To(int32(0))}}
	if err := client.IgnoreAlreadyExists(c.Create(ctx, s)); err != nil {
		return err
	}
	nodes := &corev1.NodeList{}
	if err := c.List(ctx, nodes); err != nil {
		return err
	}
	// The first node stays; the others are cordoned for the one-node turns.
	var others []string
	for _, node := range nodes.Items {
		if !node.Spec.Unschedulable {
			others = append(others, node.Name)
		}
	}
	if i := slices.Index(others, "localhost"); i > 0 {
		others[0], others[i] = others[i], others[0]
	}
	if len(others) > 0 {
		others = others[1:]
	}
	layouts := []string{"1 node"}
	if len(others) > 0 {
		layouts = append(layouts, fmt.Sprintf("%d nodes", 1+len(others)))
	}
	cordon := func(on bool) error {
		for _, name := range others {
			node := &corev1.Node{}
			if err := c.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
				return err
			}
			base := node.DeepCopy()
			node.Spec.Unschedulable = on
			if err := c.Patch(ctx, node, client.MergeFrom(base)); err != nil {
				return err
			}
		}
		return nil
	}
	defer func() { _ = cordon(false) }()
	took := map[string][]time.Duration{}
	ran := map[string]map[string]int{}
	turn := int64(0)
	for r := 0; r < rounds; r++ {
		for _, layout := range layouts {
			if err := cordon(layout == "1 node" && len(others) > 0); err != nil {
				return err
			}
			if err := quiet(ctx, c, ns); err != nil {
				return err
			}
			turn++
			d, on, err := timeTurn(ctx, c, ns, turn, n)
			if err != nil {
				return err
			}
			took[layout] = append(took[layout], d)
			if ran[layout] == nil {
				ran[layout] = map[string]int{}
			}
			for node, k := range on {
				ran[layout][node] += k
			}
		}
	}
	fmt.Printf("a turn of %d cold calls safe to run in parallel (maxParallel %d), %d rounds, create of the first → commit of the last:\n", n, n, rounds)
	for _, layout := range layouts {
		p50 := pct(took[layout], 50)
		fmt.Printf("  %-8s makespan p50 %6.0f ms  max %6.0f ms  %5.1f calls/s   pods per node %v\n", layout, ms(p50),
			ms(slices.Max(took[layout])), float64(n)/p50.Seconds(), ran[layout])
	}
	return nil
}

// timeTurn submits turn (n calls) at once and waits for every call's
// commit; it returns the makespan and how many pods ran on each node.
func timeTurn(ctx context.Context, c client.Client, ns string, turn int64, n int) (time.Duration, map[string]int, error) {
	names := map[string]bool{}
	start := time.Now()
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("turn-%d-%d-%d", time.Now().UnixNano(), turn, i)
		names[name] = true
		tc := &toolgatev1alpha1.ToolCall{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: toolgatev1alpha1.ToolCallSpec{
			SessionRef: toolgatev1alpha1.LocalObjectReference{Name: turnSession}, Turn: turn, Index: int32(i), TurnSize: int32(n),
			CallID: name, Tool: "echo-parallel", Arguments: `{}`, Requester: "admin",
		}}
		if err := c.Create(ctx, tc); err != nil {
			return 0, nil, err
		}
	}
	on := map[string]int{}
	seen := map[string]bool{}
	for deadline := time.Now().Add(5 * time.Minute); ; time.Sleep(20 * time.Millisecond) {
		pods := &corev1.PodList{}
		if err := c.List(ctx, pods, client.InNamespace(ns)); err != nil {
			return 0, nil, err
		}
		for _, p := range pods.Items {
			if call, _, _ := toolgatev1alpha1.PodCall(&p); names[call] && p.Spec.NodeName != "" && !seen[p.Name] {
				seen[p.Name] = true
				on[p.Spec.NodeName]++
			}
		}
		calls := &toolgatev1alpha1.ToolCallList{}
		if err := c.List(ctx, calls, client.InNamespace(ns)); err != nil {
			return 0, nil, err
		}
		done := 0
		for _, tc := range calls.Items {
			if !names[tc.Name] || !tc.Committed() {
				continue
			}
			if tc.Status.Result.Outcome != toolgatev1alpha1.OutcomeSucceeded {
				return 0, nil, fmt.Errorf("call %s: %s %s", tc.Name, tc.Status.Result.ErrorCode, tc.Status.Result.Message)
			}
			done++
		}
		if done == n {
			d := time.Since(start)
			for _, tc := range calls.Items {
				if names[tc.Name] {
					_ = c.Delete(ctx, &tc)
				}
			}
			return d, on, nil
		}
		if time.Now().After(deadline) {
			return 0, nil, fmt.Errorf("turn %d: %d of %d calls committed after five minutes", turn, done, n)
		}
	}
}
