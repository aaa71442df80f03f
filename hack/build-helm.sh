#!/usr/bin/env bash
# Builds helm from source (the Go module helm.sh/helm/v4, through the module
# proxy) into the per-user cache, once: a binary that exists is never
# rebuilt. The version is HELM_VERSION in hack/versions.sh.
#
# Usage: hack/build-helm.sh   (prints the binary's path on its last line)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=hack/versions.sh
source "$root/hack/versions.sh"

bin="$(k8s_cache_root)/helm-$HELM_VERSION"
if [ -x "$bin" ]; then
  echo "$bin"
  exit 0
fi

echo "building helm $HELM_VERSION (cached in $bin)" >&2
export GOFLAGS=-mod=mod
export CGO_ENABLED=0
m="$(k8s_cache_root)/build/helm-$HELM_VERSION"
mkdir -p "$m"
(
  cd "$m"
  [ -f go.mod ] || go mod init toolgate.dev/helmbuild >/dev/null 2>&1
  go get "helm.sh/helm/v4@$HELM_VERSION" >/dev/null
  go build -trimpath -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=$HELM_VERSION" \
    -o "$bin.tmp" helm.sh/helm/v4/cmd/helm
  mv "$bin.tmp" "$bin"
)
echo "$bin"
