package main

import (
	"context"
	"errors"
	"net/http"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
)

// cacheSynced is ready once the manager's caches have synced. A manager
// whose informers cannot list (a watched namespace without the manager's
// Role, RBAC not yet applied) reconciles nothing and waits: it must say so
// instead of looking ready.
func cacheSynced(c cache.Cache) healthz.Checker {
	return func(req *http.Request) error {
		ctx, cancel := context.WithTimeout(req.Context(), 200*time.Millisecond)
		defer cancel()
		if !c.WaitForCacheSync(ctx) {
			return errors.New("the manager's caches have not synced")
		}
		return nil
	}
}
