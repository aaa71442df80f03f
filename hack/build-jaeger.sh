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

cached_go_build jaeger "$JAEGER_VERSION" github.com/jaegertracing/jaeger/cmd/jaeger
