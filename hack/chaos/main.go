// Command chaos runs a load of tool calls on the local cluster while it
// injects faults at random times (the manager SIGKILLed, the leader of two
// replicas killed, kube-apiserver, etcd, the kubelet and containerd
// restarted, tool pods deleted), then checks and prints what toolgate
// promises: one result per call, none twice, no non-idempotent body run
// twice, every session committed in model order, no pod left behind, and
// per fault kind the time from the fault to the next commit. It exits
// non-zero when a promise is broken. Run it with make chaos (long form) or
// as part of make test-e2e (-short).
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// Fault kinds.
const (
	faultManager    = "manager-sigkill"
	faultApiserver  = "kube-apiserver-restart"
	faultEtcd       = "etcd-restart"
	faultKubelet    = "kubelet-restart"
	faultContainerd = "containerd-restart"
	faultPod        = "tool-pod-deleted"
)

type options struct {
	root, clusterDir     string
	sessions, calls      int
	kills, replicas      int
	faults               []string
	interval, timeout    time.Duration
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
	flag.StringVar(&faults, "faults", strings.Join([]string{faultManager, faultApiserver, faultEtcd, faultKubelet, faultContainerd, faultPod}, ","), "fault kinds to inject")
	flag.DurationVar(&o.interval, "interval", 6*time.Second, "mean time between faults")
	flag.DurationVar(&o.timeout, "timeout", 25*time.Minute, "give up after")
	flag.IntVar(&o.cancelEvery, "cancel-every", 20, "cancel about one call in this many")
	flag.IntVar(&o.seed, "seed", 0, "random seed (0: from the clock)")
	flag.BoolVar(&o.short, "short", false, "the short form for CI: 2 sessions, 40 calls, 3 manager kills, one tool pod deleted, one kube-apiserver restart")
	flag.BoolVar(&o.keepNamespace, "keep", false, "keep the namespace afterwards")
	flag.Parse()
	o.faults = strings.Split(faults, ",")
	if o.short {
		o.sessions, o.calls, o.kills = 2, 40, 3
		o.faults = []string{faultManager, faultPod, faultApiserver}
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
	kind string
	at   time.Time
	note string
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
	fmt.Printf("chaos: namespace %s, seed %d, %d sessions, %d calls, %d manager replicas, faults %s\n",
		r.ns, o.seed, o.sessions, o.calls, o.replicas, strings.Join(o.faults, ","))
	if err := r.setup(ctx); err != nil {
		return err
	}
	if err := r.scale(ctx, int32(o.replicas)); err != nil {
		return err
	}
	defer func() { _ = r.scale(context.Background(), 1) }()
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
	broken := r.report(ctx)
	if !o.keepNamespace {
		_ = c.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: r.ns}})
	}
	if broken > 0 {
		return fmt.Errorf("%d promises broken", broken)
	}
	return nil
}

const profileYAML = `
apiVersion: toolgate.dev/v1alpha1
kind: ToolProfile
metadata: {name: chaos}
spec:
  permissionPreset: Restricted
  tools:
    - {name: exclusive, description: non-idempotent exclusive, parameters: {type: object}, output: {schema: {type: string}, render: {format: Text}},
       container: {image: toolgate.dev/tools:dev, command: [/bin/sh]}, timeoutSeconds: 120}
    - {name: parallel, description: non-idempotent parallel-safe, parameters: {type: object}, output: {schema: {type: string}, render: {format: Text}},
       container: {image: toolgate.dev/tools:dev, command: [/bin/sh]}, isConcurrencySafe: "true", timeoutSeconds: 120}
    - {name: idempotent, description: idempotent parallel-safe, parameters: {type: object}, output: {schema: {type: string}, render: {format: Text}},
       container: {image: toolgate.dev/tools:dev, command: [/bin/sh]}, isConcurrencySafe: "true", idempotent: true, timeoutSeconds: 120}
    - {name: flaky, description: "idempotent, fails its first attempt", parameters: {type: object}, output: {schema: {type: string}, render: {format: Text}},
       container: {image: toolgate.dev/tools:dev, command: [/bin/sh]},
       idempotent: true, retry: {maxAttempts: 3}, timeoutSeconds: 120}
    - {name: asked, description: needs a person, parameters: {type: object}, output: {schema: {type: string}, render: {format: Text}},
       container: {image: toolgate.dev/tools:dev, command: [/bin/sh]}, isConcurrencySafe: "true", timeoutSeconds: 120}
    - {name: overtime, description: outlives its timeout, parameters: {type: object}, output: {schema: {type: string}, render: {format: Text}},
       container: {image: toolgate.dev/tools:dev, command: [/bin/sh]}, isConcurrencySafe: "true", timeoutSeconds: 2}
  preExecute:
    - {name: ask, tools: [asked], action: Ask}
    - {name: allow, action: Allow}
  sandbox: {mode: WorkspaceWrite, provider: Pod, resources: {memory: 64Mi}}
  approval: {provider: APIServer, timeoutSeconds: 600}
`

// scripts are the tools' bodies, after markRun.
var scripts = map[string]string{
	"exclusive":  `sleep 1; echo "$id"`,
	"parallel":   `sleep 2; echo "$id"`,
	"idempotent": `echo "$id"`,
	"flaky":      `if [ ! -e "$TOOLGATE_WORKSPACE/runs/$id.first" ]; then : > "$TOOLGATE_WORKSPACE/runs/$id.first"; exit 1; fi; echo "$id"`,
	"asked":      `echo "$id"`,
	"overtime":   `sleep 8; echo "$id"`,
}

// markRun reads the call's id from its arguments and appends a line to
// runs/<id> in the workspace: a body run counted, not guessed.
const markRun = `id=$(sed -n 's/.*"id":"\([^"]*\)".*/\1/p'); echo run >> "$TOOLGATE_WORKSPACE/runs/$id";`

// nonIdempotent are the tools whose bodies must never run twice.
var nonIdempotent = map[string]bool{"exclusive": true, "parallel": true, "asked": true, "overtime": true}

func (r *chaos) setup(ctx context.Context) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: r.ns, Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}}}
	if err := r.c.Create(ctx, ns); err != nil {
		return err
	}
	p := &toolgatev1alpha1.ToolProfile{}
	if err := yaml.UnmarshalStrict([]byte(profileYAML), p); err != nil {
		return fmt.Errorf("the profile: %w", err)
	}
	p.Namespace = r.ns
	for i := range p.Spec.Tools {
		t := &p.Spec.Tools[i]
		t.Container.Command = []string{"/bin/sh", "-c", markRun + " " + scripts[t.Name]}
	}
	if err := r.c.Create(ctx, p); err != nil {
		return err
	}
	if err := r.waitFor(ctx, 60*time.Second, func() bool {
		got := &toolgatev1alpha1.ToolProfile{}
		if r.c.Get(ctx, client.ObjectKeyFromObject(p), got) != nil {
			return false
		}
		for _, c := range got.Status.Conditions {
			if c.Type == "Ready" && c.Status == metav1.ConditionTrue {
				return true
			}
		}
		return false
	}); err != nil {
		return fmt.Errorf("the profile is not Ready: %w", err)
	}
	for s := range r.o.sessions {
		name := fmt.Sprintf("s%d", s)
		dir := filepath.Join(r.o.clusterDir, "pv", r.ns, name)
		if err := os.MkdirAll(filepath.Join(dir, "runs"), 0o777); err != nil {
			return err
		}
		for _, d := range []string{dir, filepath.Join(dir, "runs")} {
			if err := os.Chmod(d, 0o777); err != nil {
				return err
			}
		}
		pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: r.ns + "-" + name}, Spec: corev1.PersistentVolumeSpec{
			Capacity: corev1.ResourceList{corev1.ResourceStorage: mustQuantity("1Gi")}, AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: "", ClaimRef: &corev1.ObjectReference{Namespace: r.ns, Name: name},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir}},
		}}
		pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: r.ns, Name: name}, Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, StorageClassName: new(string), VolumeName: pv.Name,
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: mustQuantity("1Gi")}},
		}}
		for _, o := range []client.Object{pv, pvc} {
			if err := r.c.Create(ctx, o); err != nil {
				return err
			}
		}
		session := &toolgatev1alpha1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: r.ns, Name: name}, Spec: toolgatev1alpha1.AgentSessionSpec{
			Owner: "admin", ProfileRef: toolgatev1alpha1.LocalObjectReference{Name: "chaos"}, MaxParallel: 4,
			Workspace: &toolgatev1alpha1.WorkspaceSpec{ExistingClaim: name},
		}}
		if err := r.c.Create(ctx, session); err != nil {
			return err
		}
	}
	return nil
}

// scale sets the manager's replicas and waits until as many run.
func (r *chaos) scale(ctx context.Context, n int32) error {
	if _, err := r.kubectl("-n", "toolgate-system", "scale", "deployment/toolgate-controller-manager", fmt.Sprintf("--replicas=%d", n)); err != nil {
		return err
	}
	_, err := r.kubectl("-n", "toolgate-system", "rollout", "status", "deployment/toolgate-controller-manager", "--timeout=180s")
	return err
}

func (r *chaos) kubectl(args ...string) (string, error) {
	cmd := exec.Command(filepath.Join(envOr("K8S_BIN", r.k8sBin()), "kubectl"), append([]string{"--kubeconfig", filepath.Join(r.o.clusterDir, "kubeconfig", "admin.kubeconfig")}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

func (r *chaos) k8sBin() string {
	out, err := exec.Command("bash", "-c", "source hack/cluster-env.sh && echo $K8S_BIN").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// load is the agents: each session submits its turns in order, the next
// once the previous has committed, until all calls are submitted; then it
// waits for every call's result.
func (r *chaos) load(ctx context.Context) error {
	tools := []string{"exclusive", "parallel", "parallel", "idempotent", "idempotent", "flaky", "asked", "overtime"}
	perSession := (r.o.calls + r.o.sessions - 1) / r.o.sessions
	var wg sync.WaitGroup
	errs := make(chan error, r.o.sessions)
	left := r.o.calls
	for s := range r.o.sessions {
		n := min(perSession, left)
		left -= n
		seed := r.rng.Uint64()
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(s)))
			session := fmt.Sprintf("s%d", s)
			for turn := int64(0); n > 0; turn++ {
				size := min(n, 1+rng.IntN(4))
				n -= size
				var names []string
				for i := range size {
					tool := tools[rng.IntN(len(tools))]
					name := fmt.Sprintf("%s-t%d-i%d", session, turn, i)
					tc := &toolgatev1alpha1.ToolCall{ObjectMeta: metav1.ObjectMeta{Namespace: r.ns, Name: name}, Spec: toolgatev1alpha1.ToolCallSpec{
						SessionRef: toolgatev1alpha1.LocalObjectReference{Name: session}, Turn: turn, Index: int32(i), TurnSize: int32(size),
						CallID: name, Tool: tool, Arguments: fmt.Sprintf(`{"id":%q}`, name), Requester: "admin",
					}}
					if err := r.retry(ctx, func() error { return client.IgnoreAlreadyExists(r.c.Create(ctx, tc)) }); err != nil {
						errs <- err
						return
					}
					r.mu.Lock()
					r.calls[name] = &call{session: session, name: name, tool: tool, turn: turn, index: int32(i)}
					r.mu.Unlock()
					names = append(names, name)
					if r.o.cancelEvery > 0 && rng.IntN(r.o.cancelEvery) == 0 {
						go r.cancel(ctx, name, time.Duration(rng.IntN(2000))*time.Millisecond)
					}
				}
				if err := r.waitFor(ctx, r.o.timeout-time.Since(r.start), func() bool { return r.allCommitted(names) }); err != nil {
					errs <- fmt.Errorf("session %s turn %d never committed: %w", session, turn, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return errors.Join(slices.Collect(func(yield func(error) bool) {
		for e := range errs {
			if !yield(e) {
				return
			}
		}
	})...)
}

func (r *chaos) allCommitted(names []string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range names {
		if c := r.calls[n]; c == nil || c.committedAt.IsZero() {
			return false
		}
	}
	return true
}

func (r *chaos) cancel(ctx context.Context, name string, after time.Duration) {
	time.Sleep(after)
	_ = r.retry(ctx, func() error {
		tc := &toolgatev1alpha1.ToolCall{ObjectMeta: metav1.ObjectMeta{Namespace: r.ns, Name: name}}
		return r.c.Patch(ctx, tc, client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"cancelRequested":true}}`)))
	})
	r.mu.Lock()
	r.calls[name].cancelled = true
	r.mu.Unlock()
}

// retry repeats f through API server and etcd restarts.
func (r *chaos) retry(ctx context.Context, f func() error) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func (r *chaos) waitFor(ctx context.Context, limit time.Duration, ok func() bool) error {
	deadline := time.Now().Add(limit)
	for !ok() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %s", limit)
		}
		time.Sleep(200 * time.Millisecond)
	}
	return nil
}

// watch records when each call committed, as it happens (a watch, listed
// again after every interruption: the API server restarts too).
func (r *chaos) watch(done <-chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-done; cancel() }()
	for ctx.Err() == nil {
		list := &toolgatev1alpha1.ToolCallList{}
		if err := r.c.List(ctx, list, client.InNamespace(r.ns)); err != nil {
			time.Sleep(300 * time.Millisecond)
			continue
		}
		for i := range list.Items {
			r.see(&list.Items[i])
		}
		w, err := r.c.Watch(ctx, &toolgatev1alpha1.ToolCallList{}, client.InNamespace(r.ns), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.ResourceVersion}})
		if err != nil {
			time.Sleep(300 * time.Millisecond)
			continue
		}
		for ev := range w.ResultChan() {
			if tc, ok := ev.Object.(*toolgatev1alpha1.ToolCall); ok {
				r.see(tc)
			}
		}
		w.Stop()
	}
}

func (r *chaos) see(tc *toolgatev1alpha1.ToolCall) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.calls[tc.Name]
	if c == nil {
		return // created, not yet recorded: seen again at its next change or list
	}
	c.obj = tc.DeepCopy()
	if tc.Status.Phase == toolgatev1alpha1.PhaseCommitted && c.committedAt.IsZero() {
		c.committedAt = time.Now()
	}
}

// approve is the test approver: every pending question is approved by
// demo-approver (never the requester).
func (r *chaos) approve(done <-chan struct{}) {
	cfg := rest.CopyConfig(r.cfg)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "demo-approver"}
	approver, err := client.New(cfg, client.Options{Scheme: r.c.Scheme()})
	if err != nil {
		return
	}
	// demo-approver needs the approver role here.
	_, _ = r.kubectl("-n", r.ns, "create", "rolebinding", "approver", "--clusterrole=toolgate-approver", "--user=demo-approver")
	ctx := context.Background()
	for {
		select {
		case <-done:
			return
		case <-time.After(500 * time.Millisecond):
		}
		list := &toolgatev1alpha1.ApprovalRequestList{}
		if r.c.List(ctx, list, client.InNamespace(r.ns)) != nil {
			continue
		}
		for i := range list.Items {
			ar := &list.Items[i]
			if ar.Spec.Decision != nil || ar.Status.Phase != toolgatev1alpha1.ApprovalPending {
				continue
			}
			_ = approver.Patch(ctx, ar, client.RawPatch("application/merge-patch+json",
				[]byte(`{"spec":{"decision":{"action":"Approve","decidedBy":"demo-approver","message":"chaos approver"}}}`)))
		}
	}
}

// inject injects faults at random times until done: manager kills first
// among them, and every other kind at least once.
func (r *chaos) inject(done <-chan struct{}) {
	var plan []string
	for range r.o.kills {
		plan = append(plan, faultManager)
	}
	for _, f := range r.o.faults {
		if f != faultManager {
			plan = append(plan, f)
		}
	}
	r.rng.Shuffle(len(plan), func(i, j int) { plan[i], plan[j] = plan[j], plan[i] })
	for i := 0; ; i++ {
		wait := time.Duration(float64(r.o.interval) * (0.5 + r.rng.Float64()))
		select {
		case <-done:
			return
		case <-time.After(wait):
		}
		kind := faultManager
		if i < len(plan) {
			kind = plan[i]
		} else if !slices.Contains(r.o.faults, faultManager) {
			continue
		} else if i >= len(plan)+r.o.kills {
			continue // the plan is done: the load finishes in peace
		}
		note, err := r.fault(kind)
		if errors.Is(err, errNoTarget) {
			i-- // not injected: tried again at the next tick
			continue
		}
		if err != nil {
			note = "failed: " + err.Error()
		}
		r.mu.Lock()
		r.faults = append(r.faults, fault{kind: kind, at: time.Now(), note: note})
		r.mu.Unlock()
		fmt.Printf("chaos: %6.1fs %-24s %s\n", time.Since(r.start).Seconds(), kind, note)
	}
}

func (r *chaos) fault(kind string) (string, error) {
	switch kind {
	case faultManager:
		return r.killLeader()
	case faultPod:
		pods := &corev1.PodList{}
		if err := r.c.List(context.Background(), pods, client.InNamespace(r.ns), client.MatchingLabels{"toolgate.dev/sandbox": "true"}); err != nil {
			return "", err
		}
		var running []corev1.Pod
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil && p.Labels["toolgate.dev/warm"] != "true" {
				running = append(running, p)
			}
		}
		if len(running) == 0 {
			return "", errNoTarget
		}
		p := running[r.rng.IntN(len(running))]
		return fmt.Sprintf("deleted %s, the pod of call %s", p.Name, p.Labels["toolgate.dev/call"]), r.c.Delete(context.Background(), &p, client.GracePeriodSeconds(0))
	default:
		name := map[string]string{faultApiserver: "kube-apiserver", faultEtcd: "etcd", faultKubelet: "kubelet", faultContainerd: "containerd"}[kind]
		return r.restart(name)
	}
}

// killLeader SIGKILLs the manager process that leads (any manager
// process when none does): the container's process, not a pod deletion,
// so the lease is not released. Replicas share the host's network, and so
// its hostname, which the lease's holder names: the leader is the process
// whose current container log says it acquired the lease.
func (r *chaos) killLeader() (string, error) {
	procs := managerProcs()
	if len(procs) == 0 || len(procs) < r.o.replicas {
		// Every kill tests a failover: wait until the standby runs again.
		return "", errNoTarget
	}
	for _, p := range procs {
		if p.leader {
			return fmt.Sprintf("SIGKILL pid %d, the leader, of %d processes", p.pid, len(procs)), syscall.Kill(p.pid, syscall.SIGKILL)
		}
	}
	return "", errNoTarget // a failover is under way: wait for its leader
}

// errNoTarget: the fault has nothing to act on now; tried again later.
var errNoTarget = errors.New("nothing to act on")

type managerProc struct {
	pid    int
	leader bool
}

// managerProcs are the manager containers' processes.
func managerProcs() []managerProc {
	entries, _ := os.ReadDir("/proc")
	var out []managerProc
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil || !strings.HasPrefix(string(cmdline), "/manager\x00") {
			continue
		}
		out = append(out, managerProc{pid: pid, leader: leads(pid)})
	}
	return out
}

// leads tells whether the process's container log (the newest log of its
// pod's manager container) says it acquired the leader lease.
func leads(pid int) bool {
	cgroup, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return false
	}
	_, rest, ok := strings.Cut(string(cgroup), "/pod")
	if !ok {
		return false
	}
	uid, _, _ := strings.Cut(rest, "/")
	logs, _ := filepath.Glob(filepath.Join("/var/log/pods", "*_"+uid, "manager", "*.log"))
	newest, at := "", time.Time{}
	for _, l := range logs {
		if fi, err := os.Stat(l); err == nil && fi.ModTime().After(at) {
			newest, at = l, fi.ModTime()
		}
	}
	data, err := os.ReadFile(newest)
	return err == nil && strings.Contains(strings.ToLower(string(data)), "successfully acquired lease")
}

// restart SIGKILLs one component of the local cluster and brings it back
// with hack/cluster-up.sh (which starts what is not running).
func (r *chaos) restart(name string) (string, error) {
	pidFile := filepath.Join(r.o.clusterDir, "pids", name)
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return "", err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return "", err
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return "", err
	}
	for syscall.Kill(pid, 0) == nil {
		time.Sleep(50 * time.Millisecond)
	}
	start := time.Now()
	cmd := exec.Command(filepath.Join(r.o.root, "hack", "cluster-up.sh"))
	cmd.Env = append(os.Environ(), "TOOLGATE_SKIP_IMAGES=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("cluster-up: %v: %s", err, out)
	}
	return fmt.Sprintf("SIGKILL pid %d, back in %.1fs", pid, time.Since(start).Seconds()), nil
}

// report checks every promise and prints the figures; it returns how many
// promises were broken.
func (r *chaos) report(ctx context.Context) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	broken := 0
	var calls []*call
	for _, c := range r.calls {
		calls = append(calls, c)
	}
	slices.SortFunc(calls, func(a, b *call) int { return strings.Compare(a.name, b.name) })
	results, lost, strayTimeouts := 0, 0, 0
	codes := map[string]int{}
	for _, c := range calls {
		if c.obj == nil || c.obj.Status.Result == nil {
			lost++
			continue
		}
		results++
		res := c.obj.Status.Result
		codes[string(res.Outcome)+"/"+orNone(res.ErrorCode)]++
		if res.Outcome == toolgatev1alpha1.OutcomeTimedOut && c.tool != "overtime" {
			strayTimeouts++ // only overtime outlives its timeout: a fault must not look like one
		}
	}
	// Commit order and duplicates, per session.
	duplicates, misordered := 0, 0
	bySession := map[string][]*call{}
	for _, c := range calls {
		if c.obj != nil && c.obj.Status.Schedule.CommitSequence != nil {
			bySession[c.session] = append(bySession[c.session], c)
		}
	}
	for s, cs := range bySession {
		slices.SortFunc(cs, func(a, b *call) int {
			return int(*a.obj.Status.Schedule.CommitSequence - *b.obj.Status.Schedule.CommitSequence)
		})
		for i, c := range cs {
			seq := *c.obj.Status.Schedule.CommitSequence
			if seq != int64(i) {
				duplicates++
				fmt.Printf("chaos: session %s: %s has sequence %d at position %d\n", s, c.name, seq, i)
			}
			if i > 0 {
				p := cs[i-1]
				if p.turn > c.turn || (p.turn == c.turn && p.index >= c.index) {
					misordered++
					fmt.Printf("chaos: session %s: %s committed after %s\n", s, c.name, p.name)
				}
			}
		}
	}
	// Body runs, counted from the markers in the workspaces.
	doubleRuns, idempotentReruns, runs := 0, 0, 0
	for _, c := range calls {
		n := countLines(filepath.Join(r.o.clusterDir, "pv", r.ns, c.session, "runs", c.name))
		runs += n
		switch {
		case n > 1 && nonIdempotent[c.tool]:
			doubleRuns++
			fmt.Printf("chaos: %s (%s, not idempotent) ran %d times\n", c.name, c.tool, n)
		case n > 1:
			idempotentReruns++
		}
	}
	// Pods left once every call has its result.
	// Warm pods (kept ready for the sessions' next calls, holding no call)
	// are not left behind: they go when their session is idle or deleted.
	leaked, warm := -1, 0
	_ = r.waitFor(ctx, 60*time.Second, func() bool {
		pods := &corev1.PodList{}
		if r.c.List(ctx, pods, client.InNamespace(r.ns), client.MatchingLabels{"toolgate.dev/sandbox": "true"}) != nil {
			return false
		}
		leaked, warm = 0, 0
		for _, p := range pods.Items {
			if p.Labels["toolgate.dev/warm"] == "true" {
				warm++
			} else {
				leaked++
			}
		}
		return leaked == 0
	})

	fmt.Printf("\nchaos: %d calls in %d sessions, %.0fs, %d faults, seed %d\n", len(calls), r.o.sessions, time.Since(r.start).Seconds(), len(r.faults), r.o.seed)
	row := func(what string, n int, must bool) {
		mark := ""
		if must && n != 0 {
			mark = "  <- BROKEN"
			broken++
		}
		fmt.Printf("  %-52s %6d%s\n", what, n, mark)
	}
	fmt.Printf("  %-52s %6d\n", "calls submitted", len(calls))
	fmt.Printf("  %-52s %6d\n", "results", results)
	row("calls without a result (lost)", lost, true)
	row("duplicate or missing commit positions", duplicates, true)
	row("non-idempotent bodies run more than once", doubleRuns, true)
	row("commits out of model order", misordered, true)
	row("tool pods left after every call settled", leaked, true)
	row("timed out, of a tool that ends within its timeout", strayTimeouts, true)
	fmt.Printf("  %-52s %6d\n", "warm pods ready for the next calls", warm)
	fmt.Printf("  %-52s %6d\n", "body runs (markers)", runs)
	fmt.Printf("  %-52s %6d\n", "idempotent bodies run again (allowed)", idempotentReruns)
	fmt.Println("  outcomes:")
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range codes {
			if !yield(k) {
				return
			}
		}
	})
	for _, k := range keys {
		fmt.Printf("    %-50s %6d\n", k, codes[k])
	}
	fmt.Println("  calls ended interrupted or sandbox_lost (explained):")
	for _, c := range calls {
		if c.obj == nil || c.obj.Status.Result == nil {
			continue
		}
		if code := c.obj.Status.Result.ErrorCode; code == "interrupted" || code == "sandbox_lost" {
			settled := c.obj.Status.Result.SettledAt.Time
			cause := "no fault before it"
			for _, f := range r.faults {
				switch {
				case f.kind == faultPod && strings.HasSuffix(f.note, "the pod of call "+c.name):
					cause = fmt.Sprintf("its pod was deleted by the fault (%s)", f.note)
				case !f.at.After(settled) && !strings.HasPrefix(cause, "its pod"):
					cause = fmt.Sprintf("last fault before it: %s (%s), %.0fs earlier", f.kind, f.note, settled.Sub(f.at).Seconds())
				}
			}
			fmt.Printf("    %-22s %-11s %s: %s; %s\n", c.name, c.tool, code, c.obj.Status.Result.Message, cause)
		}
	}
	fmt.Println("  faults (kind, count, time from the fault to the next commit: median / max):")
	byKind := map[string][]time.Duration{}
	for _, f := range r.faults {
		next := time.Duration(-1)
		for _, c := range calls {
			if !c.committedAt.IsZero() && c.committedAt.After(f.at) && (next < 0 || c.committedAt.Sub(f.at) < next) {
				next = c.committedAt.Sub(f.at)
			}
		}
		byKind[f.kind] = append(byKind[f.kind], next)
	}
	for _, kind := range slices.Sorted(func(yield func(string) bool) {
		for k := range byKind {
			if !yield(k) {
				return
			}
		}
	}) {
		ds := byKind[kind]
		var known []time.Duration
		for _, d := range ds {
			if d >= 0 {
				known = append(known, d)
			}
		}
		slices.Sort(known)
		med, mx := "-", "-"
		if len(known) > 0 {
			med, mx = fmt.Sprintf("%.1fs", known[len(known)/2].Seconds()), fmt.Sprintf("%.1fs", known[len(known)-1].Seconds())
		}
		fmt.Printf("    %-28s %4d   %8s / %8s\n", kind, len(ds), med, mx)
	}
	for _, p := range managerProcs() {
		if status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.pid)); err == nil {
			for _, l := range strings.Split(string(status), "\n") {
				if strings.HasPrefix(l, "VmRSS:") {
					fmt.Printf("  manager pid %d (leader %v) RSS %s\n", p.pid, p.leader, strings.TrimSpace(strings.TrimPrefix(l, "VmRSS:")))
				}
			}
		}
	}
	return broken
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func countLines(path string) int {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer func() { _ = f.Close() }()
	n := 0
	for s := bufio.NewScanner(f); s.Scan(); {
		n++
	}
	return n
}

func mustQuantity(s string) resource.Quantity { return resource.MustParse(s) }
