// Command toolgate-egress is the egress proxy of tool pods whose tools
// name the hosts they may reach (internal/egress, docs/sandbox.md).
package main

import (
	"context"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/egress"
)

// shutdownGrace bounds how long open requests may finish at exit.
const shutdownGrace = 20 * time.Second

func main() {
	var (
		addr, metricsAddr, namespace, keySecret, allow, caFile string
		credentialTTL                                          time.Duration
		maxPerCall                                             int
	)
	flag.StringVar(&addr, "bind-address", fmt.Sprintf(":%d", egress.Port), "Address the proxy serves tools' bodies on.")
	flag.StringVar(&metricsAddr, "metrics-bind-address", ":8080", "Address /metrics, /healthz and /readyz are served on.")
	flag.StringVar(&namespace, "namespace", os.Getenv("POD_NAMESPACE"), "The proxy's namespace (default $POD_NAMESPACE): where the grant key Secret lives.")
	flag.StringVar(&keySecret, "grant-key-secret", "toolgate-egress-key", "Secret (in --namespace), written by the manager, holding the key grants are signed with.")
	flag.StringVar(&allow, "allow-private", "", "Comma-separated CIDRs that are not public which tools may reach by the hosts they name (an in-cluster API); link-local is never reached.")
	flag.StringVar(&caFile, "ca-file", "", "PEM certificates trusted, beside the system's, for the hosts the proxy opens TLS to.")
	flag.DurationVar(&credentialTTL, "credential-ttl", 30*time.Second, "How long a credential read from its Secret is reused.")
	flag.IntVar(&maxPerCall, "max-connections-per-call", egress.DefaultMaxPerCall, "How many requests and tunnels one call's pod may hold open through the proxy at once (the proxy is every tenant's).")
	opts := zap.Options{}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	log := ctrl.Log.WithName("egress")
	fail := func(err error, msg string) {
		log.Error(err, msg)
		os.Exit(1)
	}

	allowed, err := parsePrefixes(allow)
	if err != nil {
		fail(err, "invalid flag")
	}
	roots, err := x509.SystemCertPool()
	if err != nil {
		roots = x509.NewCertPool()
	}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			fail(err, "ca file not read")
		}
		if !roots.AppendCertsFromPEM(pem) {
			fail(errors.New("no certificate in it"), "ca file not read")
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	cfg := ctrl.GetConfigOrDie()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		fail(err, "scheme not built")
	}
	// Tool pods only, indexed by address: who is asking.
	pods, err := cache.New(cfg, cache.Options{Scheme: scheme, ByObject: map[client.Object]cache.ByObject{
		&corev1.Pod{}: {Label: labels.SelectorFromSet(labels.Set{toolgatev1alpha1.LabelSandbox: "true"})},
	}})
	if err != nil {
		fail(err, "cache not built")
	}
	if err := pods.IndexField(ctx, &corev1.Pod{}, egress.PodIPField, func(o client.Object) []string {
		if ip := o.(*corev1.Pod).Status.PodIP; ip != "" {
			return []string{ip}
		}
		return nil
	}); err != nil {
		fail(err, "index not built")
	}
	go func() {
		if err := pods.Start(ctx); err != nil {
			fail(err, "cache stopped")
		}
	}()
	direct, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		fail(err, "client not built")
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	keys := &egress.SecretKeys{Reader: direct, Secret: types.NamespacedName{Namespace: namespace, Name: keySecret}}
	events := &egress.EventRecorder{Client: direct, Log: log}
	go events.Run(ctx)
	proxy := &egress.Proxy{
		Keys: keys, Pods: egress.CachedPods{Reader: pods}, Secrets: &egress.SecretValues{Reader: direct, TTL: credentialTTL},
		Allowed: allowed, RootCAs: roots, Metrics: egress.NewMetrics(reg), Events: events, Log: log, MaxPerCall: maxPerCall,
	}

	ops := http.NewServeMux()
	ops.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	ops.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	// Ready once it knows the tool pods and holds a key to check grants with.
	ops.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if !pods.WaitForCacheSync(r.Context()) || len(keys.Keys(r.Context(), true)) == 0 {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	servers := []*http.Server{
		{Addr: addr, Handler: proxy, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 90 * time.Second},
		{Addr: metricsAddr, Handler: ops, ReadHeaderTimeout: 10 * time.Second},
	}
	errs := make(chan error, len(servers))
	for _, s := range servers {
		go func() { errs <- s.ListenAndServe() }()
	}
	log.Info("egress proxy serving", "address", addr, "allowed", allow)
	select {
	case <-ctx.Done():
	case err := <-errs:
		if !errors.Is(err, http.ErrServerClosed) {
			fail(err, "server stopped")
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	for _, s := range servers {
		_ = s.Shutdown(sctx)
	}
}

// parsePrefixes reads --allow-private.
func parsePrefixes(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		p, err := netip.ParsePrefix(f)
		if err != nil {
			return nil, fmt.Errorf("--allow-private: %w", err)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}
