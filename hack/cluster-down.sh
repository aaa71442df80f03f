#!/usr/bin/env bash
# Stops every process cluster-up started (by pid), removes pod sandboxes and
# mounts under the state directory, the bridge, and the state itself.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/hack/cluster-env.sh"
D=$CLUSTER_DIR
[ -d "$D" ] || exit 0
echo "cluster-down: before: $(pgrep -fc -- "$D") processes, $(grep -c " $D" /proc/mounts) mounts, bridge tgbr0 $(ip link show tgbr0 >/dev/null 2>&1 && echo present || echo absent)"
stop() { # name [pid directory]
  local f="${2:-$D/pids}/$1"
  [ -f "$f" ] || return
  local pid
  # Only the very process recorded: its pid may since name another's.
  if pid=$(pid_alive "$f"); then
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null
  fi
  rm -f "$f"
}
stop toolgate-manager
# The demo's Jaeger (hack/demo.sh).
stop jaeger
# The nodes beyond the first (hack/node-up.sh): their processes, then
# their namespaces, which take their links, routes, firewall rules and
# kube-router's chains with them.
for N in "$D"/nodes/node*; do
  [ -d "$N" ] || continue
  n=${N##*node}
  "$root/hack/node-down.sh" "$n" 2>/dev/null
  ip netns del "$(node_netns "$n")" 2>/dev/null
  # The namespace itself goes once the sockets its killed processes left
  # give up (their link is down: minutes); its link goes now.
  ip link del "tgn$n" 2>/dev/null
  while iptables -t nat -D PREROUTING -i "tgn$n" -d 10.244.0.254 -p tcp --dport 6443 -j DNAT --to-destination 127.0.0.1:6443 2>/dev/null; do :; done
  while iptables -t mangle -D PREROUTING -i "tgn$n" ! -d 10.244.0.0/16 -m addrtype ! --dst-type LOCAL -j DROP 2>/dev/null; do :; done
  # Its cgroups, deepest first, once their processes are gone.
  for c in /sys/fs/cgroup/*/toolgate-node"$n"; do
    [ -d "$c" ] && find "$c" -depth -type d -exec rmdir {} \; 2>/dev/null
  done
done
ip route del unreachable 10.244.0.0/16 2>/dev/null
[ -f "$D/ip_forward" ] && sysctl -qw "net.ipv4.ip_forward=$(cat "$D/ip_forward")"
stop netpol-guard
# shellcheck disable=SC2046 # the rule's words
while iptables -t mangle -D FORWARD $(guard_rule 10.244.0.0/24) 2>/dev/null; do :; done
stop kube-router
# Its iptables chains and ipsets go with it (kube-router's own
# --cleanup-config leaves them on this iptables).
for c in INPUT FORWARD OUTPUT; do
  iptables -S "$c" 2>/dev/null | grep -E -- '-j KUBE-ROUTER-' | sed 's/^-A/-D/' | while read -r rule; do eval "iptables $rule"; done
done
kr_chains=$(iptables -S 2>/dev/null | awk '$1=="-N" && $2 ~ /^KUBE-(ROUTER|POD-FW|NWPLCY)-/ {print $2}')
for c in $kr_chains; do iptables -F "$c"; done
for c in $kr_chains; do iptables -X "$c"; done
for set in $(ipset list -n 2>/dev/null | grep -E "^(KUBE-|$GUARD_SET)"); do ipset destroy "$set" 2>/dev/null; done
stop kubelet
# Containers outlive the kubelet: stop their shims (children of containerd's
# state dir) before containerd.
if [ -S "$CONTAINERD_SOCK" ]; then
  for t in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks kill -s KILL "$t" >/dev/null 2>&1; done
fi
pkill -KILL -f "containerd-shim-runc-v2 .*-address $CONTAINERD_SOCK" 2>/dev/null
pkill -KILL -f "containerd-shim-runsc-v1 .*-address $CONTAINERD_SOCK" 2>/dev/null
# gVisor's sandboxes and gofers (runsc --root under the state directory).
pkill -KILL -f "runsc[a-z-]* .*--root[= ]$D/" 2>/dev/null
stop containerd
stop kube-scheduler
stop kube-controller-manager
stop kube-apiserver
stop etcd
# Unmount everything below the state directory, deepest first.
grep " $D" /proc/mounts | awk '{print $2}' | sort -r | while read -r m; do umount -l "$m" 2>/dev/null; done
ip link del tgbr0 2>/dev/null
while iptables -D INPUT -i tgbr0 -m conntrack --ctstate NEW -j DROP 2>/dev/null; do :; done
while iptables -D FORWARD -s 10.244.0.0/24 -m conntrack --ctstate NEW -m mark ! --mark 0x20000/0x20000 -j DROP 2>/dev/null; do :; done
while iptables -t nat -D PREROUTING -i tgbr0 -d 10.244.0.254 -p tcp --dport 6443 -j DNAT --to-destination 127.0.0.1:6443 2>/dev/null; do :; done
rm -rf "$D"
# Prove nothing of ours is left: processes, mounts, the bridge, the state.
left=$(
  pgrep -af -- "$D" | grep -v "cluster-down" | sed 's/^/process: /'
  grep " $D" /proc/mounts | sed 's/^/mount: /'
  ip link show tgbr0 >/dev/null 2>&1 && echo "bridge: tgbr0"
  ip netns list 2>/dev/null | grep -o '^toolgate-node[0-9]*' | sed 's/^/network namespace: /'
  ip -o link show 2>/dev/null | grep -o ' tgn[0-9]*[@:]' | sed 's/^ /link: /; s/[@:]$//'
  ls -d /sys/fs/cgroup/*/toolgate-node* 2>/dev/null | sed 's/^/cgroup: /'
  ip route show 10.244.0.0/16 2>/dev/null | sed 's/^/route: /'
  iptables -C INPUT -i tgbr0 -m conntrack --ctstate NEW -j DROP 2>/dev/null && echo "iptables: the INPUT rule of tgbr0"
  iptables -C FORWARD -s 10.244.0.0/24 -m conntrack --ctstate NEW -m mark ! --mark 0x20000/0x20000 -j DROP 2>/dev/null && echo "iptables: the FORWARD rule of unsynced pods"
  # shellcheck disable=SC2046 # the rule's words
  iptables -t mangle -C FORWARD $(guard_rule 10.244.0.0/24) 2>/dev/null && echo "iptables: the NetworkPolicy guard's rule"
  ipset list -n 2>/dev/null | grep -q "^$GUARD_SET" && echo "ipset: the NetworkPolicy guard's set"
  iptables -t nat -C PREROUTING -i tgbr0 -d 10.244.0.254 -p tcp --dport 6443 -j DNAT --to-destination 127.0.0.1:6443 2>/dev/null && echo "iptables: the API server DNAT of tgbr0"
  iptables -S 2>/dev/null | grep -q -E 'KUBE-(ROUTER|POD-FW|NWPLCY)-' && echo "iptables: kube-router's chains"
  ipset list -n 2>/dev/null | grep -q -E '^KUBE-' && echo "ipset: kube-router's sets"
  [ -e "$D" ] && echo "state: $D"
)
if [ -n "$left" ]; then
  echo "cluster-down: left behind:" >&2
  echo "$left" >&2
  exit 1
fi
echo "cluster-down: removed $D; no process, mount or bridge of the cluster is left"
