#!/usr/bin/env bash
# Fails when regeneration changed a tracked file or left a new untracked one:
# generated code and manifests must be committed as generated.
set -euo pipefail
cd "$(dirname "$0")/.."
status=$(git status --porcelain --untracked-files=all)
if [ -n "$status" ]; then
  echo "verify: the tree differs from the commit after regeneration:" >&2
  echo "$status" >&2
  git --no-pager diff --stat >&2
  echo "run 'make generate manifests fmt' and commit the result" >&2
  exit 1
fi
echo "verify: generated code and manifests match the commit"
