#!/usr/bin/env bash
# Builds the binaries and images (no Docker engine: go-containerregistry)
# and imports them into the local cluster's containerd.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/hack/cluster-env.sh"
cd "$root"
mkdir -p _output/bin
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o _output/bin/toolgate-runner ./cmd/toolgate-runner
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o _output/bin/manager ./cmd/manager
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o _output/bin/toolgate-gateway ./cmd/toolgate-gateway
# The kubectl plugin (kubectl toolgate ...), for the demo and e2e.
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o _output/bin/kubectl-toolgate ./cmd/kubectl-toolgate
go run ./hack/images -out _output/images -runner _output/bin/toolgate-runner -manager _output/bin/manager -gateway _output/bin/toolgate-gateway >/dev/null
for f in _output/images/*.tar; do
  ctr_ images import "$f" >/dev/null
done
