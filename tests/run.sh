#!/usr/bin/env bash
# The test command: installs what is missing, configures, builds (warnings are errors), checks
# formatting, runs the whole suite with ctest, then runs the engine's stress and session tests
# again under AddressSanitizer + UndefinedBehaviorSanitizer.
# Usage: bash tests/run.sh [ctest args...]   (LINFER_SKIP_SANITIZERS=1 skips the second part)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${LINFER_BUILD_DIR:-$root/build}
jobs=${LINFER_JOBS:-$(nproc)}

bash "$root/deploy/setup.sh"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DLINFER_WERROR=ON
cmake --build "$build" -j "$jobs"
(cd "$build" && ctest --output-on-failure -j "$jobs" "$@")

if [[ "${LINFER_SKIP_SANITIZERS:-0}" != 1 ]]; then
  asan="$build-asan"
  cmake -S "$root" -B "$asan" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLINFER_WERROR=ON \
    -DLINFER_SANITIZE=address,undefined -DLINFER_BUILD_BENCHMARKS=OFF >/dev/null
  cmake --build "$asan" -j "$jobs" --target engine_test engine_stress_test
  /usr/bin/python3 "$root/tests/models/reference/make_fixtures.py" --out "$asan/testdata/fla" >/dev/null
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
  "$asan/tests/engine/engine_test" --gtest_brief=1
  "$asan/tests/engine/engine_stress_test" --gtest_brief=1
  echo "sanitizers: engine_test and engine_stress_test clean under address,undefined"
fi
