#!/usr/bin/env bash
# Installs the real MCP clients the tests run (test/mcpclients), or the
# real MCP servers (test/mcpservers), versions pinned by the directory's
# package-lock.json, from the npm registry into the per-user cache, once
# per lock file, and links them as the directory's node_modules. Node 20
# and npm come from Debian when the machine lacks them.
#
# Usage: hack/npm-clients.sh [DIR]   (DIR: test/mcpclients by default;
# prints the node_modules path on its last line)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=hack/versions.sh
source "$root/hack/versions.sh"
src="${1:-$root/test/mcpclients}"
name=$(basename "$src")

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "installing node and npm (Debian packages)" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
fi
major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$major" -lt 20 ]; then
  echo "node $major is too old: the MCP clients need node 20 or later" >&2
  exit 1
fi

lock=$(sha256sum "$src/package-lock.json" | cut -c1-16)
dir="$(k8s_cache_root)/npm/$name-$lock"
if [ ! -f "$dir/.installed" ]; then
  echo "installing the npm packages of $name/package-lock.json (cached in $dir)" >&2
  rm -rf "$dir"
  mkdir -p "$dir"
  cp "$src/package.json" "$src/package-lock.json" "$dir/"
  # --ignore-scripts: nothing from the registry runs at install time.
  (cd "$dir" && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error >&2)
  touch "$dir/.installed"
fi
ln -sfn "$dir/node_modules" "$src/node_modules"
echo "$src/node_modules"
