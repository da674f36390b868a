#!/usr/bin/env bash
# Builds the fuzz harnesses with clang + libFuzzer + ASan/UBSan in their own build directory and
# runs each, one at a time, on a copy of its seed corpus. Exits non-zero on any crash, leak,
# timeout or out-of-memory; the reproducers stay in BUILD_DIR/fuzz-artifacts/<target>/.
#
# usage: tests/fuzz/run_fuzzers.sh [SECONDS_PER_TARGET] [BUILD_DIR] [TARGET...]
#   SECONDS_PER_TARGET  default 60
#   BUILD_DIR           default <repo>/build-fuzz (only the fuzz targets and their libraries
#                       are built; configuring takes seconds)
#   TARGET              default: every harness (tests/fuzz/<target>_fuzzer.cc)
# Environment: JOBS (build parallelism, default 2), FUZZ_ARGS (extra libFuzzer flags).
set -euo pipefail

seconds=${1:-60}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${2:-$root/build-fuzz}
shift $(($# < 2 ? $# : 2))
targets=("$@")
if [[ ${#targets[@]} -eq 0 ]]; then
  for f in "$root"/tests/fuzz/*_fuzzer.cc; do
    f=$(basename "$f")
    targets+=("${f%_fuzzer.cc}")
  done
fi

mkdir -p "$build"
build=$(cd "$build" && pwd)
echo "fuzz: configuring $build (clang, LINFER_FUZZ=ON)"
CC=clang CXX=clang++ cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_FLAGS="-gline-tables-only" -DLINFER_FUZZ=ON -DLINFER_CUDA=OFF \
  -DLINFER_BUILD_BENCHMARKS=OFF >"$build/fuzz-configure.log" 2>&1 ||
  { tail -20 "$build/fuzz-configure.log"; exit 1; }
echo "fuzz: building ${targets[*]}"
cmake --build "$build" -j"${JOBS:-2}" --target "${targets[@]/#/fuzz_}" >"$build/fuzz-build.log" 2>&1 ||
  { grep -E "error|Error" "$build/fuzz-build.log" | head -20; exit 1; }

failed=()
for t in "${targets[@]}"; do
  corpus=$build/fuzz-corpus/$t
  artifacts=$build/fuzz-artifacts/$t
  log=$build/fuzz-logs/$t.log
  rm -rf "$corpus" && mkdir -p "$corpus" "$artifacts" "$(dirname "$log")"
  cp -r "$root/tests/fuzz/corpus/$t/." "$corpus/"
  dict=()
  [[ -f $root/tests/fuzz/$t.dict ]] && dict=(-dict="$root/tests/fuzz/$t.dict")
  echo "fuzz: $t for ${seconds}s (log $log)"
  # -timeout: one input taking this long is a hang; -rss_limit_mb: a blow-up is a finding.
  # shellcheck disable=SC2086
  if "$build/tests/fuzz/fuzz_$t" -max_total_time="$seconds" -print_final_stats=1 -timeout=20 \
    -rss_limit_mb=2048 -artifact_prefix="$artifacts/" "${dict[@]}" ${FUZZ_ARGS:-} "$corpus" \
    >"$log" 2>&1; then
    grep -E "^#[0-9]+[[:space:]]+DONE" "$log" | tail -1 || true
    grep -E "stat::(number_of_executed_units|peak_rss_mb)" "$log" || true
  else
    failed+=("$t")
    tail -40 "$log"
    echo "fuzz: $t FAILED; reproducer(s):"
    ls -1 "$artifacts"/* 2>/dev/null | sed 's/^/  /'
  fi
done

if [[ ${#failed[@]} -gt 0 ]]; then
  echo "fuzz: FAILED: ${failed[*]} (artifacts under $build/fuzz-artifacts)"
  exit 1
fi
echo "fuzz: all targets clean (${targets[*]}, ${seconds}s each)"
