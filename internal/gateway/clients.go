package gateway

import (
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Client-side bounds on one identity's API requests through the gateway
// (client-go's defaults, 5 per second, would queue a single agent's calls:
// each tools/call makes four or five requests).
const (
	identityQPS   = 50
	identityBurst = 100
)

// maxCachedClients bounds the impersonating clients kept; a full cache is
// emptied rather than grown (a client is cheap to rebuild: the transport
// underneath is shared).
const maxCachedClients = 1024

// Clients hands out API clients acting as a caller. Only the username is
// impersonated: for a ServiceAccount the API server derives its groups
// itself, so the gateway needs the verb impersonate on serviceaccounts and on
// nothing else (no users, groups, uids or extras).
type Clients struct {
	base   *rest.Config
	scheme *runtime.Scheme
	mapper meta.RESTMapper

	mu    sync.Mutex
	cache map[string]client.WithWatch
}

// NewClients returns Clients impersonating from base (the gateway's own
// credentials), sharing one REST mapper so no client repeats discovery.
func NewClients(base *rest.Config, scheme *runtime.Scheme, mapper meta.RESTMapper) *Clients {
	return &Clients{base: base, scheme: scheme, mapper: mapper, cache: map[string]client.WithWatch{}}
}

// As returns a client acting as user.
func (c *Clients) As(user string) (client.WithWatch, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cl, ok := c.cache[user]; ok {
		return cl, nil
	}
	cfg := rest.CopyConfig(c.base)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	cfg.QPS, cfg.Burst = identityQPS, identityBurst
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("building a client for %s: %w", user, err)
	}
	cl, err := client.NewWithWatch(cfg, client.Options{Scheme: c.scheme, Mapper: c.mapper, HTTPClient: hc})
	if err != nil {
		return nil, fmt.Errorf("building a client for %s: %w", user, err)
	}
	if len(c.cache) >= maxCachedClients {
		clear(c.cache)
	}
	c.cache[user] = cl
	return cl, nil
}
