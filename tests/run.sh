#!/usr/bin/env bash
# The test command: installs what is missing, configures, builds (warnings are errors), checks
# formatting, runs the whole suite with ctest, runs the engine's and the server's C++ tests again
# under AddressSanitizer + UndefinedBehaviorSanitizer, and fuzzes every parser for a short bounded time
# (libFuzzer + ASan/UBSan) on top of the corpus replays ctest already ran. The sanitizer tests and
# the fuzz harnesses come from one clang build at -O1 with line tables (BUILD-san): on two cores it
# takes about a third of what GCC's -O2 -g sanitizer build and a separate fuzz build took together.
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

sanitizers=1
[[ "${LINFER_SKIP_SANITIZERS:-0}" == 1 ]] && sanitizers=0
fuzz_seconds=${LINFER_FUZZ_SECONDS:-30}
san="$build-san"
if [[ $sanitizers == 1 || "$fuzz_seconds" != 0 ]]; then
  # -Wno-pass-failed: at -O1 clang does not vectorize the `omp simd` loops and says so.
  CC=clang CXX=clang++ cmake -S "$root" -B "$san" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only -DNDEBUG" \
    -DCMAKE_CXX_FLAGS="-Wno-pass-failed" -DLINFER_WERROR=ON -DLINFER_SANITIZE=address,undefined \
    -DLINFER_FUZZ=ON -DLINFER_BUILD_BENCHMARKS=OFF -DLINFER_CUDA=OFF >/dev/null
fi

if [[ $sanitizers == 1 ]]; then
  san_tests=(engine/engine_test engine/engine_stress_test engine/engine_hardening_test
    engine/engine_hybrid_test engine/engine_prefix_cache_test engine/engine_decode_graphs_test
    engine/engine_sampler_test engine/engine_structured_test models/models_host_memory_test
    models/models_parse_test
    server/http_server_test server/http_connections_test server/request_framing_test server/server_test server/openai_test)
  cmake --build "$san" -j "$jobs" --target "${san_tests[@]##*/}"
  /usr/bin/python3 "$root/tests/models/reference/make_fixtures.py" --out "$san/testdata/fla" >/dev/null
  /usr/bin/python3 "$root/tests/models/reference/make_hybrid_fixtures.py" --out "$san/testdata/hybrid" \
    --only qwen35_text_f32 gdn_hybrid_full gdn_hybrid_window qwen35_vlm_bf16_tied qwen35moe_text_fused \
    qwen35moe_vlm_bf16_per_expert qwen3next_f32 qwen3next_bf16_step2_unnormed qwen35moe_vlm_fp8_fused \
    >/dev/null
  /usr/bin/python3 "$root/tests/models/reference/make_family_fixtures.py" --out "$san/testdata/families" \
    >/dev/null
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
  for t in "${san_tests[@]}"; do
    "$san/tests/$t" --gtest_brief=1
  done
  echo "sanitizers: engine and server tests clean under address,undefined"
fi

if [[ "$fuzz_seconds" != 0 ]]; then
  bash "$root/tests/fuzz/run_fuzzers.sh" "$fuzz_seconds" "$san"
fi
