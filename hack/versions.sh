# Pinned versions, derived from go.mod where a module pins them.
# Sourced by the hack/ scripts.
_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# k8s.io/api v0.X.Y belongs to Kubernetes v1.X.Y.
K8S_VERSION=${K8S_VERSION:-$(awk '$1=="k8s.io/api"{sub(/^v0\./,"v1.",$2); print $2; exit}' "$_root/go.mod")}
# etcd is the release the pinned kube-apiserver is tested with.
ETCD_VERSION=${ETCD_VERSION:-v3.6.16}

k8s_cache_root() { echo "${TOOLGATE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/toolgate}"; }
k8s_bin_dir() { echo "$(k8s_cache_root)/k8s/$K8S_VERSION"; }
# helm builds from source as a Go module (hack/build-helm.sh).
HELM_VERSION=${HELM_VERSION:-v4.3.1}
# The node's runtime pieces build from source as Go modules into the cache
# (hack/build-node.sh): containerd 2 and its runc shim (gVisor's shim needs
# containerd's shim protocol 2), gVisor's runsc and shim (the proxy serves
# it by pseudo-version), and kube-router, whose firewall enforces
# NetworkPolicy on the local cluster (docs/local-cluster.md).
CONTAINERD_VERSION=${CONTAINERD_VERSION:-v2.4.2}
GVISOR_VERSION=${GVISOR_VERSION:-v0.0.0-20260905035102-160fafc42237}
KUBE_ROUTER_VERSION=${KUBE_ROUTER_VERSION:-v2.1.0}
node_bin_dir() { echo "$(k8s_cache_root)/node/containerd-$CONTAINERD_VERSION-gvisor-$GVISOR_VERSION-kube-router-$KUBE_ROUTER_VERSION"; }
# promtool (Prometheus' rule checker and tester) builds from source as a Go
# module (hack/build-promtool.sh); v0.X.Y is Prometheus 3.X.Y.
PROMETHEUS_VERSION=${PROMETHEUS_VERSION:-v0.316.0}
# Jaeger (v2, an OpenTelemetry Collector distribution): the e2e suite's
# OTLP receiver and trace store, built from source (hack/build-jaeger.sh).
JAEGER_VERSION=${JAEGER_VERSION:-v1.75.0}

# cached_go_build NAME VERSION PACKAGE [LDFLAGS]: builds the Go program
# PACKAGE at its module's VERSION, through the module proxy, into the
# cache as NAME-VERSION, once (a binary that exists is never rebuilt), in a
# module of its own so that its dependencies never touch toolgate's. It
# prints the binary's path on its last line.
cached_go_build() {
  local name=$1 version=$2 pkg=$3 ldflags=${4:-}
  local bin m
  bin="$(k8s_cache_root)/$name-$version"
  if [ -x "$bin" ]; then
    echo "$bin"
    return 0
  fi
  echo "building $name $version (cached in $bin)" >&2
  m="$(k8s_cache_root)/build/$name-$version"
  mkdir -p "$m"
  (
    cd "$m"
    export GOFLAGS=-mod=mod CGO_ENABLED=0
    [ -f go.mod ] || go mod init "toolgate.dev/${name}build" >/dev/null 2>&1
    go get -tool "$pkg@$version" >/dev/null
    go build -trimpath -ldflags "-s -w $ldflags" -o "$bin.tmp" "$pkg"
    mv "$bin.tmp" "$bin"
  )
  echo "$bin"
}
