#!/usr/bin/env bash
# Copies fla's Python package (fla-org/flash-linear-attention) from a fetched git mirror into the
# git-ignored .device/fla/ so that tests/gpu/fla_benchmark.py can time fla's Triton kernels on the
# GPU machine next to linfer's. fla's code is never committed to this repository.
#   1. fetch the mirror with the device library's `fetch` tool: github:fla-org/flash-linear-attention
#   2. bash tests/gpu/fetch_fla.sh [/work/.mirror/fla-org+flash-linear-attention/repo]
# Only fla/ops, fla/modules and fla/utils are copied; fla/__init__.py and fla/ops/__init__.py are
# replaced by stubs so that importing fla.ops.gated_delta_rule loads the GDN kernels alone (not
# fla's layers and models, which need `transformers`).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
mirror=${1:-/work/.mirror/fla-org+flash-linear-attention/repo}
dest=$root/.device/fla
if ! git --git-dir="$mirror" rev-parse --verify -q HEAD >/dev/null; then
  echo "no git mirror at $mirror: fetch github:fla-org/flash-linear-attention first" >&2
  exit 1
fi
rm -rf "$dest"
mkdir -p "$dest"
git --git-dir="$mirror" archive HEAD fla/ops fla/modules fla/utils LICENSE | tar -x -C "$dest"
version=$(git --git-dir="$mirror" show HEAD:fla/__init__.py | sed -n 's/^__version__ = "\(.*\)"/\1/p')
cat > "$dest/fla/__init__.py" <<PY
# Stub written by linfer's tests/gpu/fetch_fla.sh: fla's own __init__ imports its layers and models.
__version__ = "$version"
PY
cat > "$dest/fla/ops/__init__.py" <<'PY'
# Stub written by linfer's tests/gpu/fetch_fla.sh: import the op packages you need directly.
PY
git --git-dir="$mirror" rev-parse HEAD > "$dest/COMMIT"
echo "fla $version at $(cat "$dest/COMMIT") -> $dest ($(du -sh "$dest" | cut -f1))"
