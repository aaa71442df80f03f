// Command toolgate-gateway serves toolgate to MCP clients: every tools/call
// becomes a ToolCall made as the calling ServiceAccount (docs/mcp.md).
package main

import (
	"context"
	"errors"
	"flag"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/toolgate/toolgate/internal/gateway"
	"github.com/toolgate/toolgate/internal/tracing"
)

// shutdownGrace bounds how long in-flight requests may finish at exit.
const shutdownGrace = 20 * time.Second

func main() {
	var (
		addr, metricsAddr, audience, certFile, keyFile string
		reviewTTL, callTimeout, keepAlive              time.Duration
		maxCalls                                       int
		maxBytes                                       int64
	)
	flag.StringVar(&addr, "bind-address", ":8443", "Address MCP is served on, at /mcp/NAMESPACE/SESSION.")
	flag.StringVar(&metricsAddr, "metrics-bind-address", ":8080", "Address /metrics, /healthz and /readyz are served on.")
	flag.StringVar(&audience, "audience", "toolgate-gateway", "Audience a caller's ServiceAccount token must be issued for.")
	flag.StringVar(&certFile, "tls-cert-file", "", "TLS certificate; without it MCP is served over plain HTTP (only behind a TLS-terminating proxy or mesh).")
	flag.StringVar(&keyFile, "tls-key-file", "", "TLS key, with --tls-cert-file.")
	flag.DurationVar(&reviewTTL, "token-review-ttl", gateway.DefaultReviewTTL, "How long a TokenReview's answer is reused; a revoked token is accepted at most that long.")
	flag.DurationVar(&callTimeout, "call-timeout", gateway.DefaultCallTimeout, "How long one tools/call waits for its ToolCall to commit; the call goes on after.")
	flag.DurationVar(&keepAlive, "keep-alive", gateway.DefaultKeepAlive, "How often a waiting tools/call's response stream carries a progress notification or an SSE comment, so that no client's or proxy's idle timeout ends a long wait.")
	flag.IntVar(&maxCalls, "max-calls-per-identity", gateway.DefaultMaxCallsPerIdentity, "tools/call requests one identity may have in flight.")
	flag.Int64Var(&maxBytes, "max-request-bytes", gateway.DefaultMaxRequestBytes, "Largest request body accepted.")
	opts := zap.Options{}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	log := ctrl.Log.WithName("gateway")

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	// Traces from the standard OTEL_* environment (off without an endpoint).
	shutdownTracing, err := tracing.Setup(ctx, "toolgate-gateway", log.WithName("tracing"))
	if err != nil {
		log.Error(err, "tracing not set up")
		os.Exit(2)
	}
	defer func() { _ = shutdownTracing(context.Background()) }()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	gw, err := gateway.Build(ctx, ctrl.GetConfigOrDie(), audience, reviewTTL, gateway.Options{
		MaxCallsPerIdentity: maxCalls, CallTimeout: callTimeout, KeepAlive: keepAlive, MaxRequestBytes: maxBytes, Registerer: reg, Log: log,
	})
	if err != nil {
		log.Error(err, "gateway not built")
		os.Exit(1)
	}

	ops := http.NewServeMux()
	ops.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	ok := func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }
	ops.HandleFunc("/healthz", ok)
	ops.HandleFunc("/readyz", ok)
	servers := []*http.Server{gateway.NewServer(addr, gw.Handler()), gateway.NewServer(metricsAddr, ops)}
	errs := make(chan error, len(servers))
	if certFile == "" {
		log.Info("serving MCP over plain HTTP: terminate TLS in front of the gateway", "address", addr)
	} else {
		// Read again when the mounted Secret is renewed.
		certs, err := gateway.NewCertReloader(certFile, keyFile)
		if err != nil {
			log.Error(err, "TLS certificate not loaded")
			os.Exit(1)
		}
		servers[0].TLSConfig = certs.TLSConfig()
	}
	go func() {
		if certFile != "" {
			errs <- servers[0].ListenAndServeTLS("", "")
			return
		}
		errs <- servers[0].ListenAndServe()
	}()
	go func() { errs <- servers[1].ListenAndServe() }()
	log.Info("gateway serving", "address", addr, "audience", audience)

	select {
	case <-ctx.Done():
	case err := <-errs:
		if !errors.Is(err, http.ErrServerClosed) {
			log.Error(err, "server stopped")
			os.Exit(1)
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	for _, s := range servers {
		_ = s.Shutdown(sctx)
	}
}
