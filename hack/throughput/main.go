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
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/compose"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/internal/testmanager"
	tu "github.com/toolgate/toolgate/internal/testutil"
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
	cpuProfile := flag.String("cpuprofile", "", "write this process's CPU profile (the manager and the bench; not the API server's) to this file")
	flag.Parse()
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
	if err := run(*oneSession, *sessions, *long, *workers, *ttl, *restarts); err != nil {
		pprof.StopCPUProfile()
		fmt.Fprintln(os.Stderr, "throughput:", err)
		os.Exit(1)
	}
}

// writes counts the manager's write requests by the transport.
type writes struct {
	requests, conflicts atomic.Int64
	mu                  sync.Mutex
	callPatches         []time.Duration // round trips of ToolCall status patches, since reset
}

func (w *writes) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		start := time.Now()
		resp, err := rt.RoundTrip(req)
		if req.Method != http.MethodGet {
			w.requests.Add(1)
			if err == nil && resp.StatusCode == http.StatusConflict {
				w.conflicts.Add(1)
			}
		}
		if req.Method == http.MethodPatch && strings.Contains(req.URL.Path, "/toolcalls/") && strings.HasSuffix(req.URL.Path, "/status") {
			w.mu.Lock()
			w.callPatches = append(w.callPatches, time.Since(start))
			w.mu.Unlock()
		}
		return resp, err
	})
}

// patchRoundTrips returns the round trips of ToolCall status patches since
// the last call, and forgets them.
func (w *writes) patchRoundTrips() []time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.callPatches
	w.callPatches = nil
	return out
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// commit is when the bench saw a call committed, and its outcome.
type commit struct {
	at      time.Time
	outcome toolgatev1alpha1.Outcome
	code    string // the error code and message of an outcome other than success
	seq     int64
}

// bench holds what the runs share.
type bench struct {
	ctx     context.Context
	c       client.WithWatch
	mgr     *writes
	created atomic.Int64 // the agent's creations (write requests too)
	stalls  atomic.Int64 // turns that went stallReport without a commit
	changes atomic.Int64 // watch events: effective writes
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

func run(oneSession, sessions, long, workers, ttl, restarts int) error {
	env, err := testenv.Start()
	if err != nil {
		return err
	}
	defer func() { _ = env.Stop() }()
	// Interrupted, it still stops the API server and etcd it started.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	interrupted := make(chan os.Signal, 1)
	signal.Notify(interrupted, os.Interrupt, syscall.SIGTERM)
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
	w0, r0, c0 := counters()
	took, err := b.sessionRun("one", 1, oneSession, "echo", 10)
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

	if long > 0 {
		return b.sustained(long, ttl, restarts)
	}
	return nil
}

// policyLive waits until the API server applies the mutating policy.
func (b *bench) policyLive() error {
	ns, err := b.namespace("probe")
	if err != nil {
		return err
	}
	for i := range 300 {
		tc := tu.MakeToolCall(ns, fmt.Sprintf("probe-%d", i), "none").Obj()
		if err := b.c.Create(b.ctx, tc); err != nil {
			return err
		}
		if len(tc.Finalizers) > 0 {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("the mutating admission policy toolcall-stop-work is not applied after 30 s")
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// limit measures the API server's status patches per second for ToolCalls
// carrying a settled call's status, by n writers for d, before the manager
// runs (nothing else writes).
func (b *bench) limit(n int, d time.Duration) (float64, error) {
	ns, err := b.namespace("limit")
	if err != nil {
		return 0, err
	}
	calls := make([]*toolgatev1alpha1.ToolCall, n)
	for i := range calls {
		calls[i] = tu.MakeToolCall(ns, fmt.Sprintf("c%d", i), "none").Obj()
		if err := b.c.Create(b.ctx, calls[i]); err != nil {
			return 0, err
		}
	}
	var total atomic.Int64
	var wg sync.WaitGroup
	end := time.Now().Add(d)
	errs := make(chan error, n)
	for _, tc := range calls {
		wg.Go(func() {
			for i := 0; time.Now().Before(end); i++ {
				base := tc.DeepCopy()
				settledStatus(tc, i)
				if err := b.c.Status().Patch(b.ctx, tc, client.MergeFrom(base)); err != nil {
					errs <- err
					return
				}
				total.Add(1)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		return 0, err
	}
	for _, tc := range calls {
		if err := b.c.Delete(b.ctx, tc); err != nil {
			return 0, err
		}
	}
	return float64(total.Load()) / d.Seconds(), nil
}

// settledStatus gives tc the status of a committed call, varied by i so
// that every patch is a change.
func settledStatus(tc *toolgatev1alpha1.ToolCall, i int) {
	now := metav1.NewMicroTime(time.Now())
	st := &tc.Status
	st.Phase, st.Token, st.Attempt, st.StartTime = toolgatev1alpha1.PhaseCommitted, fmt.Sprintf("tok-%d", i), 1, &now
	st.Stages = st.Stages[:0]
	for _, sv := range [][2]string{{"Call", "Admitted"}, {"PreExecute", "Allow"}, {"Guard", "Allow"}, {"Dispatch", "Dispatched"}, {"Execute", "OK"},
		{"PostExecute", "Accept"}, {"Finalize", "OK"}, {"Observe", "OK"}, {"Result", "Succeeded"}} {
		st.Stages = append(st.Stages, toolgatev1alpha1.StageRecord{Stage: sv[0], Verdict: sv[1], Time: metav1.NewTime(now.Time)})
	}
	seq := int64(i)
	st.Schedule = toolgatev1alpha1.CallSchedule{ExecutionMode: toolgatev1alpha1.ModeParallel, Released: true, CommitSequence: &seq}
	st.Result = &toolgatev1alpha1.ToolCallResult{Outcome: toolgatev1alpha1.OutcomeSucceeded, Content: fmt.Sprintf("hello %d\n", i), SettledAt: metav1.NewTime(now.Time)}
}

func (b *bench) namespace(prefix string) (string, error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}
	if err := b.c.Create(b.ctx, ns); err != nil {
		return "", err
	}
	return ns.Name, nil
}

// watch counts every change to the objects a call's path writes (each a
// new resourceVersion: an effective write) and records commits.
func (b *bench) watch() error {
	for _, list := range []client.ObjectList{&toolgatev1alpha1.ToolCallList{}, &toolgatev1alpha1.AgentSessionList{}, &toolgatev1alpha1.ApprovalRequestList{}, &eventsv1.EventList{}} {
		w, err := b.c.Watch(b.ctx, list)
		if err != nil {
			return err
		}
		go b.count(list, w)
	}
	return nil
}

// count consumes a watch, and watches again from the last version seen
// when the API server ends it.
func (b *bench) count(list client.ObjectList, w watch.Interface) {
	rv := ""
	for {
		for ev := range w.ResultChan() {
			if ev.Type != watch.Added && ev.Type != watch.Modified && ev.Type != watch.Deleted {
				continue
			}
			o, ok := ev.Object.(client.Object)
			if !ok {
				continue
			}
			rv = o.GetResourceVersion()
			b.changes.Add(1)
			kind := fmt.Sprintf("%T", ev.Object)
			v, _ := b.byKind.LoadOrStore(kind[strings.LastIndex(kind, ".")+1:], &atomic.Int64{})
			v.(*atomic.Int64).Add(1)
			if tc, ok := ev.Object.(*toolgatev1alpha1.ToolCall); ok && tc.Status.Phase == toolgatev1alpha1.PhaseCommitted {
				b.mu.Lock()
				if _, seen := b.done[tc.Namespace+"/"+tc.Name]; !seen {
					b.done[tc.Namespace+"/"+tc.Name] = commit{at: time.Now(), outcome: tc.Status.Result.Outcome, code: strings.TrimSpace(tc.Status.Result.ErrorCode + " " + tc.Status.Result.Message + trail(tc)), seq: *tc.Status.Schedule.CommitSequence}
				}
				b.mu.Unlock()
			}
		}
		if b.ctx.Err() != nil {
			return
		}
		var err error
		for w, err = b.c.Watch(b.ctx, list, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: rv}}); err != nil; {
			fmt.Fprintln(os.Stderr, "throughput: watching again:", err)
			time.Sleep(time.Second)
			w, err = b.c.Watch(b.ctx, list, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: rv}})
		}
	}
}

// startManager starts the manager, and keeps what restart needs to start
// it again.
func (b *bench) startManager(cfg *rest.Config, env *testenv.Env, workers int) error {
	b.restartWith = func() error { return b.startManager(cfg, env, workers) }
	mctx, cancel := context.WithCancel(b.ctx)
	done, err := testmanager.Run(mctx, cfg, env.Scheme,
		// As cmd/manager: no managed fields in the cache.
		cache.Options{DefaultTransform: cache.TransformStripManagedFields()},
		compose.Options{
			Approvals:      []toolgatev1alpha1.ApprovalProvider{toolgatev1alpha1.ApprovalProviderNone},
			ProcessSandbox: true, ProcessWorkspaceDir: b.work,
			WakeBuffer: 4096, SessionWorkers: workers,
		})
	if err != nil {
		cancel()
		return err
	}
	stopped := make(chan struct{})
	b.stopManager = func() {
		cancel()
		<-stopped
	}
	go func() {
		defer close(stopped)
		if err := <-done; err != nil {
			fmt.Fprintln(os.Stderr, "throughput: manager:", err)
			os.Exit(1)
		}
	}()
	return nil
}

// restart stops the manager (its process-sandbox bodies die with it, as in
// a crash) and starts another.
func (b *bench) restart() error {
	b.stopManager()
	return b.restartWith()
}

// profile creates the profile every session uses: echo (cat) and nap
// (sleep 0.2), both parallel-safe, all allowed.
func (b *bench) profile(ns string) error {
	tool := func(name, script string) toolgatev1alpha1.ToolDefinition {
		w := tu.MakeTool(name).Parameters(`{"type":"object"}`).ConcurrencySafe("true")
		w.Container.Command = []string{"/bin/sh", "-c", script}
		w.Output = toolgatev1alpha1.OutputDeclaration{Schema: tu.JSON(`{"type":"string"}`), Render: toolgatev1alpha1.RenderSpec{Format: toolgatev1alpha1.RenderText}}
		return w.Obj()
	}
	// echo is idempotent: a restart of the manager kills the process
	// sandbox's bodies, and the call runs its body again.
	echo := tool("echo", "cat")
	echo.Idempotent = true
	p := tu.MakeToolProfile(ns, "p").Tools(echo, tool("nap", "sleep 0.2; echo ok")).
		PreRule("allow-all", toolgatev1alpha1.ActionAllow, "").
		Sandbox(func(s *toolgatev1alpha1.SandboxPolicy) {
			s.Provider = toolgatev1alpha1.SandboxProviderProcess
			s.Mode = toolgatev1alpha1.SandboxWorkspaceWrite
		}).
		Approval(func(a *toolgatev1alpha1.ApprovalSettings) { a.Provider = toolgatev1alpha1.ApprovalProviderNone })
	return b.c.Create(b.ctx, p.Obj())
}

// sessionRun creates n sessions of perSession calls of tool each, in turns
// of turnSize, submits every call at once (8 writers) and waits until all
// have committed; it returns the time from the first creation to the last
// commit.
func (b *bench) sessionRun(prefix string, n, perSession int, tool string, turnSize int) (time.Duration, error) {
	ns, err := b.namespace(prefix)
	if err != nil {
		return 0, err
	}
	if err := b.profile(ns); err != nil {
		return 0, err
	}
	var calls []*toolgatev1alpha1.ToolCall
	for s := range n {
		name := fmt.Sprintf("s%d", s)
		if err := b.c.Create(b.ctx, tu.MakeAgentSession(ns, name, "p").MaxParallel(10).Obj()); err != nil {
			return 0, err
		}
		for i := range perSession {
			calls = append(calls, tu.MakeToolCall(ns, fmt.Sprintf("%s-c%d", name, i), name).
				Tool(tool, `{"text":"hello"}`).At(int64(i/turnSize), int32(i%turnSize)).Of(int32(turnSize)).Obj())
		}
	}
	if err := b.waitReady(ns, n); err != nil {
		return 0, err
	}
	start := time.Now()
	b.last, b.lastStart = calls, start
	b.mgr.patchRoundTrips()
	if err := b.submit(calls); err != nil {
		return 0, err
	}
	return b.waitCommitted(calls, start, 5*time.Minute)
}

// hops profiles the last sessionRun of one session, where a session's rate
// is bound by latency: the calls of a turn are admitted one after another
// (each once the previous one's pre-execute decision is durable and seen)
// and commit one after another. It prints the p50 of each hop: admission
// (dispatch to the next dispatch; the API's startTime, to the
// microsecond), commit (commit to the next, as this process's watch saw
// them), a pool slot (the commit that frees it to the next dispatch), a
// turn (its last commit to the next turn's first dispatch), the round trip
// of the manager's ToolCall status patches (the write in each hop), and
// when the first dispatch came.
func (b *bench) hops(maxParallel int) error {
	calls := b.last
	dispatched := make([]time.Time, len(calls))
	for i, tc := range calls {
		got := &toolgatev1alpha1.ToolCall{}
		if err := b.c.Get(b.ctx, client.ObjectKeyFromObject(tc), got); err != nil {
			return err
		}
		if got.Status.StartTime == nil {
			return fmt.Errorf("call %s: no startTime", tc.Name)
		}
		dispatched[i] = got.Status.StartTime.Time
	}
	b.mu.Lock()
	committedAt := make([]time.Time, len(calls))
	for i, tc := range calls {
		committedAt[i] = b.done[tc.Namespace+"/"+tc.Name].at
	}
	b.mu.Unlock()
	var admit, commit, slot, turn []time.Duration
	for i := 1; i < len(calls); i++ {
		c, prev := calls[i], calls[i-1]
		if c.Spec.Turn != prev.Spec.Turn {
			turn = append(turn, dispatched[i].Sub(committedAt[i-1]))
			continue
		}
		commit = append(commit, committedAt[i].Sub(committedAt[i-1]))
		if int(c.Spec.Index) < maxParallel {
			admit = append(admit, dispatched[i].Sub(dispatched[i-1]))
		} else {
			slot = append(slot, dispatched[i].Sub(committedAt[i-maxParallel]))
		}
	}
	p50 := func(ds []time.Duration) string {
		if len(ds) == 0 {
			return "-"
		}
		slices.Sort(ds)
		return fmt.Sprintf("%.1f ms", float64(ds[len(ds)/2])/float64(time.Millisecond))
	}
	fmt.Printf("  hops (p50): admission %s, commit %s, pool slot %s, turn %s; a ToolCall status patch's round trip %s; first dispatch %.0f ms after the submission began\n",
		p50(admit), p50(commit), p50(slot), p50(turn), p50(b.mgr.patchRoundTrips()), float64(slices.MinFunc(dispatched, func(a, b time.Time) int { return a.Compare(b) }).Sub(b.lastStart))/float64(time.Millisecond))
	return nil
}

// waitReady waits until the profile and n sessions are Ready.
func (b *bench) waitReady(ns string, n int) error {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		list := &toolgatev1alpha1.AgentSessionList{}
		if err := b.c.List(b.ctx, list, client.InNamespace(ns)); err != nil {
			return err
		}
		ready := 0
		for _, s := range list.Items {
			for _, c := range s.Status.Conditions {
				if c.Type == toolgatev1alpha1.ConditionReady && c.Status == metav1.ConditionTrue {
					ready++
				}
			}
		}
		if ready == n {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("sessions of %s not Ready after a minute", ns)
}

// submit creates the calls with 8 writers, in order within each writer.
func (b *bench) submit(calls []*toolgatev1alpha1.ToolCall) error {
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < len(calls); i += 8 {
				if err := b.c.Create(b.ctx, calls[i]); err != nil {
					errs <- err
					return
				}
				b.created.Add(1)
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// waitCommitted waits until every call has committed and returns the time
// from start to the last commit.
func (b *bench) waitCommitted(calls []*toolgatev1alpha1.ToolCall, start time.Time, limit time.Duration) (time.Duration, error) {
	deadline := start.Add(limit)
	progress, lastMissing, reported := time.Now(), -1, false
	for {
		var last time.Time
		missing := 0
		b.mu.Lock()
		for _, tc := range calls {
			c, ok := b.done[tc.Namespace+"/"+tc.Name]
			if !ok {
				missing++
				continue
			}
			if c.at.After(last) {
				last = c.at
			}
		}
		b.mu.Unlock()
		if missing == 0 {
			return last.Sub(start), b.checkOutcomes(calls)
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("%d of %d calls not committed after %s", missing, len(calls), limit)
		}
		if missing != lastMissing {
			progress, lastMissing = time.Now(), missing
		} else if !reported && time.Since(progress) > stallReport {
			reported = true
			b.stalls.Add(1)
			b.reportStall(calls)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stallReport is how long a turn may go without a commit before the bench
// prints where its calls stand.
const stallReport = 20 * time.Second

// reportStall prints the state of a turn's uncommitted calls and of their
// session, as the API server has them, to find what holds them.
func (b *bench) reportStall(calls []*toolgatev1alpha1.ToolCall) {
	var out strings.Builder
	fmt.Fprintf(&out, "stall: no commit for %s in turn %d of %s\n", stallReport, calls[0].Spec.Turn, calls[0].Spec.SessionRef.Name)
	s := &toolgatev1alpha1.AgentSession{}
	if err := b.c.Get(b.ctx, client.ObjectKey{Namespace: calls[0].Namespace, Name: calls[0].Spec.SessionRef.Name}, s); err == nil {
		fmt.Fprintf(&out, "  session: nextSequence %d committedTurn %d currentTurn %d committedCalls %d deleting %t\n",
			s.Status.NextSequence, s.Status.CommittedTurn, s.Status.CurrentTurn, s.Status.CommittedCalls, !s.DeletionTimestamp.IsZero())
	}
	list := &toolgatev1alpha1.ToolCallList{}
	if err := b.c.List(b.ctx, list, client.InNamespace(calls[0].Namespace)); err == nil {
		for i := range list.Items {
			tc := &list.Items[i]
			if tc.Spec.SessionRef.Name != calls[0].Spec.SessionRef.Name {
				continue
			}
			sch := tc.Status.Schedule
			fmt.Fprintf(&out, "  %s: phase %q mode %q released %t refusal %q deleting %t finalizers %v attempt %d next %q trail",
				tc.Name, tc.Status.Phase, sch.ExecutionMode, sch.Released, sch.Refusal, !tc.DeletionTimestamp.IsZero(), tc.Finalizers, tc.Status.Attempt, nextOf(tc))
			for _, r := range tc.Status.Stages {
				fmt.Fprintf(&out, " %s/%s", r.Stage, r.Verdict)
			}
			out.WriteString("\n")
		}
	}
	fmt.Fprint(os.Stderr, out.String())
}

// nextOf is a call's next stage as its checkpoint says.
func nextOf(tc *toolgatev1alpha1.ToolCall) string {
	if tc.Status.Checkpoint == nil {
		return ""
	}
	return tc.Status.Checkpoint.Next
}

// trail is the boundaries a call that did not succeed crossed, each with
// its time, to find the first that diverged; empty for a success.
func trail(tc *toolgatev1alpha1.ToolCall) string {
	if tc.Status.Result.Outcome == toolgatev1alpha1.OutcomeSucceeded {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "; attempt %d, created %s:", tc.Status.Attempt, tc.CreationTimestamp.Format("15:04:05"))
	for _, r := range tc.Status.Stages {
		fmt.Fprintf(&b, " %s/%s", r.Stage, r.Verdict)
		if r.Reason != "" {
			fmt.Fprintf(&b, "(%s)", r.Reason)
		}
		fmt.Fprintf(&b, "@%s", r.Time.Format("15:04:05"))
	}
	return b.String()
}

// checkOutcomes fails the run when a call did not succeed: a figure for
// calls that failed would measure nothing.
func (b *bench) checkOutcomes(calls []*toolgatev1alpha1.ToolCall) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	var bad []string
	last := map[string]commit{} // by session: the previous call's commit
	for _, tc := range calls {
		c := b.done[tc.Namespace+"/"+tc.Name]
		if c.outcome != toolgatev1alpha1.OutcomeSucceeded {
			bad = append(bad, tc.Name+" ("+string(c.outcome)+" "+c.code+")")
		}
		// The calls are given in model order per session: their places in
		// the log must follow it.
		if prev, ok := last[tc.Spec.SessionRef.Name]; ok && c.seq <= prev.seq {
			bad = append(bad, fmt.Sprintf("%s (sequence %d after %d: out of model order)", tc.Name, c.seq, prev.seq))
		}
		last[tc.Spec.SessionRef.Name] = c
	}
	if len(bad) > 0 {
		slices.Sort(bad)
		return fmt.Errorf("calls that did not succeed in %s: %s", calls[0].Namespace, strings.Join(bad[:min(len(bad), 10)], ", "))
	}
	return nil
}

// sustained runs n calls over 50 sessions, each an agent that submits a
// turn of 10 and waits for it to commit before the next, and prints the
// figures every 10 s.
func (b *bench) sustained(n, ttl, restarts int) error {
	ns, err := b.namespace("long")
	if err != nil {
		return err
	}
	if err := b.profile(ns); err != nil {
		return err
	}
	const sessions, turn = 50, 10
	turns := max(1, n/(sessions*turn))
	for s := range sessions {
		session := tu.MakeAgentSession(ns, fmt.Sprintf("s%d", s), "p").MaxParallel(10).Obj()
		if ttl >= 0 {
			session.Spec.TTLSecondsAfterCommit = ptr.To(int32(ttl))
		}
		if err := b.c.Create(b.ctx, session); err != nil {
			return err
		}
	}
	if err := b.waitReady(ns, sessions); err != nil {
		return err
	}
	var committed atomic.Int64
	stop := make(chan struct{})
	go b.print(&committed, stop)
	faults := make(chan error, 1)
	go func() { faults <- b.faults(&committed, turns*sessions*turn, restarts, stop) }()
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, sessions)
	for s := range sessions {
		wg.Go(func() {
			for t := range turns {
				var calls []*toolgatev1alpha1.ToolCall
				for i := range turn {
					calls = append(calls, tu.MakeToolCall(ns, fmt.Sprintf("s%d-t%d-c%d", s, t, i), fmt.Sprintf("s%d", s)).
						Tool("echo", `{"text":"hello"}`).At(int64(t), int32(i)).Of(turn).Obj())
				}
				for _, tc := range calls {
					if err := b.c.Create(b.ctx, tc); err != nil {
						errs <- err
						return
					}
					b.created.Add(1)
				}
				if _, err := b.waitCommitted(calls, time.Now(), 5*time.Minute); err != nil {
					errs <- err
					return
				}
				committed.Add(turn)
			}
		})
	}
	wg.Wait()
	close(stop)
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	if err := <-faults; err != nil {
		return err
	}
	took := time.Since(start)
	heap, rss := memory()
	retention := "calls kept"
	if ttl >= 0 {
		retention = fmt.Sprintf("ttlSecondsAfterCommit %d", ttl)
	}
	fmt.Printf("sustained (%s, %d manager restarts; each call one result, succeeded, in model order): %d calls in %.0f s = %.1f calls/s; turns %s without a commit: %d; after them: heap %.0f MiB, RSS %.0f MiB\n", retention, restarts, committed.Load(), took.Seconds(), float64(committed.Load())/took.Seconds(), stallReport, b.stalls.Load(), heap, rss)
	return nil
}

// faults restarts the manager restarts times, evenly through a run of
// total calls, and prints each restart and the time to the next commit.
func (b *bench) faults(committed *atomic.Int64, total, restarts int, stop chan struct{}) error {
	for i := 1; i <= restarts; i++ {
		at := int64(total * i / (restarts + 1))
		for committed.Load() < at {
			select {
			case <-stop:
				return nil
			case <-time.After(50 * time.Millisecond):
			}
		}
		b.mu.Lock()
		seen := len(b.done)
		b.mu.Unlock()
		start := time.Now()
		if err := b.restart(); err != nil {
			return err
		}
		for {
			b.mu.Lock()
			more := len(b.done) > seen
			b.mu.Unlock()
			if more {
				break
			}
			select {
			case <-stop:
				return nil
			case <-time.After(10 * time.Millisecond):
			}
		}
		// The first commit seen may come from the old manager's last
		// writes; the restart took what the stop took.
		fmt.Printf("  fault: manager restarted at %d calls committed; next commit %.2f s after the stop began\n", at, time.Since(start).Seconds())
	}
	return nil
}

// print prints the sustained run's figures every 10 s.
func (b *bench) print(committed *atomic.Int64, stop chan struct{}) {
	t := time.NewTicker(10 * time.Second)
	defer t.Stop()
	start, lastCalls, lastWrites := time.Now(), int64(0), b.mgr.requests.Load()+b.created.Load()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		calls, w := committed.Load(), b.mgr.requests.Load()+b.created.Load()
		heap, rss := memory()
		b.mu.Lock()
		seen := len(b.done)
		b.mu.Unlock()
		fmt.Printf("  t=%4.0fs seen %6d committed %6d  calls/s %5.1f  write requests/s %6.1f  heap %4.0f MiB  RSS %4.0f MiB\n",
			time.Since(start).Seconds(), seen, calls, float64(calls-lastCalls)/10, float64(w-lastWrites)/10, heap, rss)
		lastCalls, lastWrites = calls, w
	}
}

// memory returns the live heap after a collection and the process's RSS,
// in MiB.
func memory() (float64, float64) {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	rss := 0.0
	if data, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, l := range strings.Split(string(data), "\n") {
			if strings.HasPrefix(l, "VmRSS:") {
				var kb float64
				_, _ = fmt.Sscanf(strings.TrimSpace(strings.TrimPrefix(l, "VmRSS:")), "%f", &kb)
				rss = kb / 1024
			}
		}
	}
	return float64(m.HeapAlloc) / (1 << 20), rss
}
