// Command manager runs the toolgate controllers.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/audit"
	"github.com/toolgate/toolgate/internal/compose"
	"github.com/toolgate/toolgate/internal/controller"
	"github.com/toolgate/toolgate/internal/lifecycle"
	"github.com/toolgate/toolgate/internal/notify"
	"github.com/toolgate/toolgate/internal/tracing"
)

func main() {
	var (
		metricsAddr                    string
		probeAddr                      string
		leaderElect                    bool
		workspaceDir                   string
		runnerImage                    string
		netpolicy                      bool
		runnerImageVolume              bool
		processBox                     bool
		namespace                      string
		egressService, egressKeySecret string
		keySecret                      string
		podLabels                      string
		auditLog, notifications        string
		watch                          string
		retention                      time.Duration
		metricsSecure                  bool
		lease                          leaseTimings
	)
	flag.StringVar(&metricsAddr, "metrics-bind-address", ":8080", "Address the Prometheus metrics endpoint binds to; 0 disables it.")
	flag.BoolVar(&metricsSecure, "metrics-secure", true,
		"Serve metrics over HTTPS to clients the API server authenticates and authorizes (get on the non-resource URL /metrics: the ClusterRole toolgate-metrics-reader); false serves plain HTTP to anyone who reaches the port.")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "Address the health probes bind to.")
	flag.BoolVar(&leaderElect, "leader-elect", true, "Elect a leader so that only one manager reconciles at a time.")
	flag.DurationVar(&lease.duration, "leader-elect-lease-duration", defaultLease.duration,
		"How long a standby waits, from the last renewal it saw, before it takes a silent leader's lease: a dead leader's calls wait this long.")
	flag.DurationVar(&lease.renewDeadline, "leader-elect-renew-deadline", defaultLease.renewDeadline,
		"How long the leader keeps trying to renew before it stops leading (and exits); shorter than the lease duration, so that it stops before a standby may start.")
	flag.DurationVar(&lease.retryPeriod, "leader-elect-retry-period", defaultLease.retryPeriod,
		"How often the leader renews and a standby tries to take the lease.")
	flag.BoolVar(&processBox, "enable-process-sandbox", false,
		"Mount the Process sandbox provider, which runs tools as processes of the manager itself, with no isolation: for tests and development only.")
	flag.StringVar(&workspaceDir, "process-workspace-dir", filepath.Join(os.TempDir(), "toolgate-workspaces"),
		"Where the Process sandbox provider (development only, not isolating) keeps session workspaces.")
	flag.StringVar(&runnerImage, "runner-image", "", "Image holding /toolgate-runner; enables the Pod sandbox provider.")
	flag.BoolVar(&runnerImageVolume, "runner-image-volume", false, "Mount the runner image into container tools' pods as an image volume instead of copying the runner with an init container (every node needs image volumes: Kubernetes 1.35 and containerd 2.1 or CRI-O 1.31).")
	flag.BoolVar(&netpolicy, "network-policy-enforced", false, "Declare that the cluster's CNI enforces NetworkPolicy (sandbox enforcement is reported as partial otherwise).")
	flag.StringVar(&namespace, "namespace", os.Getenv("POD_NAMESPACE"), "The manager's namespace (default $POD_NAMESPACE): where the pod sandbox's channel key Secret lives.")
	flag.StringVar(&keySecret, "channel-key-secret", "toolgate-channel-key", "Secret (in --namespace) holding the key with which the manager hands calls to tool pods; created on first start.")
	flag.StringVar(&egressService, "egress-proxy-service", "", "Service (in --namespace) of the egress proxy, through which tools that name their hosts reach them; empty: none, and their calls fail sandbox_unavailable.")
	flag.StringVar(&egressKeySecret, "egress-grant-key-secret", "toolgate-egress-key", "Secret (in --namespace) the manager writes the egress proxy's grant keys to, with --egress-proxy-service.")
	flag.StringVar(&podLabels, "manager-pod-labels", "control-plane=controller-manager", "Labels of the manager's pods: the only ingress tool pods' NetworkPolicies allow (to the runner's port).")
	flag.DurationVar(&retention, "default-call-retention", 0,
		"How long a committed call of a session that sets no ttlSecondsAfterCommit is kept once its turn is complete (for instance 168h); 0 keeps calls until their session is deleted.")
	flag.StringVar(&watch, "watch-namespaces", "",
		"Comma-separated namespaces the manager watches, and the only ones it acts in; empty watches every namespace. With a list, the manager needs Roles only (config/namespaced, docs/install.md).")
	flag.StringVar(&notifications, "notifications-config", "",
		"A file naming the sinks told when approval questions open and end (docs/operations.md, Notifications); empty: none.")
	flag.StringVar(&auditLog, "audit-log", "-",
		"Where the audit trail goes, one JSON record per line (docs/operations.md, Audit trail): - for standard output (the logs go to standard error), a file path to append to, or empty for none.")
	opts := zap.Options{}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	log := ctrl.Log.WithName("setup")
	managerLabels, err := labels.ConvertSelectorToLabelsMap(podLabels)
	if err != nil {
		log.Error(err, "invalid flag", "flag", "manager-pod-labels")
		os.Exit(2)
	}
	if err := lease.validate(); err != nil {
		log.Error(err, "invalid flag", "flag", "leader-elect-lease-duration")
		os.Exit(2)
	}
	watchNamespaces, err := parseNamespaces(watch)
	if err != nil {
		log.Error(err, "invalid flag", "flag", "watch-namespaces")
		os.Exit(2)
	}
	auditSink, err := openAudit(auditLog, ctrl.Log.WithName("audit"))
	if err != nil {
		log.Error(err, "invalid flag", "flag", "audit-log")
		os.Exit(2)
	}
	var notifier *notify.Notifier
	if notifications != "" {
		c, err := notify.Load(notifications)
		if err != nil {
			log.Error(err, "invalid flag", "flag", "notifications-config")
			os.Exit(2)
		}
		notifier = notify.New(c, ctrl.Log.WithName("notify"))
		if c.HasAudit() {
			// The log is the record; the webhook a copy sent at most once.
			auditSink = audit.Tee{auditSink, notifier}
		}
	}
	o := compose.Options{
		Audit: auditSink, Notifier: notifier,
		Approvals:      approvals,
		ProcessSandbox: processBox, ProcessWorkspaceDir: workspaceDir, ProcessSubCalls: true,
		RunnerImage: runnerImage, RunnerImageVolume: runnerImageVolume, NetworkPolicyEnforced: netpolicy,
		Namespace: namespace, ChannelKeySecret: keySecret, ManagerLabels: managerLabels, WatchNamespaces: watchNamespaces,
		EgressService: egressService, EgressKeySecret: egressKeySecret,
		DefaultRetention: retention,
	}

	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(toolgatev1alpha1.AddToScheme(scheme))

	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsOptions(metricsAddr, metricsSecure),
		HealthProbeBindAddress: probeAddr,
		LeaderElection:         leaderElect,
		LeaderElectionID:       leaderElectionID,
		// The process exits right after the manager stops, so handing the
		// lease over at once is safe, and a rollout does not stall for a
		// lease to expire.
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 &lease.duration,
		RenewDeadline:                 &lease.renewDeadline,
		RetryPeriod:                   &lease.retryPeriod,
		Cache:                         compose.Cache(o),
	})
	if err != nil {
		log.Error(err, "manager not created")
		os.Exit(1)
	}
	// Disposing the scope at exit stops the providers' owned work (tools
	// the Process provider runs as processes of this manager).
	scope := lifecycle.NewScope()
	defer scope.Dispose()
	cfg, err := compose.Providers(mgr, scope, o)
	if err != nil {
		log.Error(err, "providers not mounted")
		os.Exit(1)
	}
	if err := controller.Setup(mgr, cfg); err != nil {
		log.Error(err, "controllers not set up")
		os.Exit(1)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		log.Error(err, "health check not added")
		os.Exit(1)
	}
	if err := mgr.AddReadyzCheck("caches", cacheSynced(mgr.GetCache())); err != nil {
		log.Error(err, "ready check not added")
		os.Exit(1)
	}
	watching := "all"
	if len(o.WatchNamespaces) > 0 {
		watching = strings.Join(o.WatchNamespaces, ",")
	}
	// Traces from the standard OTEL_* environment (off without an endpoint).
	shutdownTracing, err := tracing.Setup(context.Background(), "toolgate-manager", log.WithName("tracing"))
	if err != nil {
		log.Error(err, "invalid environment", "variable", "OTEL_EXPORTER_OTLP_PROTOCOL")
		os.Exit(2)
	}
	log.Info("manager starting", "namespaces", watching, "tracing", tracing.Active())
	err = mgr.Start(ctrl.SetupSignalHandler())
	_ = shutdownTracing(context.Background())
	if err != nil {
		log.Error(err, "manager stopped with an error")
		os.Exit(1)
	}
}

// openAudit is the audit trail's sink for --audit-log.
func openAudit(path string, log logr.Logger) (audit.Sink, error) {
	switch path {
	case "":
		return nil, nil
	case "-":
		return &audit.Lines{W: os.Stdout, Log: log}, nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	return &audit.Lines{W: syncedFile{f}, Log: log}, nil
}

// syncedFile puts each record on disk before Write returns: a record is
// written before the call it records lets go of its finalizer, so a file
// on a volume of its own keeps every record a crash could otherwise lose.
type syncedFile struct{ f *os.File }

func (s syncedFile) Write(p []byte) (int, error) {
	n, err := s.f.Write(p)
	if err != nil {
		return n, err
	}
	return n, s.f.Sync()
}

// leaderElectionID names the Lease (in the manager's namespace) the
// managers elect their leader with.
const leaderElectionID = "toolgate-manager.toolgate.dev"

// leaseTimings are the leader election's three periods.
type leaseTimings struct{ duration, renewDeadline, retryPeriod time.Duration }

// defaultLease: a leader that dies (SIGKILL, a lost node) is replaced
// within 8 s plus a retry, about half of client-go's 15 s, for one renewal
// write a second. The leader steps down after 6 s without a renewal, 2 s
// before a standby may take over; an API server that is away longer than
// that (a restart) costs a failover, which is safe (docs/reliability.md,
// "Leader election").
var defaultLease = leaseTimings{duration: 8 * time.Second, renewDeadline: 6 * time.Second, retryPeriod: time.Second}

// validate holds the orders the leader elector needs: the leader gives up
// before its lease may be taken, and retries several times meanwhile.
func (l leaseTimings) validate() error {
	switch {
	case l.retryPeriod <= 0:
		return fmt.Errorf("--leader-elect-retry-period must be positive, not %s", l.retryPeriod)
	case l.renewDeadline <= l.retryPeriod*12/10:
		// client-go's own limit (1.2 × the retry period, its jitter).
		return fmt.Errorf("--leader-elect-renew-deadline (%s) must be longer than 1.2 × --leader-elect-retry-period (%s)", l.renewDeadline, l.retryPeriod)
	case l.duration <= l.renewDeadline:
		return fmt.Errorf("--leader-elect-lease-duration (%s) must be longer than --leader-elect-renew-deadline (%s): a leader must stop before a standby may start", l.duration, l.renewDeadline)
	}
	return nil
}

// approvals are the approval providers every manager mounts.
var approvals = []toolgatev1alpha1.ApprovalProvider{toolgatev1alpha1.ApprovalProviderAPIServer, toolgatev1alpha1.ApprovalProviderNone}

// parseNamespaces reads --watch-namespaces: namespace names separated by
// commas; empty means every namespace.
func parseNamespaces(s string) ([]string, error) {
	var out []string
	for _, ns := range strings.Split(s, ",") {
		ns = strings.TrimSpace(ns)
		if ns == "" {
			continue
		}
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return nil, fmt.Errorf("%q is not a namespace name: %s", ns, strings.Join(errs, "; "))
		}
		if !slices.Contains(out, ns) {
			out = append(out, ns)
		}
	}
	return out, nil
}

// metricsOptions serves metrics at addr: with secure, over HTTPS (a
// certificate made at start) to clients the API server authenticates and
// authorizes for get on /metrics; tool pods and anyone else who reaches
// the port are refused.
func metricsOptions(addr string, secure bool) metricsserver.Options {
	o := metricsserver.Options{BindAddress: addr}
	if secure {
		o.SecureServing = true
		o.FilterProvider = filters.WithAuthenticationAndAuthorization
	}
	return o
}
