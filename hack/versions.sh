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
