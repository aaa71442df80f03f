package pod

import (
	"context"
	"crypto/ecdh"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolgate/toolgate/internal/runner"
)

// ChannelKeyField is the Secret key holding the manager's channel key (the
// raw 32-byte X25519 private key).
const ChannelKeyField = "x25519.key"

// LoadChannelKey reads the manager's channel key from the Secret
// namespace/name, creating it on first start. Every replica, and every
// restart, uses the same key, so a call handed over by one manager is
// collected by the next; only the manager's service account can read it.
func LoadChannelKey(ctx context.Context, c client.Client, namespace, name string) (*ecdh.PrivateKey, error) {
	key := client.ObjectKey{Namespace: namespace, Name: name}
	for range 2 {
		s := &corev1.Secret{}
		err := c.Get(ctx, key, s)
		switch {
		case err == nil:
			k, perr := ecdh.X25519().NewPrivateKey(s.Data[ChannelKeyField])
			if perr != nil {
				return nil, fmt.Errorf("secret %s: field %s is not an X25519 key: %w", key, ChannelKeyField, perr)
			}
			return k, nil
		case !apierrors.IsNotFound(err):
			return nil, fmt.Errorf("read the channel key secret %s: %w", key, err)
		}
		k, err := runner.NewManagerKey()
		if err != nil {
			return nil, err
		}
		s = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{LabelManagedBy: managedBy}},
			Type:       corev1.SecretTypeOpaque,
			Immutable:  ptr.To(true),
			Data:       map[string][]byte{ChannelKeyField: k.Bytes()},
		}
		switch err := c.Create(ctx, s); {
		case err == nil:
			return k, nil
		case !apierrors.IsAlreadyExists(err):
			return nil, fmt.Errorf("create the channel key secret %s: %w", key, err)
		}
		// Another replica created it first: read theirs.
	}
	return nil, fmt.Errorf("the channel key secret %s could not be read or created", key)
}
