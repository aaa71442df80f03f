# Settings of the local single-node cluster; sourced by the cluster scripts.
# shellcheck source=hack/versions.sh
source "$(dirname "${BASH_SOURCE[0]}")/versions.sh"
CLUSTER_DIR=${TOOLGATE_CLUSTER_DIR:-/var/tmp/toolgate-cluster}
K8S_BIN=$(k8s_bin_dir)
API_PORT=${TOOLGATE_API_PORT:-6443}
ETCD_PORT=${TOOLGATE_ETCD_PORT:-23790}
KUBECONFIG_ADMIN=$CLUSTER_DIR/kubeconfig/admin.kubeconfig
CONTAINERD_SOCK=$CLUSTER_DIR/containerd/containerd.sock
# proc_start PID: when process PID started (clock ticks after boot), if it
# is alive (a zombie is not). Pids are reused (pid_max is often 32768): a
# pid file names the process it recorded only while this still matches.
proc_start() {
  local s
  s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  s=${s##*) } # after the command's name, which may hold spaces
  # shellcheck disable=SC2086
  set -- $s
  [ "$1" != Z ] || return 1 # dead, not yet reaped
  echo "${20}"
}
# pid_alive FILE: prints the pid FILE records (the pid and its start time,
# written by hack/cluster-lib.sh's start) if that very process still runs;
# fails for a dead process or a pid another process reuses.
pid_alive() {
  local pid="" since=""
  [ -f "$1" ] && read -r pid since <"$1"
  [ -n "$pid" ] && [ -n "$since" ] && [ "$(proc_start "$pid")" = "$since" ] && echo "$pid"
}
# guard_rule RANGE: the mangle FORWARD rule of hack/netpol-guard.sh, which
# drops a new connection of a pod of RANGE not in the set GUARD_SET.
GUARD_SET=toolgate-synced
guard_rule() { echo "-s $1 -m conntrack --ctstate NEW -m set ! --match-set $GUARD_SET src -j DROP"; }
kubectl() { "$K8S_BIN/kubectl" --kubeconfig "$KUBECONFIG_ADMIN" "$@"; }
# containerd, its shims, ctr, runsc and kube-router (hack/build-node.sh);
# cluster-up links the directory as $CLUSTER_DIR/bin for the Go tools.
NODE_BIN=$(node_bin_dir)
export PATH="$NODE_BIN:$PATH"
ctr_() { "$NODE_BIN/ctr" --address "$CONTAINERD_SOCK" -n k8s.io "$@"; }
# Nodes beyond the first (hack/node-up.sh N): each in a network namespace
# of its own, named by its address.
TOOLGATE_NODES=${TOOLGATE_NODES:-1}
node_netns() { echo "toolgate-node$1"; }
node_name() { echo "10.245.$1.2"; }
node_dir() { echo "$CLUSTER_DIR/nodes/node$1"; }
node_pod_range() { echo "10.244.$(($1 - 1)).0/24"; }
# node_cni_conf RANGE GATEWAY [IPAM_DIR]: a node's pod network, a bridge
# with the node's range; the other nodes' pods are reached through the
# gateway (the bridge's address on the node), which the host routes. Each
# node keeps its own address leases.
node_cni_conf() {
  local data=""
  [ -z "${3:-}" ] || data=" \"dataDir\": \"$3\","
  cat <<CNI
{
  "cniVersion": "1.0.0",
  "name": "toolgate",
  "plugins": [
    {"type": "bridge", "bridge": "tgbr0", "isGateway": false, "ipMasq": false,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "$1", "rangeEnd": "${1%.0/24}.250"}]],$data
              "routes": [{"dst": "10.244.0.0/16", "gw": "$2"}]}},
    {"type": "loopback"}
  ]
}
CNI
}
