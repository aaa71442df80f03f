#!/usr/bin/env bash
# Builds promtool from source (the Go module github.com/prometheus/prometheus,
# through the module proxy) into the per-user cache, once: a binary that
# exists is never rebuilt. The version is PROMETHEUS_VERSION in
# hack/versions.sh. test/prometheus runs it on the alerts.
#
# Usage: hack/build-promtool.sh   (prints the binary's path on its last line)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=hack/versions.sh
source "$root/hack/versions.sh"

bin="$(k8s_cache_root)/promtool-$PROMETHEUS_VERSION"
if [ -x "$bin" ]; then
  echo "$bin"
  exit 0
fi

echo "building promtool $PROMETHEUS_VERSION (cached in $bin)" >&2
export CGO_ENABLED=0
mkdir -p "$(k8s_cache_root)"
GOBIN="$(k8s_cache_root)/build/promtool-$PROMETHEUS_VERSION" \
  go install -trimpath -ldflags "-s -w" "github.com/prometheus/prometheus/cmd/promtool@$PROMETHEUS_VERSION"
mv "$(k8s_cache_root)/build/promtool-$PROMETHEUS_VERSION/promtool" "$bin"
echo "$bin"
