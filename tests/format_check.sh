#!/usr/bin/env bash
# Fails when a C++/CUDA source under the project's folders is not clang-format clean.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
mapfile -t files < <(find common kernels models engine server cli tests \
  \( -name '*.h' -o -name '*.cc' -o -name '*.cu' -o -name '*.cuh' \) -not -path '*/node_modules/*' | sort)
clang-format --dry-run -Werror "${files[@]}"
echo "clang-format: ${#files[@]} files clean"
