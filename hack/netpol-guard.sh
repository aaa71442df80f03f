#!/usr/bin/env bash
# netpol-guard.sh RANGE: run by cluster-up.sh and node-up.sh in a node's
# network namespace, beside its kube-router. It keeps the ipset
# GUARD_SET (cluster-env.sh) equal to the pods of RANGE that kube-router has given a
# firewall chain, and a mangle FORWARD rule drops every new connection of
# a pod of RANGE not in it.
#
# Why: kube-router applies a new pod's NetworkPolicy at its next sync,
# some time after the pod has its address, and a body can start sooner.
# Until then the pod's traffic meets no chain of its own; a connection to
# a pod that no policy selects is even marked allowed by that pod's chain.
# So whether kube-router has synced a connection's source is read from its
# rules (a `-s POD/32 -j KUBE-POD-FW-*` jump), re-read whenever nftables
# reports a rule change. The drop sits in mangle, which runs before
# kube-router's filter chains (it keeps its own jump first in filter).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/cluster-env.sh"
range=${1:?usage: netpol-guard.sh POD_RANGE}
set=$GUARD_SET
ipset create "$set" hash:ip -exist
# shellcheck disable=SC2046 # the rule's words
iptables -t mangle -C FORWARD $(guard_rule "$range") 2>/dev/null || iptables -t mangle -A FORWARD $(guard_rule "$range")
# sync makes the set what kube-router's rules say, compared with the set
# itself each time: kube-router restores every ipset of the namespace from
# a copy it saved earlier, ours included, which can put back a stale one.
sync() {
  local want have
  want=$(iptables -S KUBE-ROUTER-FORWARD 2>/dev/null |
    sed -n 's/^-A KUBE-ROUTER-FORWARD -s \([0-9.]*\)\/32 .*-j KUBE-POD-FW-.*/\1/p' | sort -u)
  have=$(ipset list "$set" 2>/dev/null | sed '1,/^Members:/d' | sort -u)
  [ "$want" = "$have" ] && return
  {
    echo "create $set-next hash:ip -exist"
    echo "flush $set-next"
    for ip in $want; do echo "add $set-next $ip"; done
    echo "swap $set-next $set"
    echo "destroy $set-next"
  } | ipset restore
}
while :; do
  sync
  # One read per burst of changes (kube-router rewrites its chains at once,
  # reported line by line), at least one every 100 ms while changes keep
  # coming (on a busy node they never pause), and one every second in any
  # case (nft monitor can miss events when its socket's buffer overflows).
  nft monitor rules 2>/dev/null | while :; do
    read -r -t 1 _
    rc=$?
    if [ "$rc" -eq 0 ]; then
      until=$((${EPOCHREALTIME/./} + 100000))
      while [ "${EPOCHREALTIME/./}" -lt "$until" ] && read -r -t 0.02 _; do :; done
    elif [ "$rc" -le 128 ]; then
      break # nft monitor ended: started again
    fi
    sync
  done
  sleep 1
done
