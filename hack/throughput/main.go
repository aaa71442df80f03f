// Command throughput measures toolgate's throughput against the limit the
// API server sets, in one run on envtest (a real kube-apiserver and etcd;
// the manager in this process with the process sandbox and trivial
// bodies). It prints:
//
//   - the limit: status patches per second of a settled call's size that
//     the API server takes for this CRD (a loop of patches, no manager);
//   - settled calls/s for one session and for many, and what that is as a
//     share of the limit divided by the writes each call costs;
//   - writes per call: effective (each one a watch event: a new
//     resourceVersion) and requested (every write request, no-op patches
//     and conflicts included; the agent's creation is one of them);
//   - the makespan of one turn of 50 parallel 200 ms calls at maxParallel
//     10 (ideal 1.0 s);
//   - with -long N, a sustained run of N calls printing, every 10 s, calls
//     committed, calls/s, API write requests/s and the manager's heap and
//     RSS (the process's: the manager is most of it).
//
// Run it with make throughput (after make envtest-bins).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	_ "net/http/pprof" // -pprof
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap/zapcore"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/testenv"
)

func main() {
	oneSession := flag.Int("one", 200, "calls of the one-session run (turns of 10)")
	sessions := flag.Int("sessions", 30, "sessions of the many-session run (20 calls each, turns of 10)")
	long := flag.Int("long", 0, "calls of the sustained run (0 skips it)")
	workers := flag.Int("session-workers", 0, "AgentSession workers (0: the manager's default)")
	logFile := flag.String("log", "", "write the manager's log to this file")
	verbose := flag.Bool("v", false, "the log has the manager's V(1) messages too (admissions, expiries)")
	restarts := flag.Int("restarts", 0, "the sustained run restarts the manager this many times, evenly through the run (a crash: the process sandbox's bodies die with it)")
	ttl := flag.Int("ttl", -1, "the sustained run's sessions delete committed calls this many seconds after their turn completes (spec.ttlSecondsAfterCommit; -1: keep them)")
	curveFlag := flag.String("curve", "1,10,100,1000", "session counts of the scale curve (empty: none)")
	turnsFlag := flag.String("turns", "1,10,50,100", "turn sizes whose session object is measured (empty: none)")
	cpuProfile := flag.String("cpuprofile", "", "write this process's CPU profile (the manager and the bench; not the API server's) to this file")
	pprofAddr := flag.String("pprof", "", "serve this process's profiles (net/http/pprof) on this loopback address while it runs, 127.0.0.1:6060 say: heap profiles of a sustained run, taken apart, show what grows")
	flag.Parse()
	if *pprofAddr != "" {
		srv := &http.Server{Addr: *pprofAddr, ReadHeaderTimeout: 5 * time.Second}
		go func() { fmt.Fprintln(os.Stderr, "throughput: pprof:", srv.ListenAndServe()) }()
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "throughput:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	var logTo io.Writer = discard{}
	if *logFile != "" {
		f, err := os.Create(*logFile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "throughput:", err)
			os.Exit(1)
		}
		defer func() { _ = f.Close() }()
		logTo = f
	}
	level := zapcore.InfoLevel
	if *verbose {
		level = zapcore.DebugLevel
	}
	ctrl.SetLogger(zap.New(zap.WriteTo(logTo), zap.Level(level)))
	curve, err := counts(*curveFlag)
	if err == nil {
		turnSizes, err = counts(*turnsFlag)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "throughput:", err)
		os.Exit(2)
	}
	if err := run(*oneSession, *sessions, *long, *workers, *ttl, *restarts, curve); err != nil {
		pprof.StopCPUProfile()
		fmt.Fprintln(os.Stderr, "throughput:", err)
		os.Exit(1)
	}
}

// bench holds what the runs share.
type bench struct {
	ctx     context.Context
	c       client.WithWatch
	mgr     *writes
	created atomic.Int64 // the agent's creations (write requests too)
	stalls  atomic.Int64 // turns that went stallReport without a commit
	changes atomic.Int64 // watch events: effective writes
	held    atomic.Int64 // ToolCalls the API server holds: created less deleted
	commits atomic.Int64 // commits seen, never less (done forgets)
	byKind  sync.Map     // kind → *atomic.Int64, the same by kind
	mu      sync.Mutex
	done    map[string]commit // namespace/name → its commit, first seen
	work    string
	// last is the calls of the last sessionRun, and when their submission
	// began: what hops profiles.
	last      []*toolgatev1alpha1.ToolCall
	lastStart time.Time

	stopManager func()
	restartWith func() error
}

// freshCalls are the calls of the one-session run in a new leader's first
// seconds: turns of 10 that end within them on this machine.
const freshCalls = 40

// turnSizes are the turns whose session object is measured (-turns).
var turnSizes []int

func run(oneSession, sessions, long, workers, ttl, restarts int, curve []int) error {
	env, err := testenv.Start()
	if err != nil {
		return err
	}
	defer func() { _ = env.Stop() }()
	// Interrupted, it still stops the API server and etcd it started; so
	// too when its output's reader goes (| head): Go would otherwise die
	// of the SIGPIPE at the next print and leave both running.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	interrupted := make(chan os.Signal, 1)
	signal.Notify(interrupted, os.Interrupt, syscall.SIGTERM, syscall.SIGPIPE)
	go func() {
		<-interrupted
		cancel()
		_ = env.Stop()
		os.Exit(130)
	}()
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS, cfg.Burst = -1, 0 // no client-side limit: the API server is the limit
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "toolgate-throughput-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(work) }()
	b := &bench{ctx: ctx, c: c, mgr: &writes{}, done: map[string]commit{}, work: work}
	fmt.Printf("machine: %d CPUs, %s; envtest (kube-apiserver and etcd from ~/.cache/toolgate), manager in process, process sandbox\n", runtime.NumCPU(), runtime.Version())

	limit, err := b.limit(8, 10*time.Second)
	if err != nil {
		return err
	}
	fmt.Printf("limit: %.0f status patches/s (8 writers, 10 s, a settled call's status)\n", limit)

	// The shipped mutating policy: a call is created with its finalizer.
	objs, err := testenv.ReadObjects(filepath.Join(testenv.RepoRoot(), "config", "admission", "toolcall_defaults.yaml"))
	if err != nil {
		return err
	}
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil {
			return err
		}
	}
	if err := b.policyLive(); err != nil {
		return err
	}
	if err := b.watch(); err != nil {
		return err
	}
	mcfg := rest.CopyConfig(cfg)
	mcfg.Wrap(b.mgr.wrap)
	if err := b.startManager(mcfg, env, workers); err != nil {
		return err
	}

	kinds := func() map[string]int64 {
		out := map[string]int64{}
		b.byKind.Range(func(k, v any) bool { out[k.(string)] = v.(*atomic.Int64).Load(); return true })
		return out
	}
	var k0 map[string]int64
	report := func(name string, calls int, took time.Duration, w0, r0, c0 int64) {
		var by []string
		for k, v := range kinds() {
			by = append(by, fmt.Sprintf("%s %.2f", k, float64(v-k0[k])/float64(calls)))
		}
		slices.Sort(by)
		defer fmt.Printf("  effective writes/call by kind: %s\n", strings.Join(by, ", "))
		eff := float64(b.changes.Load()-w0) / float64(calls)
		req := float64(b.mgr.requests.Load()+b.created.Load()-r0) / float64(calls)
		rate := float64(calls) / took.Seconds()
		ceiling := limit / eff
		fmt.Printf("%s: %d calls in %.2f s = %.1f calls/s; writes/call effective %.2f, requested %.2f (%d conflicts); ceiling at %.0f patches/s: %.1f calls/s; ratio %.2f\n",
			name, calls, took.Seconds(), rate, eff, req, b.mgr.conflicts.Load()-c0, limit, ceiling, rate/ceiling)
	}
	counters := func() (int64, int64, int64) {
		k0 = kinds()
		return b.changes.Load(), b.mgr.requests.Load() + b.created.Load(), b.mgr.conflicts.Load()
	}

	// Warm-up: the caches, the profile's compilation.
	if _, err := b.sessionRun("warm", 1, 10, "echo", 10); err != nil {
		return err
	}
	// A new leader's first seconds, measured apart: its caches are cold.
	w0, r0, c0 := counters()
	took, err := b.sessionRun("fresh", 1, freshCalls, "echo", 10)
	if err != nil {
		return err
	}
	report("one session, a new leader's first seconds", freshCalls, took, w0, r0, c0)
	if err := b.hops(10); err != nil {
		return err
	}
	w0, r0, c0 = counters()
	took, err = b.sessionRun("one", 1, oneSession, "echo", 10)
	if err != nil {
		return err
	}
	report("one session", oneSession, took, w0, r0, c0)
	if err := b.hops(10); err != nil {
		return err
	}

	w0, r0, c0 = counters()
	took, err = b.sessionRun("many", sessions, 20, "echo", 10)
	if err != nil {
		return err
	}
	report(fmt.Sprintf("%d sessions", sessions), sessions*20, took, w0, r0, c0)

	took, err = b.sessionRun("makespan", 1, 50, "nap", 50)
	if err != nil {
		return err
	}
	fmt.Printf("makespan: one turn of 50 calls of 200 ms at maxParallel 10: %.2f s (ideal 1.00 s; ratio %.2f)\n", took.Seconds(), took.Seconds())
	if err := b.hops(10); err != nil {
		return err
	}
	if len(curve) > 0 {
		if err := b.curve(curve, limit); err != nil {
			return err
		}
	}
	if len(turnSizes) > 0 {
		if err := b.turnSizes(turnSizes); err != nil {
			return err
		}
	}

	if long > 0 {
		return b.sustained(long, ttl, restarts)
	}
	return nil
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
