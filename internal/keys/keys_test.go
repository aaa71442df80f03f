package keys

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolgate/toolgate/internal/egress"
	"github.com/toolgate/toolgate/internal/runner"
	"github.com/toolgate/toolgate/internal/testenv"
)

func apiServer(t *testing.T) client.Client {
	t.Helper()
	env, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	return env.Client
}

func namespace(t *testing.T, c client.Client, prefix string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix}}
	must(t, c.Create(context.Background(), ns))
	return ns.Name
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestGrantKeysFollowTheChannelKeys: the manager writes the proxy's grant
// keys derived from its channel keys, creates the Secret once, rewrites it
// after a rotation, and leaves it alone when it is right.
func TestGrantKeysFollowTheChannelKeys(t *testing.T) {
	c := apiServer(t)
	ctx := context.Background()
	ns := namespace(t, c, "grant-keys-")
	first, err := runner.NewManagerKey()
	must(t, err)
	must(t, WriteGrantKeys(ctx, c, ns, "toolgate-egress-key", Manager{Current: first}))
	read := func() *corev1.Secret {
		s := &corev1.Secret{}
		must(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "toolgate-egress-key"}, s))
		return s
	}
	s := read()
	if string(s.Data[egress.KeyField]) != string(GrantKey(first.Bytes())) || len(s.Data) != 1 {
		t.Fatalf("created %v, want the key derived from the channel key alone", s.Data)
	}
	must(t, WriteGrantKeys(ctx, c, ns, "toolgate-egress-key", Manager{Current: first}))
	if again := read(); again.ResourceVersion != s.ResourceVersion {
		t.Fatal("rewritten though it was right")
	}
	second, err := runner.NewManagerKey()
	must(t, err)
	must(t, WriteGrantKeys(ctx, c, ns, "toolgate-egress-key", Manager{Current: second, Previous: first}))
	s = read()
	if string(s.Data[egress.KeyField]) != string(GrantKey(second.Bytes())) ||
		string(s.Data[egress.KeyPreviousField]) != string(GrantKey(first.Bytes())) {
		t.Fatal("after a rotation the grant keys do not follow the channel keys")
	}
}
