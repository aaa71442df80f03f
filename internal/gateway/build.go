package gateway

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// DefaultReviewTTL is how long a TokenReview's positive answer is reused:
// short, as a revoked token stays accepted that long.
const DefaultReviewTTL = 10 * time.Second

// Build returns a Gateway acting with cfg (the gateway's own credentials:
// create tokenreviews, impersonate serviceaccounts) for callers whose
// tokens carry audience.
func Build(shutdown context.Context, cfg *rest.Config, audience string, reviewTTL time.Duration, opts Options) (*Gateway, error) {
	if audience == "" {
		return nil, fmt.Errorf("the gateway needs a token audience")
	}
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(toolgatev1alpha1.AddToScheme(scheme))
	cfg = rest.CopyConfig(cfg)
	if cfg.QPS == 0 {
		// TokenReviews and discovery, for every caller.
		cfg.QPS, cfg.Burst = identityQPS, identityBurst
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	mapper, err := apiutil.NewDynamicRESTMapper(cfg, hc)
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfigAndClient(cfg, hc)
	if err != nil {
		return nil, err
	}
	authn := NewAuthenticator(cs, audience, reviewTTL, clock.RealClock{})
	authn.TrustIssuerKeys(func(ctx context.Context) ([]byte, error) {
		return cs.Discovery().RESTClient().Get().AbsPath("/openid/v1/jwks").DoRaw(ctx)
	}, opts.Log)
	return New(shutdown, authn, NewClients(cfg, scheme, mapper), opts), nil
}
