# Settings of the local single-node cluster; sourced by the cluster scripts.
# shellcheck source=hack/versions.sh
source "$(dirname "${BASH_SOURCE[0]}")/versions.sh"
CLUSTER_DIR=${TOOLGATE_CLUSTER_DIR:-/var/tmp/toolgate-cluster}
K8S_BIN=$(k8s_bin_dir)
API_PORT=${TOOLGATE_API_PORT:-6443}
ETCD_PORT=${TOOLGATE_ETCD_PORT:-23790}
KUBECONFIG_ADMIN=$CLUSTER_DIR/kubeconfig/admin.kubeconfig
CONTAINERD_SOCK=$CLUSTER_DIR/containerd/containerd.sock
kubectl() { "$K8S_BIN/kubectl" --kubeconfig "$KUBECONFIG_ADMIN" "$@"; }
# containerd, its shims, ctr, runsc and kube-router (hack/build-node.sh);
# cluster-up links the directory as $CLUSTER_DIR/bin for the Go tools.
NODE_BIN=$(node_bin_dir)
export PATH="$NODE_BIN:$PATH"
ctr_() { "$NODE_BIN/ctr" --address "$CONTAINERD_SOCK" -n k8s.io "$@"; }
