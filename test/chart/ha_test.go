package chart

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestHighAvailabilityByDefault: a default install survives its leader
// dying: two replicas, spread over nodes where it can, and a
// PodDisruptionBudget that lets a drain take one at a time. The budget is
// left out where it would block every drain (replicas not above
// minAvailable), and an affinity of one's own replaces the spread.
func TestHighAvailabilityByDefault(t *testing.T) {
	manager := func(objs []*unstructured.Unstructured) *unstructured.Unstructured {
		t.Helper()
		var deps []*unstructured.Unstructured
		for _, d := range kinds(objs, "Deployment") {
			if d.GetName() == "toolgate-controller-manager" {
				deps = append(deps, d)
			}
		}
		if len(deps) != 1 {
			t.Fatalf("%d manager Deployments", len(deps))
		}
		return deps[0]
	}
	objs := helmTemplate(t)
	dep := manager(objs)
	if r := number(dep, "spec", "replicas"); r != 2 {
		t.Errorf("default replicas %d, want 2", r)
	}
	pdbs := kinds(objs, "PodDisruptionBudget")
	if len(pdbs) != 1 {
		t.Fatalf("default install: %d PodDisruptionBudgets, want 1", len(pdbs))
	}
	podLabels, _, _ := unstructured.NestedStringMap(dep.Object, "spec", "template", "metadata", "labels")
	selector, _, _ := unstructured.NestedStringMap(pdbs[0].Object, "spec", "selector", "matchLabels")
	for k, v := range selector {
		if podLabels[k] != v {
			t.Errorf("the budget selects %s=%s; the manager's pods have %v", k, v, podLabels)
		}
	}
	if m := number(pdbs[0], "spec", "minAvailable"); m != 1 {
		t.Errorf("minAvailable %d, want 1", m)
	}
	terms, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "affinity", "podAntiAffinity", "preferredDuringSchedulingIgnoredDuringExecution")
	if len(terms) != 1 {
		t.Fatalf("default affinity %v, want one preferred anti-affinity term", terms)
	}
	term := terms[0].(map[string]any)["podAffinityTerm"].(map[string]any)
	spread, _, _ := unstructured.NestedStringMap(term, "labelSelector", "matchLabels")
	if term["topologyKey"] != "kubernetes.io/hostname" || len(spread) == 0 {
		t.Errorf("anti-affinity term %v", term)
	}
	for k, v := range spread {
		if podLabels[k] != v {
			t.Errorf("the spread selects %s=%s; the manager's pods have %v", k, v, podLabels)
		}
	}

	if n := len(kinds(helmTemplate(t, "--set", "replicas=1"), "PodDisruptionBudget")); n != 0 {
		t.Errorf("one replica: %d PodDisruptionBudgets would block every drain", n)
	}
	own := manager(helmTemplate(t, "--set", "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].key=pool",
		"--set", "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator=Exists"))
	if a, _, _ := unstructured.NestedMap(own.Object, "spec", "template", "spec", "affinity"); a["podAntiAffinity"] != nil || a["nodeAffinity"] == nil {
		t.Errorf("an affinity of one's own: %v", a)
	}
}

// number is the number at p (YAML's numbers decode as floats here), -1
// when there is none.
func number(u *unstructured.Unstructured, p ...string) int64 {
	v, ok, _ := unstructured.NestedFieldNoCopy(u.Object, p...)
	var n int64
	if _, err := fmt.Sscan(fmt.Sprint(v), &n); !ok || err != nil {
		return -1
	}
	return n
}
