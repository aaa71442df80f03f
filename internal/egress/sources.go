package egress

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// KeyField and KeyPreviousField are the fields of the grant-key Secret:
// the key derived from the manager's current channel key, and from the
// one before its last rotation.
const (
	KeyField         = "grant.key"
	KeyPreviousField = "grant.previous.key"
)

// SecretKeys reads the grant-signing keys from the Secret the manager
// writes; a refresh reads it again at most every refreshEvery.
type SecretKeys struct {
	Reader client.Reader
	Secret types.NamespacedName

	mu      sync.Mutex
	keys    [][]byte
	fetched time.Time
}

const refreshEvery = 5 * time.Second

// Keys implements Keys.
func (k *SecretKeys) Keys(ctx context.Context, refresh bool) [][]byte {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.keys != nil && (!refresh || time.Since(k.fetched) < refreshEvery) {
		return k.keys
	}
	s := &corev1.Secret{}
	if err := k.Reader.Get(ctx, k.Secret, s); err != nil {
		return k.keys
	}
	k.keys, k.fetched = nil, time.Now()
	for _, f := range []string{KeyField, KeyPreviousField} {
		if v := s.Data[f]; len(v) == KeySize {
			k.keys = append(k.keys, v)
		}
	}
	return k.keys
}

// SecretValues reads credentials from Secrets with get (no list or watch:
// an operator grants the proxy each Secret by name), keeping a value for
// ttl.
type SecretValues struct {
	Reader client.Reader
	TTL    time.Duration

	mu   sync.Mutex
	seen map[string]cachedValue
}

type cachedValue struct {
	value []byte
	at    time.Time
}

// Value implements Secrets.
func (s *SecretValues) Value(ctx context.Context, namespace, name, key string) ([]byte, error) {
	id := namespace + "/" + name + "/" + key
	s.mu.Lock()
	c, ok := s.seen[id]
	s.mu.Unlock()
	if ok && time.Since(c.at) < s.TTL {
		return c.value, nil
	}
	secret := &corev1.Secret{}
	if err := s.Reader.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, secret); err != nil {
		return nil, err
	}
	v, ok := secret.Data[key]
	if !ok {
		return nil, fmt.Errorf("the Secret %s/%s has no key %s", namespace, name, key)
	}
	s.mu.Lock()
	if s.seen == nil {
		s.seen = map[string]cachedValue{}
	}
	s.seen[id] = cachedValue{value: v, at: time.Now()}
	s.mu.Unlock()
	return v, nil
}

// PodIPField indexes tool pods by address in the proxy's cache.
const PodIPField = "status.podIP"

// CachedPods answers from a cache of tool pods indexed by PodIPField.
type CachedPods struct {
	Reader client.Reader
}

// Live implements Pods.
func (c CachedPods) Live(ctx context.Context, ip netip.Addr, uid string) bool {
	list := &corev1.PodList{}
	if err := c.Reader.List(ctx, list, client.MatchingFields{PodIPField: ip.String()}); err != nil {
		return false
	}
	for _, p := range list.Items {
		if string(p.UID) == uid && p.DeletionTimestamp == nil && p.Status.PodIP == ip.String() &&
			p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			return true
		}
	}
	return false
}
