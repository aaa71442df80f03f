package controller

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

func TestOwnWritesTellACacheBehindThem(t *testing.T) {
	var o ownWrites
	key := types.NamespacedName{Namespace: "ns", Name: "c"}
	if o.behind(key, "1") {
		t.Fatal("a call this process never wrote is behind")
	}
	o.wrote(key, "1") // 1 -> 2
	o.wrote(key, "2") // 2 -> 3
	for _, rv := range []string{"1", "2"} {
		if !o.behind(key, rv) {
			t.Fatalf("version %s, replaced by this process, is not behind", rv)
		}
	}
	if o.behind(key, "3") {
		t.Fatal("the version this process wrote last is behind")
	}
	// Caught up: what was replaced is forgotten.
	if o.behind(key, "1") {
		t.Fatal("a replaced version is still remembered after the cache caught up")
	}
	o.wrote(key, "3")
	o.forget(key)
	if o.behind(key, "3") {
		t.Fatal("a forgotten call is behind")
	}
}
