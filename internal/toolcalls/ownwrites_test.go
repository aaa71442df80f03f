package toolcalls

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
)

func TestOwnWritesTellACacheBehindThem(t *testing.T) {
	var o OwnWrites
	key := types.NamespacedName{Namespace: "ns", Name: "c"}
	if o.Behind(key, "1") {
		t.Fatal("a call this process never wrote is behind")
	}
	o.Wrote(key, "1") // 1 -> 2
	o.Wrote(key, "2") // 2 -> 3
	for _, rv := range []string{"1", "2"} {
		if !o.Behind(key, rv) {
			t.Fatalf("version %s, replaced by this process, is not behind", rv)
		}
	}
	if o.Behind(key, "3") {
		t.Fatal("the version this process wrote last is behind")
	}
	// Caught up: what was replaced is forgotten.
	if o.Behind(key, "1") {
		t.Fatal("a replaced version is still remembered after the cache caught up")
	}
	o.Wrote(key, "3")
	o.Forget(key)
	if o.Behind(key, "3") {
		t.Fatal("a forgotten call is behind")
	}
}

func TestOwnWritesKeepTheCallAsWrittenWhileTheCacheIsBehind(t *testing.T) {
	var o OwnWrites
	cached := &toolgatev1alpha1.ToolCall{}
	cached.Namespace, cached.Name, cached.UID, cached.ResourceVersion = "ns", "c", "u1", "1"
	if got := o.Current(cached); got != cached {
		t.Fatal("a call this process never wrote is not the cache's")
	}
	written := cached.DeepCopy()
	written.ResourceVersion, written.Status.Phase = "2", toolgatev1alpha1.PhaseCommitted
	o.WroteCall("1", written)
	if got := o.Current(cached); got != written {
		t.Fatal("the cache is behind this process's write, and the call planned from is not the written one")
	}
	// Another call of the same name (deleted and created again) is not it.
	other := cached.DeepCopy()
	other.UID = "u2"
	if got := o.Current(other); got != other {
		t.Fatal("the write of a call that is gone stands for another of its name")
	}
	// Caught up: the cache's version is the written one, or later.
	later := written.DeepCopy()
	later.ResourceVersion = "3"
	if got := o.Current(later); got != later {
		t.Fatal("a cache past this process's write is not read")
	}
	if o.Behind(types.NamespacedName{Namespace: "ns", Name: "c"}, "3") || o.Current(cached) != cached {
		t.Fatal("the written call is kept after the cache caught up")
	}
	// A later write of another kind (the finalizer) drops what was kept.
	o.WroteCall("1", written)
	o.Wrote(types.NamespacedName{Namespace: "ns", Name: "c"}, "2")
	if got := o.Current(cached); got != cached {
		t.Fatal("a call kept from before a later write stands for it")
	}
}
