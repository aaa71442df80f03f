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

cached_go_build promtool "$PROMETHEUS_VERSION" github.com/prometheus/prometheus/cmd/promtool
