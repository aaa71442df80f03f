// Package keys owns the manager's secret key: one X25519 key (and the one
// before its last rotation), shared by every replica through a Secret only
// the manager's service account reads, and what is derived from it for
// others. The pod sandbox's channel (a call handed to a tool pod, its frame
// back) is keyed with it; the approval provider seals its questions, and
// the audit trail makes its digests, under keys derived from it; the egress
// proxy checks grants with keys derived from it (WriteGrantKeys), never
// holding it. Every key derived from it, and every MAC made under one, is
// made here (derive.go: one label per use, known answers pinned by a
// test); its users say only what they seal. A composition without a
// namespace (tests, the process sandbox alone) gets one key per process
// (ForProcess).
package keys

import (
	"bytes"
	"context"
	"crypto/ecdh"
	"fmt"
	"maps"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolgate/toolgate/internal/egress"
	"github.com/toolgate/toolgate/internal/runner"
)

// The label toolgate's own Secrets carry.
const (
	labelManagedBy = "app.kubernetes.io/managed-by"
	managedBy      = "toolgate"
)

// ForProcess is one key per process, made on first use, for a manager
// composed without a namespace to keep a Secret in: a manager restarted in
// the same process (tests) still reads its predecessor's sealed questions.
func ForProcess() (Manager, error) {
	processOnce.Do(func() { processKey, processErr = runner.NewManagerKey() })
	return Manager{Current: processKey}, processErr
}

var (
	processOnce sync.Once
	processKey  *ecdh.PrivateKey
	processErr  error
)

// Field is the Secret key holding the manager's key (the raw 32-byte
// X25519 private key); PreviousField holds the key before the last
// rotation, when there was one.
const (
	Field         = "x25519.key"
	PreviousField = "x25519.previous.key"
)

// Manager is the manager's key and the one before its last rotation
// (nil when it was never rotated).
type Manager struct {
	Current, Previous *ecdh.PrivateKey
}

// Load reads the manager's keys from the Secret
// namespace/name, creating it on first start. Every replica, and every
// restart, uses the same keys, so a call handed over by one manager is
// collected by the next; only the manager's service account can read them.
func Load(ctx context.Context, c client.Client, namespace, name string) (Manager, error) {
	key := client.ObjectKey{Namespace: namespace, Name: name}
	for range 2 {
		s := &corev1.Secret{}
		err := c.Get(ctx, key, s)
		switch {
		case err == nil:
			return keysOf(key, s)
		case !apierrors.IsNotFound(err):
			return Manager{}, fmt.Errorf("read the channel key secret %s: %w", key, err)
		}
		k, err := runner.NewManagerKey()
		if err != nil {
			return Manager{}, err
		}
		s = secret(key, k, nil)
		switch err := c.Create(ctx, s); {
		case err == nil:
			return Manager{Current: k}, nil
		case !apierrors.IsAlreadyExists(err):
			return Manager{}, fmt.Errorf("create the channel key secret %s: %w", key, err)
		}
		// Another replica created it first: read theirs.
	}
	return Manager{}, fmt.Errorf("the channel key secret %s could not be read or created", key)
}

func keysOf(key client.ObjectKey, s *corev1.Secret) (Manager, error) {
	var keys Manager
	k, err := ecdh.X25519().NewPrivateKey(s.Data[Field])
	if err != nil {
		return keys, fmt.Errorf("secret %s: field %s is not an X25519 key: %w", key, Field, err)
	}
	keys.Current = k
	if b, ok := s.Data[PreviousField]; ok {
		if keys.Previous, err = ecdh.X25519().NewPrivateKey(b); err != nil {
			return keys, fmt.Errorf("secret %s: field %s is not an X25519 key: %w", key, PreviousField, err)
		}
	}
	return keys, nil
}

// channelKeySecret is the immutable Secret holding current and previous.
func secret(key client.ObjectKey, current, previous *ecdh.PrivateKey) *corev1.Secret {
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, Labels: map[string]string{labelManagedBy: managedBy}},
		Type:       corev1.SecretTypeOpaque,
		Immutable:  ptr.To(true),
		Data:       map[string][]byte{Field: current.Bytes()},
	}
	if previous != nil {
		s.Data[PreviousField] = previous.Bytes()
	}
	return s
}

// Rotate replaces the manager's channel key with a new one and
// keeps the current one as the previous (the one before it is dropped).
// The Secret is immutable: it is deleted (exactly the version read) and
// made again. Managers read it when they start: restart them after (the
// pods and questions made under the previous key keep working; those
// made under the key dropped fail cleanly, so rotate again only once the
// calls of two rotations ago have settled). It returns the new Secret.
func Rotate(ctx context.Context, c client.Client, namespace, name string) (*corev1.Secret, error) {
	key := client.ObjectKey{Namespace: namespace, Name: name}
	s := &corev1.Secret{}
	if err := c.Get(ctx, key, s); err != nil {
		return nil, fmt.Errorf("read the channel key secret %s: %w", key, err)
	}
	old, err := keysOf(key, s)
	if err != nil {
		return nil, err
	}
	k, err := runner.NewManagerKey()
	if err != nil {
		return nil, err
	}
	next := secret(key, k, old.Current)
	if err := c.Delete(ctx, s, client.Preconditions{UID: &s.UID, ResourceVersion: &s.ResourceVersion}); err != nil {
		return nil, fmt.Errorf("delete the channel key secret %s to replace it: %w", key, err)
	}
	if err := c.Create(ctx, next); err != nil {
		// A manager starting in between made a key of its own: the
		// previous one is in this error's Secret only.
		return nil, fmt.Errorf("create the rotated channel key secret %s (the managers must be restarted; calls in flight under the old key fail): %w", key, err)
	}
	return next, nil
}

// WriteGrantKeys writes the egress proxy's grant keys, derived from the
// channel keys, to Secret namespace/name: the proxy checks grants with
// them and never holds the channel key. Written at every start, so a
// rotated channel key reaches the proxy with the managers' restart.
func WriteGrantKeys(ctx context.Context, c client.Client, namespace, name string, keys Manager) error {
	want := map[string][]byte{egress.KeyField: GrantKey(keys.Current.Bytes())}
	if keys.Previous != nil {
		want[egress.KeyPreviousField] = GrantKey(keys.Previous.Bytes())
	}
	key := client.ObjectKey{Namespace: namespace, Name: name}
	s := &corev1.Secret{}
	switch err := c.Get(ctx, key, s); {
	case apierrors.IsNotFound(err):
		s = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{labelManagedBy: managedBy}},
			Type:       corev1.SecretTypeOpaque, Data: want,
		}
		if err := c.Create(ctx, s); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create the egress grant key secret %s: %w", key, err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("read the egress grant key secret %s: %w", key, err)
	case maps.EqualFunc(s.Data, want, bytes.Equal):
		return nil
	}
	s.Data = want
	if err := c.Update(ctx, s); err != nil {
		return fmt.Errorf("update the egress grant key secret %s: %w", key, err)
	}
	return nil
}
