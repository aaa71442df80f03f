#!/usr/bin/env bash
# Builds pinned Kubernetes components and etcd from source through the Go
# module proxy, into a per-user cache outside the checkout so that every clone
# on this machine (and its CI run) reuses one build. Binaries that already
# exist are never rebuilt.
#
# Usage: hack/build-k8s.sh [component...]
#   components: kube-apiserver kubectl etcd kubelet kube-scheduler
#               kube-controller-manager (default: the envtest set)
# Prints the directory holding the binaries on its last line.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=hack/versions.sh
source "$root/hack/versions.sh"

components=("$@")
[ ${#components[@]} -gt 0 ] || components=(kube-apiserver etcd kubectl)

dir=$(k8s_bin_dir)
mkdir -p "$dir"

missing=()
for c in "${components[@]}"; do
  [ -x "$dir/$c" ] || missing+=("$c")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "$dir"
  exit 0
fi

export GOFLAGS=-mod=mod
export CGO_ENABLED=0
work=$(k8s_cache_root)/build
mkdir -p "$work"

build_kube() {
  local m="$work/kubernetes-$K8S_VERSION"
  if [ ! -f "$m/.ready" ]; then
    rm -rf "$m" && mkdir -p "$m"
    (
      cd "$m"
      cat >go.mod <<MOD
module toolgate.dev/k8sbuild

go 1.26

require k8s.io/kubernetes $K8S_VERSION
MOD
      # k8s.io/kubernetes requires its staging modules at v0.0.0; point each
      # one at the published version of the same release.
      local gomod
      gomod=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
      local staging="v0.${K8S_VERSION#v1.}"
      grep -E '^\s*k8s.io/[a-z0-9-]+ v0\.0\.0\s*$' "$gomod" | awk '{print $1}' | sort -u | while read -r mod; do
        echo "replace $mod => $mod $staging" >>go.mod
      done
      cat >tools.go <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
GO
      go mod tidy -e >/dev/null
    )
    touch "$m/.ready"
  fi
  local minor=${K8S_VERSION#v1.}
  minor=${minor%%.*}
  (
    cd "$m"
    go build -trimpath -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor" \
      -o "$dir/$1.tmp" "k8s.io/kubernetes/cmd/$1"
    mv "$dir/$1.tmp" "$dir/$1"
  )
}

build_etcd() {
  local m="$work/etcd-$ETCD_VERSION"
  mkdir -p "$m"
  (
    cd "$m"
    [ -f go.mod ] || go mod init toolgate.dev/etcdbuild >/dev/null 2>&1
    go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" >/dev/null 2>&1
    go build -trimpath -ldflags "-s -w" -o "$dir/etcd.tmp" go.etcd.io/etcd/server/v3
    mv "$dir/etcd.tmp" "$dir/etcd"
  )
}

for c in "${missing[@]}"; do
  echo "building $c (cached in $dir)" >&2
  case "$c" in
    etcd) build_etcd ;;
    kube-apiserver | kubectl | kubelet | kube-scheduler | kube-controller-manager) build_kube "$c" ;;
    *) echo "unknown component: $c" >&2; exit 2 ;;
  esac
done
echo "$dir"
