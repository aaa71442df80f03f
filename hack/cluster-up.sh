#!/usr/bin/env bash
# Brings up a real single-node Kubernetes cluster on loopback: etcd,
# kube-apiserver, kube-controller-manager, kube-scheduler, containerd (runc
# and gVisor, bridge CNI, kube-router's NetworkPolicy firewall) and a
# kubelet, all under one state directory. Idempotent: a running cluster is
# left as is. See docs/local-cluster.md.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/hack/cluster-env.sh"
source "$root/hack/cluster-lib.sh"
D=$CLUSTER_DIR
STATE=$D
log() { echo "cluster-up: $*" >&2; }

all_running=1
for n in etcd kube-apiserver kube-controller-manager kube-scheduler containerd kubelet kube-router netpol-guard; do running "$n" || all_running=0; done
# The nodes beyond the first: TOOLGATE_NODES=2 (hack/node-up.sh).
more_nodes() {
  for i in $(seq 2 "$TOOLGATE_NODES"); do "$root/hack/node-up.sh" "$i"; done
}
if [ "$all_running" = 1 ] && kubectl get node localhost >/dev/null 2>&1; then
  more_nodes
  log "already running ($D)"
  exit 0
fi

# Prerequisites: Debian packages and the source-built binaries.
need=()
for c in runc openssl iptables ipset conntrack curl ip nft; do command -v "$c" >/dev/null || need+=("$c"); done
[ -x /usr/lib/cni/bridge ] || need+=(containernetworking-plugins)
[ -x /bin/busybox ] || need+=(busybox-static)
if [ ${#need[@]} -gt 0 ]; then
  pkgs=()
  for c in "${need[@]}"; do
    case "$c" in ip) pkgs+=(iproute2) ;; nft) pkgs+=(nftables) ;; *) pkgs+=("$c") ;; esac
  done
  log "installing ${pkgs[*]}"
  apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${pkgs[@]}" >/dev/null
fi
"$root/hack/build-k8s.sh" etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl >/dev/null
# containerd finds its shims on PATH (cluster-env.sh puts NODE_BIN first).
"$root/hack/build-node.sh" >/dev/null

mkdir -p "$D"/{pki,kubeconfig,pids,logs,etcd,kubelet,containerd,cni/net.d,pv}
ln -sfn "$NODE_BIN" "$D/bin"

# --- PKI -------------------------------------------------------------------
if [ ! -f "$D/pki/ca.crt" ]; then
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$D/pki/ca.key" -days 365 -subj "/CN=toolgate-local-ca" -out "$D/pki/ca.crt" 2>/dev/null
  openssl genrsa -out "$D/pki/sa.key" 2048 2>/dev/null
  openssl rsa -in "$D/pki/sa.key" -pubout -out "$D/pki/sa.pub" 2>/dev/null
fi
pki apiserver "/CN=kube-apiserver" "DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,IP:127.0.0.1,IP:10.96.0.1,IP:10.244.0.254"
pki kubelet-serving "/CN=localhost" "DNS:localhost,IP:127.0.0.1"
pki admin "/O=system:masters/CN=admin"
pki apiserver-kubelet "/O=system:masters/CN=kube-apiserver-kubelet-client"
pki controller-manager "/CN=system:kube-controller-manager"
pki scheduler "/CN=system:kube-scheduler"
pki kubelet "/O=system:nodes/CN=system:node:localhost"
pki demo-agent "/CN=demo-agent"
pki demo-approver "/CN=demo-approver"
pki kube-router "/CN=local-cluster:kube-router"

for u in admin controller-manager scheduler kubelet demo-agent demo-approver kube-router; do kubeconfig "$u" "$u"; done

# --- control plane -----------------------------------------------------------
start etcd "$K8S_BIN/etcd" --data-dir "$D/etcd" --name local \
  --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
  --listen-peer-urls http://127.0.0.1:$((ETCD_PORT + 10)) --initial-advertise-peer-urls http://127.0.0.1:$((ETCD_PORT + 10)) \
  --initial-cluster "local=http://127.0.0.1:$((ETCD_PORT + 10))"
wait_for etcd curl -fsS "http://127.0.0.1:$ETCD_PORT/health"

start kube-apiserver "$K8S_BIN/kube-apiserver" \
  --etcd-servers "http://127.0.0.1:$ETCD_PORT" --bind-address 127.0.0.1 --secure-port "$API_PORT" \
  --advertise-address 127.0.0.1 --endpoint-reconciler-type none \
  --client-ca-file "$D/pki/ca.crt" --tls-cert-file "$D/pki/apiserver.crt" --tls-private-key-file "$D/pki/apiserver.key" \
  --kubelet-client-certificate "$D/pki/apiserver-kubelet.crt" --kubelet-client-key "$D/pki/apiserver-kubelet.key" \
  --kubelet-certificate-authority "$D/pki/ca.crt" --kubelet-preferred-address-types Hostname \
  --service-account-key-file "$D/pki/sa.pub" --service-account-signing-key-file "$D/pki/sa.key" \
  --service-account-issuer https://kubernetes.default.svc.cluster.local \
  --service-cluster-ip-range 10.96.0.0/24 --authorization-mode Node,RBAC --allow-privileged=false
wait_for kube-apiserver kubectl get --raw /readyz

start kube-controller-manager "$K8S_BIN/kube-controller-manager" \
  --kubeconfig "$D/kubeconfig/controller-manager.kubeconfig" --controllers '*,-node-ipam-controller' \
  --use-service-account-credentials=true --service-account-private-key-file "$D/pki/sa.key" \
  --root-ca-file "$D/pki/ca.crt" --leader-elect=false --bind-address 127.0.0.1 --secure-port 10257
start kube-scheduler "$K8S_BIN/kube-scheduler" \
  --kubeconfig "$D/kubeconfig/scheduler.kubeconfig" --leader-elect=false --bind-address 127.0.0.1 --secure-port 10259

# --- containerd and CNI ------------------------------------------------------
node_cni_conf 10.244.0.0/24 10.244.0.254 >"$D/cni/net.d/10-toolgate.conflist"
# The host (the manager, on the host network) reaches tool pods to hand
# them their calls: the bridge gets a host address outside the pods'
# range. Pods get no route out and cannot open connections to the host:
# only replies to connections the host opened pass.
ip link show tgbr0 >/dev/null 2>&1 || ip link add tgbr0 type bridge
ip addr replace 10.244.0.254/24 dev tgbr0
ip link set tgbr0 up
iptables -C INPUT -i tgbr0 -m conntrack --ctstate NEW -j DROP 2>/dev/null ||
  iptables -I INPUT -i tgbr0 -m conntrack --ctstate NEW -j DROP
# Except the API server (which listens on loopback) at the bridge's
# address, as a cluster's pods reach it through the kubernetes Service:
# toolgate's egress proxy runs as a pod and reads tool pods. Only a pod
# whose policy kube-router has applied and allows it gets there (its INPUT
# chain accepts what a pod's policy allows, before the drop above); tool
# pods' policies refuse it (e2e's isolation spec).
sysctl -qw net.ipv4.conf.tgbr0.route_localnet=1
iptables -t nat -C PREROUTING -i tgbr0 -d 10.244.0.254 -p tcp --dport "$API_PORT" -j DNAT --to-destination "127.0.0.1:$API_PORT" 2>/dev/null ||
  iptables -t nat -I PREROUTING -i tgbr0 -d 10.244.0.254 -p tcp --dport "$API_PORT" -j DNAT --to-destination "127.0.0.1:$API_PORT"
cat >"$D/containerd/config.toml" <<TOML
version = 3
root = "$D/containerd/root"
state = "$D/containerd/state"
[grpc]
  address = "$CONTAINERD_SOCK"
[plugins.'io.containerd.cri.v1.images'.pinned_images]
  sandbox = "toolgate.dev/pause:dev"
[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
  # Pods' network namespaces are mounted under the state directory,
  # which cluster-down unmounts, not in the host's /var/run/netns.
  netns_mounts_under_state_dir = true
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "$D/cni/net.d"
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
  # The RuntimeClass "gvisor" (handler runsc): tool pods whose profile names
  # it run under gVisor's user-space kernel instead of sharing the node's.
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runsc]
    runtime_type = "io.containerd.runsc.v1"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runsc.options]
      TypeUrl = "io.containerd.runsc.v1.options"
      ConfigPath = "$D/containerd/runsc.toml"
TOML
# runsc keeps its state under the cluster's directory (cluster-down finds
# and removes it) and intercepts system calls with systrap, which needs no
# KVM and no ptrace of the host.
mkdir -p "$D/containerd/runsc"
cat >"$D/containerd/runsc.toml" <<TOML
binary_name = "$NODE_BIN/runsc"
root = "$D/containerd/runsc"
[runsc_config]
  platform = "systrap"
TOML
start containerd "$NODE_BIN/containerd" --config "$D/containerd/config.toml"
wait_for containerd ctr_ version

# --- images ------------------------------------------------------------------
# (Skipped when only restarting a component: hack/chaos.)
[ -n "${TOOLGATE_SKIP_IMAGES:-}" ] || "$root/hack/images.sh" >/dev/null

# --- kubelet -----------------------------------------------------------------
# No eviction thresholds: a busy test machine must not evict pods. hack/chaos
# sets one (TOOLGATE_KUBELET_EVICTION_HARD) to induce node pressure.
eviction_hard=${TOOLGATE_KUBELET_EVICTION_HARD:-"{}"}
cat >"$D/kubelet/config.yaml" <<KL
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
readOnlyPort: 0
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://$CONTAINERD_SOCK
enforceNodeAllocatable: []
evictionHard: $eviction_hard
evictionPressureTransitionPeriod: 5s
resolvConf: ""
tlsCertFile: $D/pki/kubelet-serving.crt
tlsPrivateKeyFile: $D/pki/kubelet-serving.key
authentication:
  x509: {clientCAFile: $D/pki/ca.crt}
  webhook: {enabled: true}
  anonymous: {enabled: false}
authorization: {mode: Webhook}
clusterDomain: cluster.local
staticPodPath: ""
# A container that keeps crashing is restarted after at most 10 s (the
# default cap is 5 minutes): hack/chaos SIGKILLs the manager 20 times.
# EventedPLEG: containerd 2 streams container events, so the kubelet learns
# of an exit (an init container's) at once, not at its next relist.
featureGates: {KubeletCrashLoopBackOffMax: true, EventedPLEG: true}
crashLoopBackOff: {maxContainerRestartPeriod: 10s}
KL
start kubelet "$K8S_BIN/kubelet" --config "$D/kubelet/config.yaml" \
  --kubeconfig "$D/kubeconfig/kubelet.kubeconfig" --hostname-override localhost \
  --root-dir "$D/kubelet/root" --cert-dir "$D/kubelet/pki"
wait_for "the node" kubectl wait --for=condition=Ready node/localhost --timeout=2s
kubectl apply -f - >/dev/null <<'RC'
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata:
  name: gvisor
handler: runsc
RC

# --- NetworkPolicy -------------------------------------------------------------
# kube-router's firewall (no routing, no service proxy, no CNI of its own)
# enforces NetworkPolicy on the bridge's pods with iptables and ipsets;
# bridged traffic passes iptables (br_netfilter). It reads what it needs as
# its own user (docs/local-cluster.md).
echo 1 >/proc/sys/net/bridge/bridge-nf-call-iptables
kubectl apply -f - >/dev/null <<'RBAC'
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: local-cluster:kube-router
rules:
  - apiGroups: [""]
    resources: [pods, namespaces, nodes, services, endpoints]
    verbs: [get, list, watch]
  - apiGroups: [discovery.k8s.io]
    resources: [endpointslices]
    verbs: [get, list, watch]
  - apiGroups: [networking.k8s.io]
    resources: [networkpolicies]
    verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: local-cluster:kube-router
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: local-cluster:kube-router}
subjects:
  - {apiGroup: rbac.authorization.k8s.io, kind: User, name: local-cluster:kube-router}
RBAC
start kube-router "$NODE_BIN/kube-router" --kubeconfig "$D/kubeconfig/kube-router.kubeconfig" --hostname-override localhost \
  --run-firewall=true --run-router=false --run-service-proxy=false --enable-cni=false --enable-ipv6=false \
  --service-cluster-ip-range 10.96.0.0/24 --health-port 0 --metrics-port 0
wait_for kube-router iptables -n -L KUBE-ROUTER-FORWARD
# kube-router applies a new pod's policy at its next full sync, some time
# after the pod has its address: until then the pod's traffic would pass,
# and a tool's body can start within that time (e2e's isolation spec saw
# cold tool pods reach another namespace's pod). A new connection of a pod
# kube-router has not synced yet is dropped (TCP tries again once it is):
# hack/netpol-guard.sh says how.
start netpol-guard "$root/hack/netpol-guard.sh" 10.244.0.0/24
# shellcheck disable=SC2046 # the rule's words
wait_for "the NetworkPolicy guard" iptables -t mangle -C FORWARD $(guard_rule 10.244.0.0/24)
more_nodes
log "ready: export KUBECONFIG=$KUBECONFIG_ADMIN"
