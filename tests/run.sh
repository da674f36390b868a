#!/usr/bin/env bash
# The test command: installs what is missing, configures, builds (warnings are errors), checks
# formatting, and runs the whole suite with ctest. Usage: bash tests/run.sh [ctest args...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${LINFER_BUILD_DIR:-$root/build}
jobs=${LINFER_JOBS:-$(nproc)}

bash "$root/deploy/setup.sh"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DLINFER_WERROR=ON
cmake --build "$build" -j "$jobs"
cd "$build"
ctest --output-on-failure -j "$jobs" "$@"
