#!/usr/bin/env bash
# Builds Jaeger from source (the Go module github.com/jaegertracing/jaeger,
# through the module proxy) into the per-user cache, once: a binary that
# exists is never rebuilt. The version is JAEGER_VERSION in
# hack/versions.sh. The e2e suite runs it as the OTLP receiver the local
# install's manager and gateway export traces to (test/e2e/testdata/
# jaeger.yaml).
#
# Usage: hack/build-jaeger.sh   (prints the binary's path on its last line)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=hack/versions.sh
source "$root/hack/versions.sh"

bin="$(k8s_cache_root)/jaeger-$JAEGER_VERSION"
if [ -x "$bin" ]; then
  echo "$bin"
  exit 0
fi

echo "building jaeger $JAEGER_VERSION (cached in $bin)" >&2
export GOFLAGS=-mod=mod
export CGO_ENABLED=0
m="$(k8s_cache_root)/build/jaeger-$JAEGER_VERSION"
mkdir -p "$m"
(
  cd "$m"
  [ -f go.mod ] || go mod init toolgate.dev/jaegerbuild >/dev/null 2>&1
  go get -tool "github.com/jaegertracing/jaeger/cmd/jaeger@$JAEGER_VERSION" >/dev/null
  go build -trimpath -ldflags "-s -w" -o "$bin.tmp" github.com/jaegertracing/jaeger/cmd/jaeger
  mv "$bin.tmp" "$bin"
)
echo "$bin"
