#!/usr/bin/env bash
# The test command: installs what is missing, configures, builds (warnings are errors), checks
# formatting, runs the whole suite with ctest, runs the engine's and the server's C++ tests again
# under AddressSanitizer + UndefinedBehaviorSanitizer, and fuzzes every parser for a short bounded time
# (libFuzzer + ASan/UBSan) on top of the corpus replays ctest already ran.
# Usage: bash tests/run.sh [ctest args...]
#   LINFER_SKIP_SANITIZERS=1 skips the sanitizer stage; LINFER_FUZZ_SECONDS (default 30) is the
#   fuzzing time per harness, 0 skips it.
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
    -DLINFER_SANITIZE=address,undefined -DLINFER_BUILD_BENCHMARKS=OFF -DLINFER_CUDA=OFF >/dev/null
  cmake --build "$asan" -j "$jobs" --target engine_test engine_stress_test engine_hardening_test \
    engine_hybrid_test engine_prefix_cache_test engine_decode_graphs_test engine_sampler_test \
    models_host_memory_test http_server_test server_test openai_test
  /usr/bin/python3 "$root/tests/models/reference/make_fixtures.py" --out "$asan/testdata/fla" >/dev/null
  /usr/bin/python3 "$root/tests/models/reference/make_hybrid_fixtures.py" --out "$asan/testdata/hybrid" \
    --only qwen35_text_f32 gdn_hybrid_full gdn_hybrid_window qwen35_vlm_bf16_tied >/dev/null
  /usr/bin/python3 "$root/tests/models/reference/make_family_fixtures.py" --out "$asan/testdata/families" \
    >/dev/null
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
  "$asan/tests/engine/engine_test" --gtest_brief=1
  "$asan/tests/engine/engine_stress_test" --gtest_brief=1
  "$asan/tests/engine/engine_hardening_test" --gtest_brief=1
  "$asan/tests/engine/engine_hybrid_test" --gtest_brief=1
  "$asan/tests/engine/engine_prefix_cache_test" --gtest_brief=1
  "$asan/tests/engine/engine_decode_graphs_test" --gtest_brief=1
  "$asan/tests/engine/engine_sampler_test" --gtest_brief=1
  "$asan/tests/models/models_host_memory_test" --gtest_brief=1
  "$asan/tests/server/http_server_test" --gtest_brief=1
  "$asan/tests/server/server_test" --gtest_brief=1
  "$asan/tests/server/openai_test" --gtest_brief=1
  echo "sanitizers: engine and server tests clean under address,undefined"
fi

fuzz_seconds=${LINFER_FUZZ_SECONDS:-30}
if [[ "$fuzz_seconds" != 0 ]]; then
  bash "$root/tests/fuzz/run_fuzzers.sh" "$fuzz_seconds" "$build-fuzz"
fi
