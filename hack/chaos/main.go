// Command chaos runs a load of tool calls on the local cluster while it
// injects faults at random times (the manager SIGKILLed, the leader of two
// replicas killed, kube-apiserver, etcd, the kubelet and containerd
// restarted, tool pods deleted and evicted; and for -outage each, the API
// server throttling (429) and failing (5xx) toolgate's requests, the node
// under memory pressure, the node lost), then checks and prints what
// toolgate promises: one result per call, none twice, no non-idempotent
// body run twice, every session committed in model order, no pod left
// behind, no failure the workload did not ask for, and per fault kind how
// long it lasted and the time from its end to the next commit. It exits
// non-zero when a promise is broken. Run it with make chaos (long form) or
// as part of make test-e2e (-short).
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
)

type options struct {
	root, clusterDir     string
	logs                 string
	sessions, calls      int
	kills, replicas      int
	faults               []string
	interval, timeout    time.Duration
	outage               time.Duration
	cancelEvery, seed    int
	keepNamespace, short bool
}

func main() {
	var o options
	var faults string
	flag.StringVar(&o.clusterDir, "cluster-dir", envOr("TOOLGATE_CLUSTER_DIR", "/var/tmp/toolgate-cluster"), "the local cluster's state directory")
	flag.IntVar(&o.sessions, "sessions", 4, "sessions, each an agent submitting its turns in order")
	flag.IntVar(&o.calls, "calls", 200, "calls in all")
	flag.IntVar(&o.kills, "kills", 20, "manager SIGKILLs at least")
	flag.IntVar(&o.replicas, "replicas", 2, "manager replicas (leader election) during the run")
	flag.StringVar(&faults, "faults", strings.Join([]string{faultManager, faultApiserver, faultEtcd, faultKubelet, faultContainerd, faultPod, faultEvict, faultThrottled, faultFailing, faultPressure, faultNodeLost}, ","), "fault kinds to inject")
	flag.DurationVar(&o.outage, "outage", time.Minute, "how long a lasting fault lasts ("+strings.Join(lasting, ", ")+")")
	flag.DurationVar(&o.interval, "interval", 6*time.Second, "mean time between faults")
	flag.DurationVar(&o.timeout, "timeout", 25*time.Minute, "give up after")
	flag.IntVar(&o.cancelEvery, "cancel-every", 20, "cancel about one call in this many")
	flag.IntVar(&o.seed, "seed", 0, "random seed (0: from the clock)")
	flag.BoolVar(&o.short, "short", false, "the short form for CI: 2 sessions, 40 calls, 3 manager kills, one tool pod deleted, one evicted, one kube-apiserver restart")
	flag.BoolVar(&o.keepNamespace, "keep", false, "keep the namespace afterwards")
	flag.StringVar(&o.logs, "logs", "", "keep every killed leader's log and the managers' logs at the end here (default: a new directory under the system's temporary one)")
	flag.Parse()
	o.faults = strings.Split(faults, ",")
	if o.short {
		o.sessions, o.calls, o.kills = 2, 40, 3
		o.faults = []string{faultManager, faultPod, faultEvict, faultApiserver}
	}
	root, _ := os.Getwd()
	o.root = root
	if o.seed == 0 {
		o.seed = int(time.Now().UnixNano() % 1e9)
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(1)
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// call is one submitted call and what was seen of it.
type call struct {
	session, name, tool string
	turn                int64
	index               int32
	cancelled           bool
	podDeleted          bool // a fault deleted or evicted its tool pod
	podRefused          bool // a fault kept its pod from starting (its kubelet refused it, or died starting it)
	committedAt         time.Time
	obj                 *toolgatev1alpha1.ToolCall
}

type chaos struct {
	o     options
	c     client.WithWatch
	cfg   *rest.Config
	ns    string
	rng   *rand.Rand
	start time.Time

	mu     sync.Mutex
	calls  map[string]*call // by name
	faults []fault
}

type fault struct {
	kind    string
	at, end time.Time // began, and was over (the same for a kill)
	note    string
}

func run(o options) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(o.clusterDir, "kubeconfig", "admin.kubeconfig"))
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = 50, 100
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(toolgatev1alpha1.AddToScheme(scheme))
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	r := &chaos{o: o, c: c, cfg: cfg, ns: fmt.Sprintf("chaos-%d", time.Now().Unix()), rng: rand.New(rand.NewPCG(uint64(o.seed), 7)), calls: map[string]*call{}}
	ctx := context.Background()
	if r.o.logs == "" {
		if r.o.logs, err = os.MkdirTemp("", "toolgate-"+r.ns+"-"); err != nil {
			return err
		}
	} else if err := os.MkdirAll(r.o.logs, 0o755); err != nil {
		return err
	}
	fmt.Printf("chaos: namespace %s, seed %d, %d sessions, %d calls, %d manager replicas, faults %s, logs in %s\n",
		r.ns, o.seed, o.sessions, o.calls, o.replicas, strings.Join(o.faults, ","), r.o.logs)
	if err := r.setup(ctx); err != nil {
		return err
	}
	before, err := r.kubectl("-n", "toolgate-system", "get", "deployment/toolgate-controller-manager", "-o", "jsonpath={.spec.replicas}")
	if err != nil {
		return err
	}
	if err := r.scale(ctx, int32(o.replicas)); err != nil {
		return err
	}
	// The install is left as it was found.
	defer func() {
		_, _ = r.kubectl("-n", "toolgate-system", "scale", "deployment/toolgate-controller-manager", "--replicas="+strings.TrimSpace(before))
	}()
	r.start = time.Now()

	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); r.watch(done) }()
	go func() { defer wg.Done(); r.approve(done) }()
	go func() { defer wg.Done(); r.inject(done) }()
	err = r.load(ctx)
	close(done)
	wg.Wait()
	if err != nil {
		return err
	}
	// The managers' own account of the run, for a broken promise's cause.
	for _, p := range managerProcs() {
		r.keepLog(p, "end")
	}
	broken := r.report(ctx)
	if !o.keepNamespace {
		_ = c.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: r.ns}})
	}
	if broken > 0 {
		return fmt.Errorf("%d promises broken", broken)
	}
	return nil
}
