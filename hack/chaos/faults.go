package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
	faultEvict      = "tool-pod-evicted"
)

// lasting are the faults that last o.outage: their recovery is timed from
// their end.
var lasting = []string{faultThrottled, faultFailing, faultPressure, faultNodeLost}

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
		began := time.Now()
		note, err := r.fault(kind)
		if errors.Is(err, errNoTarget) {
			i-- // not injected: tried again at the next tick
			continue
		}
		if err != nil {
			note = "failed: " + err.Error()
		}
		r.mu.Lock()
		r.faults = append(r.faults, fault{kind: kind, at: began, end: time.Now(), note: note})
		r.mu.Unlock()
		fmt.Printf("chaos: %6.1fs %-24s %s (%s–%s UTC)\n", time.Since(r.start).Seconds(), kind, note, began.UTC().Format("15:04:05"), time.Now().UTC().Format("15:04:05"))
	}
}

func (r *chaos) fault(kind string) (string, error) {
	switch kind {
	case faultManager:
		return r.killLeader()
	case faultPod, faultEvict:
		pods := &corev1.PodList{}
		if err := r.c.List(context.Background(), pods, client.InNamespace(r.ns), client.MatchingLabels{toolgatev1alpha1.LabelSandbox: "true"}); err != nil {
			return "", err
		}
		var running []corev1.Pod
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil && !toolgatev1alpha1.WarmWaiting(&p) {
				running = append(running, p)
			}
		}
		if len(running) == 0 {
			return "", errNoTarget
		}
		p := running[r.rng.IntN(len(running))]
		name, _, _ := toolgatev1alpha1.PodCall(&p)
		// The call may fail for it (sandbox_lost, sandbox_evicted,
		// interrupted): the workload asked for that.
		r.mu.Lock()
		if c := r.calls[name]; c != nil {
			c.podDeleted = true
		}
		r.mu.Unlock()
		if kind == faultEvict {
			// Through the eviction API, as a drain does: the API server
			// marks the pod (DisruptionTarget) and deletes it gracefully.
			return fmt.Sprintf("evicted %s, the pod of call %s", p.Name, name), r.c.SubResource("eviction").Create(context.Background(), &p, &policyv1.Eviction{})
		}
		return fmt.Sprintf("deleted %s, the pod of call %s", p.Name, name), r.c.Delete(context.Background(), &p, client.GracePeriodSeconds(0))
	case faultThrottled:
		return r.throttle(context.Background())
	case faultFailing:
		return r.fail(context.Background())
	case faultPressure:
		return r.pressure(context.Background())
	case faultNodeLost:
		return r.loseNode(context.Background())
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
			err := syscall.Kill(p.pid, syscall.SIGKILL)
			// Copied after the kill, so it holds the last line written;
			// the kubelet keeps a dead container's log until it restarts
			// it twice.
			r.keepLog(p, "killed")
			return fmt.Sprintf("SIGKILL pid %d, the leader, of %d processes", p.pid, len(procs)), err
		}
	}
	return "", errNoTarget // a failover is under way: wait for its leader
}

// errNoTarget: the fault has nothing to act on now; tried again later.
var errNoTarget = errors.New("nothing to act on")

type managerProc struct {
	pid    int
	leader bool
	log    string // its container's newest log file
}

// keepLog copies a manager's container log into the run's log directory,
// named by when and why; a log that cannot be copied is said, not fatal.
func (r *chaos) keepLog(p managerProc, why string) {
	data, err := os.ReadFile(p.log)
	if err == nil {
		name := fmt.Sprintf("%s-%s-pid%d.log", time.Now().UTC().Format("150405.000"), why, p.pid)
		err = os.WriteFile(filepath.Join(r.o.logs, name), data, 0o644)
	}
	if err != nil {
		fmt.Printf("chaos: the log of manager pid %d not kept: %v\n", p.pid, err)
	}
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
		log := containerLog(pid)
		out = append(out, managerProc{pid: pid, leader: leads(log), log: log})
	}
	return out
}

// containerLog is the newest log of the process's pod's manager
// container ("" when the process's pod cannot be told).
func containerLog(pid int) string {
	cgroup, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return ""
	}
	_, rest, ok := strings.Cut(string(cgroup), "/pod")
	if !ok {
		return ""
	}
	uid, _, _ := strings.Cut(rest, "/")
	logs, _ := filepath.Glob(filepath.Join("/var/log/pods", "*_"+uid, "manager", "*.log"))
	newest, at := "", time.Time{}
	for _, l := range logs {
		if fi, err := os.Stat(l); err == nil && fi.ModTime().After(at) {
			newest, at = l, fi.ModTime()
		}
	}
	return newest
}

// leads tells whether a manager's container log says it acquired the
// leader lease.
func leads(log string) bool {
	data, err := os.ReadFile(log)
	return err == nil && strings.Contains(strings.ToLower(string(data)), "successfully acquired lease")
}

// restart SIGKILLs one component of the local cluster and brings it back
// with hack/cluster-up.sh (which starts what is not running), env added to
// the script's environment (TOOLGATE_KUBELET_EVICTION_HARD).
func (r *chaos) restart(name string, env ...string) (string, error) {
	pid, err := pidFile(r.o.clusterDir, name)
	if err != nil {
		return "", err
	}
	// Already dead (a lasting fault killed it) is fine: it is started.
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return "", err
	}
	for syscall.Kill(pid, 0) == nil {
		time.Sleep(50 * time.Millisecond)
	}
	start := time.Now()
	cmd := exec.Command(filepath.Join(r.o.root, "hack", "cluster-up.sh"))
	cmd.Env = append(append(os.Environ(), "TOOLGATE_SKIP_IMAGES=1"), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("cluster-up: %v: %s", err, out)
	}
	return fmt.Sprintf("SIGKILL pid %d, back in %.1fs", pid, time.Since(start).Seconds()), nil
}
