package main

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/toolgate/toolgate/internal/testenv"
)

// TestNotReadyUntilTheCachesSync: a manager whose caches cannot sync (here
// an identity that may list nothing) is not ready; one whose caches synced
// is.
func TestNotReadyUntilTheCachesSync(t *testing.T) {
	env, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.Stop() }()
	nobody := rest.CopyConfig(env.Config)
	nobody.Impersonate = rest.ImpersonationConfig{UserName: "nobody"}
	for _, tc := range []struct {
		name  string
		cfg   *rest.Config
		ready bool
	}{{"an identity that may list nothing", nobody, false}, {"the cluster admin", env.Config, true}} {
		c, err := cache.New(tc.cfg, cache.Options{Scheme: env.Scheme})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.GetInformer(context.Background(), &corev1.Pod{}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		go func() { _ = c.Start(ctx) }()
		check := cacheSynced(c)
		var got error
		for range 25 { // the admin's cache syncs well within this
			if got = check(httptest.NewRequest("GET", "/readyz", nil)); got == nil {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		cancel()
		if (got == nil) != tc.ready {
			t.Errorf("%s: ready error %v, want ready %v", tc.name, got, tc.ready)
		}
	}
}
