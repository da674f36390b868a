#!/usr/bin/env bash
# Builds the fuzz harnesses with clang + libFuzzer + ASan/UBSan in their own build directory and
# runs each on a copy of its seed corpus, FUZZ_JOBS at a time. Exits non-zero on any crash, leak,
# timeout or out-of-memory; the reproducers stay in BUILD_DIR/fuzz-artifacts/<target>/.
#
# usage: tests/fuzz/run_fuzzers.sh [SECONDS_PER_TARGET] [BUILD_DIR] [TARGET...]
#   SECONDS_PER_TARGET  default 60
#   BUILD_DIR           default <repo>/build-fuzz (only the fuzz targets and their libraries
#                       are built; configuring takes seconds)
#   TARGET              default: every harness (tests/fuzz/<target>_fuzzer.cc)
# Environment: JOBS (build parallelism, default 2), FUZZ_JOBS (harnesses run at once, default
# JOBS), FUZZ_ARGS (extra libFuzzer flags).
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
# A build directory already configured with LINFER_FUZZ=ON (tests/run.sh's sanitizer build, which
# also holds the ASan tests) is used as it is; any other is configured here.
if grep -qs '^LINFER_FUZZ:BOOL=ON' "$build/CMakeCache.txt"; then
  echo "fuzz: using $build (configured with LINFER_FUZZ=ON)"
else
  echo "fuzz: configuring $build (clang, LINFER_FUZZ=ON)"
  CC=clang CXX=clang++ cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CXX_FLAGS="-gline-tables-only" -DLINFER_FUZZ=ON -DLINFER_CUDA=OFF \
    -DLINFER_BUILD_BENCHMARKS=OFF >"$build/fuzz-configure.log" 2>&1 ||
    { tail -20 "$build/fuzz-configure.log"; exit 1; }
fi
echo "fuzz: building ${targets[*]}"
cmake --build "$build" -j"${JOBS:-2}" --target "${targets[@]/#/fuzz_}" >"$build/fuzz-build.log" 2>&1 ||
  { grep -E "error|Error" "$build/fuzz-build.log" | head -20; exit 1; }

# fuzz_one TARGET: fuzzes TARGET on a fresh copy of its seed corpus; its exit status is the
# harness's. Output goes to its log only (the runs overlap); the loop below reports it.
fuzz_one() {
  local t=$1 corpus=$build/fuzz-corpus/$1 artifacts=$build/fuzz-artifacts/$1
  local log=$build/fuzz-logs/$1.log dict=()
  rm -rf "$corpus" && mkdir -p "$corpus" "$artifacts" "$(dirname "$log")"
  cp -r "$root/tests/fuzz/corpus/$t/." "$corpus/"
  [[ -f $root/tests/fuzz/$t.dict ]] && dict=(-dict="$root/tests/fuzz/$t.dict")
  # -timeout: one input taking this long is a hang; -rss_limit_mb: a blow-up is a finding.
  # shellcheck disable=SC2086
  "$build/tests/fuzz/fuzz_$t" -max_total_time="$seconds" -print_final_stats=1 -timeout=20 \
    -rss_limit_mb=2048 -artifact_prefix="$artifacts/" "${dict[@]}" ${FUZZ_ARGS:-} "$corpus" \
    >"$log" 2>&1
}

# The harnesses are single-threaded: FUZZ_JOBS (default JOBS, 2) of them run at once, each for the
# whole SECONDS.
jobs=${FUZZ_JOBS:-${JOBS:-2}}
echo "fuzz: ${#targets[@]} targets, ${seconds}s each, $jobs at a time (logs $build/fuzz-logs/)"
declare -A pid_of
for t in "${targets[@]}"; do
  while (($(jobs -rp | wc -l) >= jobs)); do wait -n || true; done
  fuzz_one "$t" &
  pid_of[$t]=$!
done

failed=()
for t in "${targets[@]}"; do
  log=$build/fuzz-logs/$t.log
  if wait "${pid_of[$t]}"; then
    echo "fuzz: $t clean: $(grep -E "^#[0-9]+[[:space:]]+DONE" "$log" | tail -1)"
    grep -E "stat::(number_of_executed_units|peak_rss_mb)" "$log" || true
  else
    failed+=("$t")
    tail -40 "$log"
    echo "fuzz: $t FAILED; reproducer(s):"
    ls -1 "$build/fuzz-artifacts/$t"/* 2>/dev/null | sed 's/^/  /'
  fi
done

if [[ ${#failed[@]} -gt 0 ]]; then
  echo "fuzz: FAILED: ${failed[*]} (artifacts under $build/fuzz-artifacts)"
  exit 1
fi
echo "fuzz: all targets clean (${targets[*]}, ${seconds}s each)"
