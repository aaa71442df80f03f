#!/usr/bin/env bash
# Takes node N (2, 3, ...; hack/node-up.sh) down the way a machine is lost,
# not drained: its link to the others is cut first (it tells the cluster
# nothing more), then its kubelet, firewall, containerd and every process
# of its containers are SIGKILLed. Its state stays: node-up.sh N brings it
# back, as a machine that rebooted. The e2e suite loses a node with it;
# cluster-down.sh uses it before it removes a node.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/hack/cluster-env.sh"
n=${1:?usage: node-down.sh N (2, 3, ...)}
N=$(node_dir "$n")
[ -d "$N" ] || exit 0
ip link set "tgn$n" down 2>/dev/null
kill_pid() { # name
  local f="$N/pids/$1"
  local pid
  # The process and what it started (each runs in a session of its own).
  if pid=$(pid_alive "$f"); then kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null; fi
  rm -f "$f"
}
kill_pid kubelet
kill_pid kube-router
kill_pid netpol-guard
kill_pid containerd
sock=$N/containerd/containerd.sock
pkill -KILL -f "containerd-shim-run[a-z]*-v[12] .*-address $sock" 2>/dev/null
pkill -KILL -f "runsc[a-z-]* .*--root[= ]$N/" 2>/dev/null
# Every process of its pods: they live in its kubelet's cgroups.
for _ in 1 2 3; do
  procs=$(cat /sys/fs/cgroup/*/toolgate-node"$n"/kubepods/cgroup.procs /sys/fs/cgroup/*/toolgate-node"$n"/kubepods/*/cgroup.procs \
    /sys/fs/cgroup/*/toolgate-node"$n"/kubepods/*/*/cgroup.procs /sys/fs/cgroup/*/toolgate-node"$n"/kubepods/*/*/*/cgroup.procs 2>/dev/null | sort -u)
  [ -n "$procs" ] || break
  # shellcheck disable=SC2086
  kill -KILL $procs 2>/dev/null
  sleep 0.2
done
echo "node-down $n: lost (hack/node-up.sh $n brings it back)" >&2
