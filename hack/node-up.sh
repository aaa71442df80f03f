#!/usr/bin/env bash
# Adds node N (2, 3, ...) to the local cluster cluster-up.sh started: a
# second kubelet with its own containerd, pod bridge, pod range and
# NetworkPolicy firewall, all in a network namespace of its own, so that
# it is a node as another machine would be (docs/local-cluster.md, "More
# than one node"). Idempotent: a running node is left as is.
#
# Addresses of node N: the node 10.245.N.2 (its name too: the API server
# reaches kubelets by the name they report, and no DNS resolves another),
# the host's end of its link 10.245.N.1, its pods 10.244.(N-1).0/24 behind
# its bridge's 10.244.(N-1).254. The host routes between the nodes' pod
# ranges (each pod reaches the others through its node's bridge address).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/hack/cluster-env.sh"
source "$root/hack/cluster-lib.sh"
n=${1:?usage: node-up.sh N (2, 3, ...)}
[ "$n" -ge 2 ] && [ "$n" -le 9 ] || { echo "node-up: N is 2 to 9" >&2; exit 2; }
D=$CLUSTER_DIR
[ -f "$D/pki/ca.crt" ] || { echo "node-up: no cluster at $D (hack/cluster-up.sh first)" >&2; exit 1; }
ns=$(node_netns "$n")
name=$(node_name "$n")
N=$(node_dir "$n")
STATE=$N
link=tgn$n
host_ip=10.245.$n.1
pods=$(node_pod_range "$n")
gw=10.244.$((n - 1)).254
log() { echo "node-up $n: $*" >&2; }
in_ns() { nsenter --net="/run/netns/$ns" "$@"; }

all_running=1
for c in containerd kubelet kube-router netpol-guard; do running "$c" || all_running=0; done
if [ "$all_running" = 1 ] && kubectl get node "$name" >/dev/null 2>&1; then
  log "already running"
  exit 0
fi
mkdir -p "$N"/{pids,logs,kubelet,containerd/runsc,cni/net.d,pod-logs}

# --- identity ----------------------------------------------------------------
pki "kubelet-node$n" "/O=system:nodes/CN=system:node:$name"
pki "kubelet-serving-node$n" "/CN=$name" "IP:$name"
# The node's components reach the API server at the host's bridge address,
# as the first node's pods do (cluster-up opens it on port 6443 only).
kubeconfig "kubelet-node$n" "kubelet-node$n" "https://10.244.0.254:$API_PORT"
kubeconfig "kube-router-node$n" kube-router "https://10.244.0.254:$API_PORT"

# --- network -----------------------------------------------------------------
# The node's namespace: a link to the host, a bridge for its pods, a
# default route through the host. The host forwards between the nodes' pod
# ranges and the nodes, nothing else (the mangle rule below).
[ -e "/run/netns/$ns" ] || ip netns add "$ns"
if ! ip link show "$link" >/dev/null 2>&1; then
  ip link add "$link" type veth peer name eth0 netns "$ns"
fi
ip addr replace "$host_ip/24" dev "$link"
ip link set "$link" up
in_ns ip link set lo up
in_ns ip addr replace "$name/24" dev eth0
in_ns ip link set eth0 up
in_ns ip route replace default via "$host_ip"
in_ns ip link show tgbr0 >/dev/null 2>&1 || in_ns ip link add tgbr0 type bridge
in_ns ip addr replace "$gw/24" dev tgbr0
in_ns ip link set tgbr0 up
in_ns sysctl -qw net.ipv4.ip_forward=1
in_ns sh -c 'echo 1 >/proc/sys/net/bridge/bridge-nf-call-iptables'
# The host's own connections to the node's pods leave from the first
# bridge's address.
ip route replace "$pods" via "$name" src 10.244.0.254
# A pod range no node serves (a node down) is unreachable: never sent on
# by the host's default route.
ip route replace unreachable 10.244.0.0/16
# The host forwards (cluster-down puts back what it found).
[ -f "$D/ip_forward" ] || sysctl -n net.ipv4.ip_forward >"$D/ip_forward"
sysctl -qw net.ipv4.ip_forward=1
sysctl -qw "net.ipv4.conf.$link.route_localnet=1"
ipt() { # table rule...: add the rule once
  local t=$1
  shift
  "${IPT[@]}" -t "$t" -C "$@" 2>/dev/null || "${IPT[@]}" -t "$t" -A "$@"
}
IPT=(iptables)
# The API server (on loopback) at the first bridge's address, for the
# node's kubelet and firewall and its pods (as cluster-up opens it to the
# first node's pods).
ipt nat PREROUTING -i "$link" -d 10.244.0.254 -p tcp --dport "$API_PORT" -j DNAT --to-destination "127.0.0.1:$API_PORT"
# Nothing from a node's namespace is forwarded beyond the pod ranges
# (what is for the host itself, the API server and the replies to it,
# passes).
ipt mangle PREROUTING -i "$link" ! -d 10.244.0.0/16 -m addrtype ! --dst-type LOCAL -j DROP
# In the node's namespace, the first node's rule: pods open no connection
# to the node itself (a pod kube-router has not synced yet opens none at
# all: hack/netpol-guard.sh, started beside the node's kube-router).
IPT=(nsenter --net="/run/netns/$ns" iptables)
ipt filter INPUT -i tgbr0 -m conntrack --ctstate NEW -j DROP

# --- containerd --------------------------------------------------------------
sock=$N/containerd/containerd.sock
node_cni_conf "$pods" "$gw" "$N/cni/ipam" >"$N/cni/net.d/10-toolgate.conflist"
cat >"$N/containerd/config.toml" <<TOML
version = 3
root = "$N/containerd/root"
state = "$N/containerd/state"
[grpc]
  address = "$sock"
[plugins.'io.containerd.nri.v1.nri']
  disable = true
[plugins.'io.containerd.cri.v1.images'.pinned_images]
  sandbox = "toolgate.dev/pause:dev"
[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
  # Pods' network namespaces are mounted under the state directory,
  # which cluster-down unmounts, not in the host's /var/run/netns.
  netns_mounts_under_state_dir = true
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "$N/cni/net.d"
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
      Root = "$N/containerd/runc"
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runsc]
    runtime_type = "io.containerd.runsc.v1"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runsc.options]
      TypeUrl = "io.containerd.runsc.v1.options"
      ConfigPath = "$N/containerd/runsc.toml"
TOML
cat >"$N/containerd/runsc.toml" <<TOML
binary_name = "$NODE_BIN/runsc"
root = "$N/containerd/runsc"
[runsc_config]
  platform = "systrap"
TOML
start containerd nsenter --net="/run/netns/$ns" "$NODE_BIN/containerd" --config "$N/containerd/config.toml"
wait_for containerd "$NODE_BIN/ctr" --address "$sock" version
for f in "$root"/_output/images/*.tar; do
  [ -e "$f" ] || { log "no images in _output/images (hack/images.sh)"; exit 1; }
  "$NODE_BIN/ctr" --address "$sock" -n k8s.io images import "$f" >/dev/null
done

# --- kubelet -----------------------------------------------------------------
# Its own cgroup parent, pod log directory and root: two kubelets on one
# machine must not take each other's pods for orphans.
cgroup=toolgate-node$n
for c in /sys/fs/cgroup/*/; do
  case "$c" in */unified/) continue ;; esac
  mkdir -p "$c$cgroup"
  if [ -f "${c}cpuset.cpus" ]; then
    cat "${c}cpuset.cpus" >"$c$cgroup/cpuset.cpus"
    cat "${c}cpuset.mems" >"$c$cgroup/cpuset.mems"
  fi
done
eviction_hard=${TOOLGATE_KUBELET_EVICTION_HARD:-"{}"}
cat >"$N/kubelet/config.yaml" <<KL
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $name
healthzBindAddress: 127.0.0.1
readOnlyPort: 0
cgroupDriver: cgroupfs
cgroupRoot: /$cgroup
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://$sock
podLogsDir: $N/pod-logs
enforceNodeAllocatable: []
evictionHard: $eviction_hard
evictionPressureTransitionPeriod: 5s
resolvConf: ""
tlsCertFile: $D/pki/kubelet-serving-node$n.crt
tlsPrivateKeyFile: $D/pki/kubelet-serving-node$n.key
authentication:
  x509: {clientCAFile: $D/pki/ca.crt}
  webhook: {enabled: true}
  anonymous: {enabled: false}
authorization: {mode: Webhook}
clusterDomain: cluster.local
staticPodPath: ""
featureGates: {KubeletCrashLoopBackOffMax: true, EventedPLEG: true}
crashLoopBackOff: {maxContainerRestartPeriod: 10s}
KL
start kubelet nsenter --net="/run/netns/$ns" "$K8S_BIN/kubelet" --config "$N/kubelet/config.yaml" \
  --kubeconfig "$D/kubeconfig/kubelet-node$n.kubeconfig" --hostname-override "$name" --node-ip "$name" \
  --root-dir "$N/kubelet/root" --cert-dir "$N/kubelet/pki"
wait_for "the node" kubectl wait --for=condition=Ready "node/$name" --timeout=2s

# --- NetworkPolicy -----------------------------------------------------------
start kube-router nsenter --net="/run/netns/$ns" "$NODE_BIN/kube-router" --kubeconfig "$D/kubeconfig/kube-router-node$n.kubeconfig" --hostname-override "$name" \
  --run-firewall=true --run-router=false --run-service-proxy=false --enable-cni=false --enable-ipv6=false \
  --service-cluster-ip-range 10.96.0.0/24 --health-port 0 --metrics-port 0
wait_for kube-router in_ns iptables -n -L KUBE-ROUTER-FORWARD
start netpol-guard nsenter --net="/run/netns/$ns" "$root/hack/netpol-guard.sh" "$pods"
# shellcheck disable=SC2046 # the rule's words
wait_for "the NetworkPolicy guard" in_ns iptables -t mangle -C FORWARD $(guard_rule "$pods")
log "ready: node $name"
