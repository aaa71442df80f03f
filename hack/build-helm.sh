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

cached_go_build helm "$HELM_VERSION" helm.sh/helm/v4/cmd/helm \
  "-X helm.sh/helm/v4/internal/version.version=$HELM_VERSION"
