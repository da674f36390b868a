#!/usr/bin/env bash
# The run command: installs what is missing, builds linfer (Release) and runs it.
# Usage: bash deploy/run.sh [linfer arguments...]   (default: `linfer serve`, the bundled model)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${LINFER_BUILD_DIR:-$root/build}

bash "$root/deploy/setup.sh"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j "$(nproc)" --target linfer >/dev/null
if (($# == 0)); then set -- serve; fi
cd "$root"
exec "$build/bin/linfer" "$@"
