#!/usr/bin/env bash
# Builds the images as the Dockerfile defines them (no Docker engine:
# hack/images) and imports them into the local cluster's containerd.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/hack/cluster-env.sh"
cd "$root"
mkdir -p _output/bin
# The kubectl plugin (kubectl toolgate ...), for the demo and e2e.
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o _output/bin/kubectl-toolgate ./cmd/kubectl-toolgate
# The images: hack/images runs the Dockerfile's go builds and assembles its
# stages (plus the local cluster's tools and pause images).
# The e2e suite's stand-in for an external HTTPS API goes in the tools image.
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o _output/bin/standin-api ./test/standin-api
# An MCP server nobody here wrote, for the e2e's MCP tools: the Go SDK's
# example, from the module proxy at the version go.mod pins.
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o _output/bin/mcp-everything github.com/modelcontextprotocol/go-sdk/examples/server/everything
# npm MCP servers nobody here wrote (test/mcpservers, pinned by its lock
# file; installed once, cached) and node with the libraries it links: the
# mcp-node image, as a team would build one for its npm server.
modules=$(hack/npm-clients.sh test/mcpservers | tail -1)
node=$(readlink -f "$(command -v node)")
libs=$(ldd "$node" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\/.*ld-linux/ {print $1}' | sort -u | paste -sd, -)
go run ./hack/images -dockerfile Dockerfile -bin _output/bin -out _output/images \
  -tools-extra /bin/standin-api=_output/bin/standin-api,/bin/mcp-everything=_output/bin/mcp-everything \
  -node-files "/usr/bin/node=$node,$libs" -node-modules "$modules"
# Into every node's containerd (hack/node-up.sh adds nodes).
for sock in "$CONTAINERD_SOCK" "$CLUSTER_DIR"/nodes/node*/containerd/containerd.sock; do
  [ -S "$sock" ] || continue
  for f in _output/images/*.tar; do
    "$NODE_BIN/ctr" --address "$sock" -n k8s.io images import "$f" >/dev/null
  done
done
