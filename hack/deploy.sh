#!/usr/bin/env bash
# Installs (or upgrades) toolgate on the local cluster from config/local and
# waits for the manager to be running the freshly imported image.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/hack/cluster-env.sh"
kubectl kustomize "$root/config/local" | kubectl apply --server-side --force-conflicts -f - >/dev/null
kubectl -n toolgate-system rollout restart deployment/toolgate-controller-manager >/dev/null
kubectl -n toolgate-system rollout status deployment/toolgate-controller-manager --timeout=180s
