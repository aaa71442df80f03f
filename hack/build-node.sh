#!/usr/bin/env bash
# Builds the local cluster's node runtime from source through the Go module
# proxy into one cache directory, once (binaries that exist are never
# rebuilt): containerd, containerd-shim-runc-v2 and ctr; gVisor's runsc and
# containerd-shim-runsc-v1; kube-router. Versions: hack/versions.sh.
#
# Usage: hack/build-node.sh   (prints the directory on its last line)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=hack/versions.sh
source "$root/hack/versions.sh"

dir=$(node_bin_dir)
mkdir -p "$dir"
# missing binary...: whether any of them is still to be built.
missing() {
  local b
  for b; do [ -x "$dir/$b" ] || return 0; done
  return 1
}
export GOFLAGS=-mod=mod
export CGO_ENABLED=0

# module name version: a throwaway module requiring name@version, in the
# cache's build directory; the caller's commands run in it.
module() {
  local m
  m="$(k8s_cache_root)/build/${1//\//_}@$2"
  mkdir -p "$m"
  cd "$m"
  [ -f go.mod ] || go mod init toolgate.dev/nodebuild >/dev/null 2>&1
  go get "$1@$2" >/dev/null
}
# build package binary [go build flags...]
build() {
  local pkg=$1 bin=$2
  shift 2
  echo "building $bin (cached in $dir)" >&2
  go build -trimpath "$@" -o "$dir/$bin.tmp" "$pkg"
  mv "$dir/$bin.tmp" "$dir/$bin"
}

missing containerd containerd-shim-runc-v2 ctr && (
  module github.com/containerd/containerd/v2 "$CONTAINERD_VERSION"
  for b in containerd containerd-shim-runc-v2 ctr; do
    if missing "$b"; then
      build "github.com/containerd/containerd/v2/cmd/$b" "$b" -tags "no_btrfs netgo osusergo" \
        -ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION"
    fi
  done
)
missing runsc containerd-shim-runsc-v1 && (
  module gvisor.dev/gvisor "$GVISOR_VERSION"
  if missing runsc; then
    build gvisor.dev/gvisor/runsc runsc -ldflags "-s -w"
  fi
  if missing containerd-shim-runsc-v1; then
    # The shim lowers its own OOM score to -999, which needs
    # CAP_SYS_RESOURCE: on a machine without it (this VM, where containerd
    # runs with restrict_oom_score_adj for the same reason) every sandbox
    # fails to start. The shim is built from a copy of the module's source
    # with that one constant at 0 (the score it inherits); nothing else
    # changes.
    src="$(go env GOMODCACHE)/gvisor.dev/gvisor@$GVISOR_VERSION"
    rm -rf gvisor-src && cp -r "$src" gvisor-src && chmod -R u+w gvisor-src
    f=gvisor-src/pkg/shim/v1/manager.go
    grep -q 'oomScoreMax = -999' "$f" || { echo "build-node: $f no longer sets oomScoreMax = -999; review this step" >&2; exit 1; }
    sed -i 's/oomScoreMax = -999/oomScoreMax = 0/' "$f"
    go mod edit -replace "gvisor.dev/gvisor=./gvisor-src"
    build gvisor.dev/gvisor/shim containerd-shim-runsc-v1 -ldflags "-s -w"
    go mod edit -dropreplace gvisor.dev/gvisor
    rm -rf gvisor-src
  fi
)
missing kube-router && (
  # The proxy serves kube-router only at this version, whose own
  # dependencies carry reported vulnerabilities: the golang.org/x modules
  # and gRPC are raised to current releases before the build.
  module github.com/cloudnativelabs/kube-router/v2 "$KUBE_ROUTER_VERSION"
  go get golang.org/x/net@v0.63.0 golang.org/x/crypto@v0.59.0 golang.org/x/sys@v0.50.0 \
    golang.org/x/text@v0.44.0 golang.org/x/oauth2@v0.38.0 google.golang.org/grpc@v1.85.0 >/dev/null
  build github.com/cloudnativelabs/kube-router/v2/cmd/kube-router kube-router \
    -ldflags "-s -w -X github.com/cloudnativelabs/kube-router/v2/pkg/version.Version=$KUBE_ROUTER_VERSION"
)
echo "$dir"
