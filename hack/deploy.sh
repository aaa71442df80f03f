#!/usr/bin/env bash
# Installs (or upgrades) toolgate on the local cluster and waits for the
# manager to be running the freshly imported image.
#
# TOOLGATE_INSTALL selects how: "kustomize" (default) applies config/local;
# "chart" installs charts/toolgate with hack/local-values.yaml (the same
# objects; test/chart compares them), with helm built into the cache.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/hack/cluster-env.sh"
case "${TOOLGATE_INSTALL:-kustomize}" in
  kustomize)
    kubectl kustomize "$root/config/local" | kubectl apply --server-side --force-conflicts -f - >/dev/null
    ;;
  chart)
    helm=$("$root/hack/build-helm.sh" | tail -1)
    # The e2e suite's MCP gateway (config/local-gateway) uses the host's
    # network there, which Pod Security "restricted" forbids (as
    # config/local labels it).
    kubectl create namespace toolgate-system --dry-run=client -o yaml | kubectl apply -f - >/dev/null
    kubectl label namespace toolgate-system pod-security.kubernetes.io/enforce=privileged --overwrite >/dev/null
    "$helm" upgrade --install toolgate "$root/charts/toolgate" --kubeconfig "$KUBECONFIG_ADMIN" \
      --namespace toolgate-system -f "$root/hack/local-values.yaml" --wait --timeout 5m >/dev/null
    ;;
  *)
    echo "deploy: TOOLGATE_INSTALL must be kustomize or chart, not ${TOOLGATE_INSTALL}" >&2
    exit 2
    ;;
esac
# The images keep their tag: pods already running an older build of it are
# replaced.
for d in toolgate-controller-manager toolgate-egress; do
  kubectl -n toolgate-system get deployment "$d" >/dev/null 2>&1 || continue
  kubectl -n toolgate-system rollout restart deployment/"$d" >/dev/null
  kubectl -n toolgate-system rollout status deployment/"$d" --timeout=180s
done

# The API server serves a new or updated CRD's objects only once their
# storage is ready, which can lag the CRD by seconds (503 ServiceUnavailable
# on a create right after a fresh install). Wait until a ToolCall create is
# answered by anything else: a server-side dry run, which the policies may
# refuse (this probe is nobody's call), and which writes nothing.
probe='{"apiVersion":"toolgate.dev/v1alpha1","kind":"ToolCall","metadata":{"name":"deploy-probe","namespace":"toolgate-system"},"spec":{"sessionRef":{"name":"deploy-probe"},"turn":0,"index":0,"callID":"deploy-probe","tool":"deploy-probe","requester":"deploy-probe"}}'
for i in $(seq 1 120); do
  if out=$(echo "$probe" | kubectl create --dry-run=server -f - 2>&1) || ! grep -q 'ServiceUnavailable\|storage is' <<<"$out"; then
    break
  fi
  [ "$i" -lt 120 ] || { echo "deploy: the API server does not serve ToolCalls after 60 s: $out" >&2; exit 1; }
  sleep 0.5
done
