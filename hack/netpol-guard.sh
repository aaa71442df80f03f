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
set -uo pipefail -f # -f: the split lines below are never file patterns
source "$(dirname "${BASH_SOURCE[0]}")/cluster-env.sh"
range=${1:?usage: netpol-guard.sh POD_RANGE}
set=$GUARD_SET
ipset create "$set" hash:ip -exist
# shellcheck disable=SC2046 # the rule's words
iptables -t mangle -C FORWARD $(guard_rule "$range") 2>/dev/null || iptables -t mangle -A FORWARD $(guard_rule "$range")
# sync makes the set what kube-router's rules say (read again when asked:
# "rules"), compared with the set itself each time: kube-router restores
# every ipset of the namespace from a copy it saved earlier, ours
# included, which can put back a stale one. One or two processes a sync,
# and the lines split by bash itself: bash reads a pipe one byte per
# system call, which on a busy node cost more CPU than kube-router.
declare -A want=()
sync() {
  local IFS=$'\n' line members=0 restore same=1
  local -A have=()
  if [ "${1:-}" = rules ]; then
    want=()
    for line in $(iptables -S KUBE-ROUTER-FORWARD 2>/dev/null); do
      [[ $line =~ ^-A\ KUBE-ROUTER-FORWARD\ -s\ ([0-9.]+)/32\ .*-j\ KUBE-POD-FW- ]] && want[${BASH_REMATCH[1]}]=1
    done
  fi
  for line in $(ipset list "$set" 2>/dev/null); do
    if ((members)); then have[$line]=1; elif [ "$line" = Members: ]; then members=1; fi
  done
  if [ "${#want[@]}" -ne "${#have[@]}" ]; then same=0; fi
  for line in "${!want[@]}"; do [ -n "${have[$line]:-}" ] || same=0; done
  ((same)) && return
  restore="create $set-next hash:ip -exist"$'\n'"flush $set-next"$'\n'
  for line in "${!want[@]}"; do restore+="add $set-next $line"$'\n'; done
  restore+="swap $set-next $set"$'\n'"destroy $set-next"$'\n'
  ipset restore <<<"$restore"
}
# nft monitor reports every rule change; grep keeps those of kube-router's
# forward chain (where a pod's jump appears and goes) and appends them to
# a file, which the loop below reads as it grows (a regular file, read by
# bash in blocks). The rules are read again once a burst of changes has
# been quiet for 50 ms (kube-router rewrites the whole chain at once), or
# 500 ms after it began if it never pauses, and every 10 s in any case
# (nft monitor can miss events when its socket's buffer overflows); the
# set is compared with them every second (kube-router's restores change
# no rule).
events=$CLUSTER_DIR/netpol-guard-${range//[.\/]/-}.events
: >"$events"
(
  while :; do
    nft monitor rules 2>/dev/null | grep --line-buffered -F KUBE-ROUTER-FORWARD >>"$events"
    sleep 1
  done
) &
exec {ev}<"$events"
exec {tick}<> <(:) # read -t on it waits without a process
checked=0 rules=0 burst=0 quiet=0
while :; do
  now=${EPOCHREALTIME/./} chunk=
  read -r -N 1048576 -u "$ev" chunk
  if [ -n "$chunk" ]; then
    quiet=$now
    ((burst)) || burst=$now
  fi
  if { ((burst)) && ((now - quiet >= 50000 || now - burst >= 500000)); } || ((now - rules >= 10000000)); then
    : >"$events"
    exec {ev}<&- {ev}<"$events" # read from its start again
    burst=0 checked=$now rules=$now
    sync rules
  elif ((now - checked >= 1000000)); then
    checked=$now
    sync
  fi
  read -r -t 0.05 -u "$tick" _
done
