#!/usr/bin/env bash
# Runs linfer's CUDA checks and benchmarks on the GPU machine of the device tool, from the
# repository root, with .device/linfer-gpu (tests/gpu/pack.sh) and .device/fla
# (tests/gpu/fetch_fla.sh) carried. tests/gpu/README.md has the exact `run` calls.
#   bash tests/gpu/run_on_gpu.sh [stage ...]     stages, in this order by default:
#     env       GPU, driver, toolkit and library resolution       -> env.log
#     tests     every kernel test (CUDA instances included)       -> tests.log
#     bench     linfer's CUDA benchmark                           -> bench.log, bench.json
#     fla       fla's Triton kernels on the same shapes           -> fla.json (log: bench.log)
#     sanitize  compute-sanitizer memcheck + racecheck on tests   -> sanitize.log
#   and, not in the default list (its own call: it needs most of a call's time):
#     engine    the model and engine tests on the GPU (fixtures generated here with numpy), the
#               GPU stress run, engine_benchmark on a random 1.3B GDN and the Qwen3.5-0.8B shape
#                                                                 -> engine.log
#     serve     `linfer serve --device cuda` on the Qwen3.5-0.8B shape, driven by linfer_bench
#               over gRPC: throughput vs concurrency with TTFT/ITL percentiles, and multi-turn
#               follow-ups with sessions vs re-sent history at 4k and 32k tokens
#                                                                 -> serve.log, serve_*.json
#     profile   Nsight Compute: GPU time per kernel of the prefill, decode and engine steps
#                                                                 -> profile.log
# and summary.md (linfer next to fla) whenever bench.json or fla.json exist. At most 8 files land
# in $OUT, as the device tool returns. Stages share a time budget (RUN_BUDGET seconds, default 570)
# so that the command ends inside the tool's 600 s limit with its logs written. Reruns of variants
# an earlier GPU run already decided (tests/bench/RESULTS.md) run only with RERUN_DECIDED=1: a
# session's 15 minutes of device time go to what has never run.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root" || exit 1
OUT=${OUT:-$root/.device/out}
mkdir -p "$OUT"
# The pack (tests/gpu/pack.sh) is one tarball; unpack it once per machine.
pkg=/tmp/linfer-gpu
if [[ ! -x "$pkg/bin/kernels_test" ]]; then
  mkdir -p "$pkg" && tar -xJf "$root/.device/linfer-gpu/linfer-gpu.tar.xz" -C "$pkg" ||
    echo "cannot unpack .device/linfer-gpu/linfer-gpu.tar.xz: was it carried?" >&2
fi
start=$(date +%s)
budget=${RUN_BUDGET:-570}
stages=("$@")
((${#stages[@]})) || stages=(env tests bench fla sanitize)

# Seconds left for a stage: its own cap or what is left of the budget (minus 10 s for the summary).
left() {
  local cap=$1 rest=$((budget - ($(date +%s) - start) - 10))
  ((rest < cap)) && cap=$rest
  ((cap < 1)) && cap=1
  echo "$cap"
}

# The CUDA runtime and cuBLASLt come from this machine (the pack leaves them out).
cuda_dirs=""
for lib in libcudart.so.13 libcublasLt.so.13; do
  dir=""
  for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib; do
    [[ -e "$d/$lib" ]] && dir=$d && break
  done
  if [[ -z "$dir" ]]; then
    path=$(ldconfig -p 2>/dev/null | awk -v l="$lib" '$1 == l {print $NF; exit}')
    [[ -z "$path" ]] && path=$(find /usr /opt -name "$lib" 2>/dev/null | head -1)
    [[ -n "$path" ]] && dir=$(dirname "$path")
  fi
  [[ -n "$dir" && ":$cuda_dirs:" != *":$dir:"* ]] && cuda_dirs=$cuda_dirs:$dir
done
export LD_LIBRARY_PATH="$pkg/lib$cuda_dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
tests=$pkg/bin/kernels_test
bench=$pkg/bin/cuda_recurrence_benchmark
cuda_filter='*/cuda:CudaGraphTest.*:DeviceContextTest.*:LaunchKernelTest.*:OpTimerTest.*'
# engine_test's reruns under kernel variants leave out the session-state tests (eager steps, many
# rounds; what they check does not depend on the variants).
rerun_filter='Devices/*:-*SessionReplyTest*:*SessionCheckpointTest*'

stage_env() {
  {
    date -u
    nvidia-smi || true
    nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm,clocks.mem,power.limit \
      --format=csv || true
    nvcc --version 2>/dev/null | tail -2
    compute-sanitizer --version 2>/dev/null | head -2
    python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
    echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
    cat "$pkg/MANIFEST"
    sed "s/^/fla commit /" .device/fla/COMMIT 2>/dev/null
    for b in "$tests" "$bench"; do
      echo "== ldd $(basename "$b")"
      ldd "$b" | grep -E 'not found|cuda|cublas' || true
    done
  } >"$OUT/env.log" 2>&1
  tail -30 "$OUT/env.log"
}

# One rerun with opt-in settings, appended to LOG under the header "== SETTINGS" (summarize.py
# keys its per-variant tables on it); prints LABEL's exit status.
#   rerun LOG CAP LABEL "VAR=value ..." BINARY ARGS...
rerun() {
  local log=$1 cap=$2 label=$3 settings=$4
  shift 4
  echo "== $settings" >>"$log"
  # shellcheck disable=SC2086  # the settings split into env's assignments
  env $settings timeout "$(left "$cap")" "$@" >>"$log" 2>&1
  echo "$label: exit $?"
}

stage_tests() {
  local log=$OUT/tests.log rec='*Recurrence*:*ChunkedEqualsRecurrent*'
  timeout "$(left 240)" "$tests" --gtest_brief=1 >"$log" 2>&1
  echo "tests: exit $? ($(grep -cE '^\[  FAILED  \] [A-Za-z]' "$log") failed)"
  # First what no GPU has run yet: every CUDA test under programmatic dependent launch
  # (kernels/cuda/launch.cuh), the wide, wide64 and dense decode steps, bf16 states by cp.async,
  # the staged and flash tensor-core attention.
  rerun "$log" 120 "every CUDA test, programmatic dependent launch" "LINFER_CUDA_PDL=on" "$tests" \
    --gtest_brief=1 --gtest_filter="$cuda_filter"
  # The decided variants (RERUN_DECIDED=1) join these loops.
  local steps=(wide wide64 dense) modes=(staged flash)
  [[ ${RERUN_DECIDED:-0} == 1 ]] && steps+=(registers pipe) && modes+=(tiled)
  for step in "${steps[@]}"; do
    rerun "$log" 60 "recurrence tests, $step step" "LINFER_CUDA_STEP=$step" "$tests" \
      --gtest_brief=1 --gtest_filter='*Recurrence*:*GdnPrep*'
  done
  rerun "$log" 40 "recurrence tests, bf16 states by cp.async" "LINFER_CUDA_STEP_BF16=async" \
    "$tests" --gtest_brief=1 --gtest_filter='*Recurrence*'
  rerun "$log" 40 "recurrence tests, wide step, bf16 states by cp.async" \
    "LINFER_CUDA_STEP=wide LINFER_CUDA_STEP_BF16=async" "$tests" --gtest_brief=1 \
    --gtest_filter='*Recurrence*'
  for mode in "${modes[@]}"; do
    rerun "$log" 60 "attention tests, $mode kernel" "LINFER_CUDA_ATTENTION=$mode" "$tests" \
      --gtest_brief=1 --gtest_filter='*AttentionTest*'
  done
  # Decode attention with a warp per kv head's query heads (LINFER_CUDA_DECODE_ATTENTION=grouped,
  # twelfth session): the attention tests (Qwen3.5's 8/2 x 256 decode among them).
  rerun "$log" 60 "attention tests, grouped decode attention" \
    "LINFER_CUDA_DECODE_ATTENTION=grouped" "$tests" --gtest_brief=1 --gtest_filter='*AttentionTest*'
  # The MoE experts both ways (eighteenth session; auto takes the grouped GEMMs from 8 pairs an
  # expert, so the default run already mixes them): every MoE test on each path alone.
  for moe in gemv grouped; do
    rerun "$log" 30 "MoE tests, $moe path" "LINFER_CUDA_MOE=$moe" "$tests" --gtest_brief=1 \
      --gtest_filter='*Moe*'
  done
  # fp8 weights kept as stored (twenty-first session, never run): the default run takes the fp8
  # GEMV at 1-32 rows and the tensor-core kernel at 33-256; here every fp8 test with the weights
  # widened to bf16 for cuBLASLt instead, and with the tensor-core kernel wherever it fits.
  for fp8 in dequantize mma; do
    rerun "$log" 30 "fp8 tests, LINFER_CUDA_FP8=$fp8" "LINFER_CUDA_FP8=$fp8" "$tests" \
      --gtest_brief=1 --gtest_filter='*Fp8*'
  done
  # The GEMV with 4 columns a warp from 3 rows on (LINFER_CUDA_GEMV_COLS, eleventh session), and
  # with 4 at every row count.
  for cols in auto 4; do
    rerun "$log" 60 "linear tests, GEMV kernel, $cols columns" \
      "LINFER_CUDA_GEMV=1 LINFER_CUDA_GEMV_COLS=$cols" "$tests" --gtest_brief=1 \
      --gtest_filter='*Linear*:*Bf16Inputs*'
  done
  # The GEMV under PDL: its weight rows prefetched into L2 before it waits (GemvPrefetch) run only
  # with both switches on, and no other correctness test takes them together.
  rerun "$log" 40 "linear tests, GEMV kernel under PDL" "LINFER_CUDA_GEMV=1 LINFER_CUDA_PDL=on" \
    "$tests" --gtest_brief=1 --gtest_filter='*Linear*:*Bf16Inputs*'
  # cuBLASLt's candidates timed at the decode buckets' row counts (LINFER_CUDA_GEMM_TUNE=1,
  # kernels/cuda/gemm_tune.cuh; twelfth session): GemmTuningTimesEachDecodeBucketOnce runs only here.
  rerun "$log" 60 "linear tests, tuned cuBLASLt algorithms" "LINFER_CUDA_GEMM_TUNE=1" "$tests" \
    --gtest_brief=1 --gtest_filter='*Linear*:*Bf16Inputs*'
  # Variants an H200 run already passed (ba0e522), again only with RERUN_DECIDED=1 (with the
  # tiled attention and the registers and pipe steps in the loops above): the plain and split
  # scans, chunk_prep's blocked (I + A)⁻¹.
  if [[ ${RERUN_DECIDED:-0} == 1 ]]; then
    for scan in plain split; do
      rerun "$log" 60 "recurrence tests, $scan scan" "LINFER_CUDA_SCAN=$scan" "$tests" \
        --gtest_brief=1 --gtest_filter="$rec"
    done
    for scan in pipelined split; do
      rerun "$log" 60 "recurrence tests, blocked inverse, $scan scan" \
        "LINFER_CUDA_PREP=blocked LINFER_CUDA_SCAN=$scan" "$tests" --gtest_brief=1 \
        --gtest_filter="$rec:*GdnPrep*"
    done
  fi
  tail -25 "$log"
}

stage_bench() {
  local log=$OUT/bench.log
  timeout "$(left 240)" "$bench" --benchmark_out="$OUT/bench.json" --benchmark_out_format=json \
    >"$log" 2>&1
  echo "bench: exit $?"
  # Reruns appended to bench.log (the tool brings back 8 files), each against the default run.
  # New first: the wide, wide64 and dense decode steps (f32; wide with bf16 by cp.async too), bf16
  # states by cp.async, the staged and flash tensor-core attention (with the simple kernel: the
  # ratio's base).
  local steps=(wide wide64 dense) modes=(simple staged flash)
  [[ ${RERUN_DECIDED:-0} == 1 ]] && steps+=(registers pipe) && modes+=(tiled)
  for step in "${steps[@]}"; do
    rerun "$log" 60 "bench (decode, $step step)" "LINFER_CUDA_STEP=$step" "$bench" \
      --benchmark_filter='^Decode/'
  done
  rerun "$log" 40 "bench (decode, bf16 states by cp.async)" "LINFER_CUDA_STEP_BF16=async" \
    "$bench" --benchmark_filter='^Decode/.*/BF16/'
  rerun "$log" 40 "bench (decode, wide step, bf16 states by cp.async)" \
    "LINFER_CUDA_STEP=wide LINFER_CUDA_STEP_BF16=async" "$bench" --benchmark_filter='^Decode/.*/BF16/'
  for mode in "${modes[@]}"; do
    rerun "$log" 90 "bench (attention, $mode kernels)" "LINFER_CUDA_ATTENTION=$mode" "$bench" \
      --benchmark_filter='^Attention/'
  done
  # Decode attention, a warp per kv head's query heads (LINFER_CUDA_DECODE_ATTENTION=grouped)
  # against a warp per query head (the default run): KV bytes / copy after 4k and 32k keys.
  rerun "$log" 40 "bench (attention decode, grouped heads)" "LINFER_CUDA_DECODE_ATTENTION=grouped" \
    "$bench" --benchmark_filter='^Attention/decode/'
  # The GEMV against cuBLASLt (the default run): 4 columns a warp from 3 rows on (new), and the
  # 2 columns the ba0e522 run timed (0.24-0.57x cuBLASLt at 4 and 8 rows).
  for cols in auto 2; do
    rerun "$log" 40 "bench (linear, GEMV kernel, $cols columns)" \
      "LINFER_CUDA_GEMV=1 LINFER_CUDA_GEMV_COLS=$cols" "$bench" --benchmark_filter='^Linear/'
  done
  # The MoE layer's experts on each path alone (the default run: auto), 1 to 256 tokens.
  for moe in gemv grouped; do
    rerun "$log" 30 "bench (MoE experts, $moe path)" "LINFER_CUDA_MOE=$moe" "$bench" \
      --benchmark_filter='^Moe/'
  done
  # fp8 weights (twenty-first session): the default run's Linear/*-fp8 rows (GEMV at 1-32 rows,
  # tensor cores at 64) against the same products widened to bf16 for cuBLASLt, and against the
  # tensor-core kernel at every row count.
  for fp8 in dequantize mma; do
    rerun "$log" 30 "bench (linear, fp8 weights, LINFER_CUDA_FP8=$fp8)" "LINFER_CUDA_FP8=$fp8" \
      "$bench" --benchmark_filter='^Linear/.*-fp8/'
  done
  # cuBLASLt with its candidates timed (LINFER_CUDA_GEMM_TUNE=1) against its heuristic's pick.
  rerun "$log" 40 "bench (linear, tuned cuBLASLt algorithms)" "LINFER_CUDA_GEMM_TUNE=1" "$bench" \
    --benchmark_filter='^Linear/'
  # Decided by the H200 run at ba0e522, again only with RERUN_DECIDED=1 (with the tiled attention
  # and the registers and pipe steps in the loops above): the plain and split scans, the
  # blocked inverse, the split scan's value tiles.
  if [[ ${RERUN_DECIDED:-0} == 1 ]]; then
    for scan in plain split; do
      rerun "$log" 60 "bench (prefill, $scan scan)" "LINFER_CUDA_SCAN=$scan" "$bench" \
        --benchmark_filter='^Prefill/'
    done
    for scan in pipelined split; do
      rerun "$log" 40 "bench (prefill, blocked inverse, $scan scan)" \
        "LINFER_CUDA_PREP=blocked LINFER_CUDA_SCAN=$scan" "$bench" \
        --benchmark_filter='^Prefill/.*/cold'
    done
    for tile in 16 32 64; do
      rerun "$log" 40 "bench (prefill, split scan, value tile $tile)" \
        "LINFER_CUDA_SCAN=split LINFER_CUDA_SCAN_TILE=$tile" "$bench" \
        --benchmark_filter='^Prefill/.*/cold'
    done
  fi
  grep -E '^== |^Attention/.*warm|^Prefill/.*cold|^Decode/.*F32/cold|^Linear/.*cold' "$log" |
    tail -60
}

stage_fla() {
  PYTHONPATH=$root/.device/fla${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 \
    timeout "$(left 400)" python3 tests/gpu/fla_benchmark.py --out "$OUT/fla.json" \
    >/tmp/linfer-fla.log 2>&1
  echo "fla: exit $?"
  { echo "== fla_benchmark.py"; cat /tmp/linfer-fla.log; } >>"$OUT/bench.log"
  tail -5 /tmp/linfer-fla.log
}

stage_sanitize() {
  {
    echo "== memcheck (every CUDA test)"
    timeout "$(left 300)" compute-sanitizer --tool memcheck --error-exitcode 9 "$tests" \
      --gtest_filter="$cuda_filter" --gtest_brief=1
    echo "memcheck exit $?"
    echo "== racecheck (shared-memory hazards: recurrence, GdnPrep step, pre-sampler, MoE and fp8 kernels)"
    timeout "$(left 240)" compute-sanitizer --tool racecheck --error-exitcode 9 "$tests" \
      --gtest_filter='Devices/DeviceRecurrenceTest.*/cuda:Devices/PresampleDeviceTest.*/cuda:Devices/GdnPrepTest.RecurrentModeFoldsLongSegments/cuda:Devices/DeviceMoeTest.*/cuda:Devices/DeviceFp8Test.RowSlicesKeepTheirScales/cuda:Devices/DeviceFp8Test.MoeExpertsMatchTheDequantizedValues/cuda' \
      --gtest_brief=1
    echo "racecheck exit $?"
    echo "== memcheck and racecheck, recurrence tests, split scan (LINFER_CUDA_SCAN=split)"
    for tool in memcheck racecheck; do
      LINFER_CUDA_SCAN="split" timeout "$(left 120)" compute-sanitizer --tool $tool \
        --error-exitcode 9 "$tests" --gtest_filter='Devices/DeviceRecurrenceTest.*/cuda' \
        --gtest_brief=1
      echo "$tool (split scan) exit $?"
    done
    echo "== memcheck and racecheck, recurrence tests, pipelined step (LINFER_CUDA_STEP=pipe)"
    local pipe_filter='Devices/DeviceRecurrenceTest.*/cuda'
    pipe_filter+=':Devices/DeviceRecurrenceShapesTest.ManyWorkItemsPerBlockMatchTheCpuTwin/cuda'
    for tool in memcheck racecheck; do
      LINFER_CUDA_STEP=pipe timeout "$(left 120)" compute-sanitizer --tool $tool \
        --error-exitcode 9 "$tests" --gtest_brief=1 --gtest_filter="$pipe_filter"
      echo "$tool (pipelined step) exit $?"
    done
    echo "== memcheck and racecheck, recurrence tests, wide step (LINFER_CUDA_STEP=wide)"
    for tool in memcheck racecheck; do
      LINFER_CUDA_STEP=wide LINFER_CUDA_STEP_BF16=async timeout "$(left 120)" compute-sanitizer \
        --tool $tool --error-exitcode 9 "$tests" --gtest_brief=1 \
        --gtest_filter="$pipe_filter:Devices/DeviceRecurrenceShapesTest.Bf16StateIsComputedInF32AndRoundedOnce/cuda:Devices/GdnPrepTest.RecurrentModeFoldsLongSegments/cuda"
      echo "$tool (wide step) exit $?"
    done
    echo "== memcheck and racecheck, attention tests, staged and flash kernels (cp.async tiles)"
    for mode in staged flash; do
      for tool in memcheck racecheck; do
        LINFER_CUDA_ATTENTION=$mode timeout "$(left 90)" compute-sanitizer --tool $tool \
          --error-exitcode 9 "$tests" --gtest_brief=1 \
          --gtest_filter='Devices/AttentionTest.PrefillSegmentsMatchTheOracle/cuda'
        echo "$tool ($mode attention) exit $?"
      done
    done
    echo "== memcheck, decode attention tests, grouped heads (LINFER_CUDA_DECODE_ATTENTION=grouped)"
    LINFER_CUDA_DECODE_ATTENTION=grouped timeout "$(left 60)" compute-sanitizer --tool memcheck \
      --error-exitcode 9 "$tests" --gtest_brief=1 \
      --gtest_filter='Devices/AttentionTest.LongContextDecodeMatchesTheOracle/cuda:Devices/AttentionTest.PagedMatchesTheOracleAcrossSteps/cuda'
    echo "memcheck (grouped decode attention) exit $?"
    echo "== memcheck and racecheck, bf16 states by cp.async (LINFER_CUDA_STEP_BF16=async)"
    for tool in memcheck racecheck; do
      LINFER_CUDA_STEP_BF16=async timeout "$(left 60)" compute-sanitizer --tool $tool \
        --error-exitcode 9 "$tests" --gtest_brief=1 \
        --gtest_filter='Devices/DeviceRecurrenceShapesTest.Bf16StateIsComputedInF32AndRoundedOnce/cuda'
      echo "$tool (bf16 states by cp.async) exit $?"
    done
    echo "== memcheck and racecheck, fp8 row slices on the tensor-core kernel (LINFER_CUDA_FP8=mma)"
    for tool in memcheck racecheck; do
      LINFER_CUDA_FP8=mma timeout "$(left 60)" compute-sanitizer --tool $tool --error-exitcode 9 \
        "$tests" --gtest_brief=1 --gtest_filter='Devices/DeviceFp8Test.RowSlicesKeepTheirScales/cuda'
      echo "$tool (fp8 tensor-core kernel) exit $?"
    done
    echo "== memcheck, DownloadGathered (the asynchronous snapshots' staging and copy stream)"
    timeout "$(left 60)" compute-sanitizer --tool memcheck --error-exitcode 9 "$tests" \
      --gtest_brief=1 --gtest_filter='Devices/DeviceFusedOpsTest.DownloadGathered*/cuda'
    echo "memcheck (DownloadGathered) exit $?"
  } >"$OUT/sanitize.log" 2>&1
  grep -E '^== |exit|ERROR SUMMARY|FAILED' "$OUT/sanitize.log" | tail -20
}

stage_engine() {
  local td=/tmp/linfer-testdata bin=$pkg/bin log=$OUT/engine.log
  {
    # Where a decode step's GPU time goes, op by op (kernels/op_timer.h: every launch of the
    # eager decode steps timed alone, back to back behind a gate; never run on a GPU before):
    # first, because the engine's decode is 0.18-0.39 of its bound and no per-op figure of the
    # current kernels exists. Compare each table's "per step ... ms of GPU time" with the graphed
    # runs' decode-step time below: the difference is launch gaps and host time.
    [[ -e /tmp/qwen35-0.8b/config.json ]] ||
      python3 tests/bench/make_qwen35_bench_model.py /tmp/qwen35-0.8b >/dev/null
    local optimes=(--device cuda --op_times --concurrency "1,64,256" --gen_tokens 16
      --prompt_tokens 16 --history 0 --state_memory_mb 8192)
    # With --prefill, the warm prefill round's steps too (windows without a gate): where a
    # prompt step's time goes (prefill bounds the server's TTFT under bursts; ≈ 52 k tokens/s on
    # the Qwen3.5 shape at ba0e522, roughly 3x what its kernels' own rates add up to).
    echo "== engine_benchmark --op_times: Qwen3.5-0.8B shape (+ prefill 8 x 4096 in 8192-token steps)"
    timeout "$(left 75)" "$bin/engine_benchmark" --model /tmp/qwen35-0.8b "${optimes[@]}" \
      --prefill 8x4096 --max_step_tokens 8192
    echo "engine_benchmark (op times) exit $?"
    echo "== engine_benchmark --op_times: Qwen3.5-0.8B shape, bf16 inputs + wide step + GEMV"
    LINFER_CUDA_BF16_INPUTS=1 LINFER_CUDA_STEP=wide LINFER_CUDA_GEMV=1 timeout "$(left 60)" \
      "$bin/engine_benchmark" --model /tmp/qwen35-0.8b "${optimes[@]}"
    echo "engine_benchmark (op times, opt-ins) exit $?"
    echo "== engine_benchmark --op_times: Qwen3.5-0.8B shape, tuned cuBLASLt (LINFER_CUDA_GEMM_TUNE=1)"
    LINFER_CUDA_GEMM_TUNE=1 timeout "$(left 60)" "$bin/engine_benchmark" --model /tmp/qwen35-0.8b \
      "${optimes[@]}"
    echo "engine_benchmark (op times, tuned cuBLASLt) exit $?"
    echo "== engine_benchmark --op_times: random GDN, fla's 1.3B shape"
    timeout "$(left 75)" "$bin/engine_benchmark" --random_shape 1.3b "${optimes[@]}" \
      --prefill 8x4096 --max_step_tokens 8192
    echo "engine_benchmark (op times, 1.3B) exit $?"
    echo "== fixtures (numpy float64 references) into $td"
    if [[ ! -e $td/families/cases.txt ]]; then
      python3 tests/models/reference/make_fixtures.py --out "$td/fla" >/dev/null &&
        python3 tests/models/reference/make_hybrid_fixtures.py --out "$td/hybrid" >/dev/null &&
        python3 tests/models/reference/make_family_fixtures.py --out "$td/families" >/dev/null
      echo "fixtures: exit $?"
    fi
    export LINFER_TESTDATA=$td
    echo "== models_device_test"
    timeout "$(left 120)" "$bin/models_device_test" --gtest_brief=1
    echo "models_device_test exit $?"
    # The GEMV (1-8 rows) with the block norms folded into Qwen3.5's GDN input projection
    # (kernels/gemm.h RmsNormLinear; never run on a GPU).
    echo "== models_device_test, the GEMV with folded input norms (LINFER_CUDA_GEMV=1)"
    LINFER_CUDA_GEMV=1 timeout "$(left 60)" "$bin/models_device_test" --gtest_brief=1
    echo "models_device_test (GEMV, folded norms) exit $?"
    echo "== models_device_test, grouped decode attention (LINFER_CUDA_DECODE_ATTENTION=grouped)"
    LINFER_CUDA_DECODE_ATTENTION=grouped timeout "$(left 60)" "$bin/models_device_test" \
      --gtest_brief=1
    echo "models_device_test (grouped decode attention) exit $?"
    echo "== engine_test (device-parameterized tests)"
    timeout "$(left 120)" "$bin/engine_test" --gtest_filter='Devices/*' --gtest_brief=1
    echo "engine_test exit $?"
    echo "== engine_graph_test (CUDA graphs of decode steps vs eager)"
    timeout "$(left 120)" "$bin/engine_graph_test" --gtest_brief=1
    echo "engine_graph_test exit $?"
    # A random GDN of fla's 1.3B shape, bf16 weights, decode at four batch sizes.
    local gdn=("$bin/engine_benchmark" --device cuda --random_shape 1.3b --concurrency "1,16,64,256"
      --gen_tokens 64 --prompt_tokens 32 --state_memory_mb 16384)
    echo "== engine_benchmark: random GDN, fla's 1.3B shape, bf16 weights"
    timeout "$(left 150)" "${gdn[@]}" --history 4000 --prefill 8x4096 --max_step_tokens 8192
    echo "engine_benchmark exit $?"
    # Decided on the H200 at ba0e522 (0.95x at batch 1 with the opt-ins), again only with
    # RERUN_DECIDED=1 (the PDL runs below take the GEMV at 1/4/8 rows on the Qwen3.5 shape).
    if [[ ${RERUN_DECIDED:-0} == 1 ]]; then
      echo "== engine_benchmark: the same with the GEMV for 1-8 rows (LINFER_CUDA_GEMV=1)"
      LINFER_CUDA_GEMV=1 timeout "$(left 120)" "${gdn[@]}" --history 0 --prefill 8x4096 \
        --max_step_tokens 8192
      echo "engine_benchmark exit $?"
    fi
    # Eager (--cuda_graphs=false: what the graphs gain) only with ENGINE_EAGER=1: measured on the
    # H200 (1.15x at batch 1, about 1.0 at 16 and more), and the stage's budget goes to the new
    # kernels' and the asynchronous snapshots' runs first.
    if [[ ${ENGINE_EAGER:-0} == 1 ]]; then
      echo "== engine_benchmark: the same, eager (--cuda_graphs=false: what the graphs gain)"
      timeout "$(left 150)" "${gdn[@]}" --history 0 --cuda_graphs=false
      echo "engine_benchmark exit $?"
    fi
    echo "== engine_benchmark: Qwen3.5-0.8B shape (random bf16 weights)"
    [[ -e /tmp/qwen35-0.8b/config.json ]] ||
      python3 tests/bench/make_qwen35_bench_model.py /tmp/qwen35-0.8b >/dev/null
    timeout "$(left 150)" "$bin/engine_benchmark" --device cuda --model /tmp/qwen35-0.8b \
      --concurrency 1,16,64,256 --gen_tokens 64 --prompt_tokens 32 --history 4000 \
      --state_memory_mb 16384 --prefill 8x4096 --max_step_tokens 8192
    echo "engine_benchmark exit $?"
    # Mixture of experts (eighteenth session, never run): 4 layers of the Qwen3.6-35B-A3B shape
    # (256 experts of 512, top 8; ≈ 7 GB of bf16, about 30 s to write), vocab 32,000. The bound
    # counts the experts a step's tokens are expected to touch; the prefill runs the grouped GEMMs.
    echo "== engine_benchmark: Qwen3.6-35B-A3B shape, 4 layers (MoE, random bf16 weights)"
    [[ -e /tmp/qwen36-moe/config.json ]] ||
      timeout "$(left 90)" python3 tests/bench/make_qwen35_bench_model.py /tmp/qwen36-moe --moe \
        --layers 4 --vocab 32000 >/dev/null
    timeout "$(left 120)" "$bin/engine_benchmark" --device cuda --model /tmp/qwen36-moe \
      --concurrency 1,16,64,256 --gen_tokens 64 --prompt_tokens 32 --history 0 \
      --state_memory_mb 4096 --prefill 8x4096 --max_step_tokens 8192
    echo "engine_benchmark (MoE) exit $?"
    # fp8 weights kept on the device (twenty-first session, never run): the Qwen3.5 shape
    # quantized on load (--quantization fp8, 128 x 128 blocks as Qwen's -FP8 checkpoints): half
    # the bf16 weight bytes; the bound counts the fp8 bytes. Decode takes the fp8 GEMV at 1-32
    # sequences, the tensor-core kernel at 33-256; prefill the bf16 widening + cuBLASLt.
    echo "== engine_benchmark: Qwen3.5-0.8B shape, fp8 weights (--quantization fp8)"
    timeout "$(left 75)" "$bin/engine_benchmark" --device cuda --model /tmp/qwen35-0.8b \
      --quantization fp8 --concurrency 1,4,16,64,256 --gen_tokens 64 --prompt_tokens 32 \
      --history 0 --state_memory_mb 16384 --prefill 8x4096 --max_step_tokens 8192
    echo "engine_benchmark (fp8, Qwen3.5) exit $?"
    # Programmatic dependent launch (LINFER_CUDA_PDL=on): the same decode steps with each kernel
    # launched while the one before drains (compare the "decode-step" lines with the runs above),
    # then the tests that compare graphs, devices and the engine's paths, under it.
    echo "== engine_benchmark: Qwen3.5-0.8B shape and random 1.3B GDN, LINFER_CUDA_PDL=on"
    LINFER_CUDA_PDL=on timeout "$(left 75)" "$bin/engine_benchmark" --device cuda \
      --model /tmp/qwen35-0.8b --concurrency 1,16,64,256 --gen_tokens 64 --prompt_tokens 32 \
      --history 0 --state_memory_mb 16384
    echo "engine_benchmark (PDL, Qwen3.5) exit $?"
    LINFER_CUDA_PDL=on timeout "$(left 75)" "${gdn[@]}" --history 0
    echo "engine_benchmark (PDL, 1.3B) exit $?"
    # The GEMV (1-8 rows) prefetches its weight rows into L2 before it waits for the previous
    # kernel: with PDL its weights stream while that kernel drains (cuBLASLt's cannot).
    echo "== engine_benchmark: Qwen3.5-0.8B shape, LINFER_CUDA_PDL=on LINFER_CUDA_GEMV=1"
    LINFER_CUDA_PDL=on LINFER_CUDA_GEMV=1 timeout "$(left 45)" "$bin/engine_benchmark" \
      --device cuda --model /tmp/qwen35-0.8b --concurrency 1,4,8 --gen_tokens 64 \
      --prompt_tokens 32 --history 0 --state_memory_mb 16384
    echo "engine_benchmark (PDL + GEMV, Qwen3.5) exit $?"
    echo "== engine_benchmark: the same without PDL (LINFER_CUDA_GEMV=1)"
    LINFER_CUDA_GEMV=1 timeout "$(left 45)" "$bin/engine_benchmark" --device cuda \
      --model /tmp/qwen35-0.8b --concurrency 1,4,8 --gen_tokens 64 --prompt_tokens 32 \
      --history 0 --state_memory_mb 16384
    echo "engine_benchmark (GEMV, Qwen3.5) exit $?"
    # cuBLASLt's candidates timed at the decode buckets (LINFER_CUDA_GEMM_TUNE=1): the decode
    # steps (graphed) against the default run above, and graph replay = eager under it.
    echo "== engine_benchmark: Qwen3.5-0.8B shape, tuned cuBLASLt (LINFER_CUDA_GEMM_TUNE=1)"
    LINFER_CUDA_GEMM_TUNE=1 timeout "$(left 45)" "$bin/engine_benchmark" --device cuda \
      --model /tmp/qwen35-0.8b --concurrency 1,16,64,256 --gen_tokens 64 --prompt_tokens 32 \
      --history 0 --state_memory_mb 16384
    echo "engine_benchmark (tuned cuBLASLt, Qwen3.5) exit $?"
    LINFER_CUDA_GEMM_TUNE=1 timeout "$(left 60)" "$bin/engine_graph_test" --gtest_brief=1
    echo "engine_graph_test (tuned cuBLASLt) exit $?"
    # Decode after 4000-token prompts, where the attention layers' KV (98 MB a sequence at 4k, f32)
    # outweighs the GDN states (21 MB): a warp per query head (default) vs per kv head's group,
    # each with the f32, the bf16 and the fp8 KV cache (--kv_dtype bf16 / fp8: half / a quarter of
    # the KV bytes; fp8 new in the twenty-first session, never run).
    for attn in heads grouped; do
      for kv in f32 bf16 fp8; do
        echo "== engine_benchmark: Qwen3.5-0.8B shape, 4000-token prompts, LINFER_CUDA_DECODE_ATTENTION=$attn --kv_dtype $kv"
        LINFER_CUDA_DECODE_ATTENTION=$attn timeout "$(left 45)" "$bin/engine_benchmark" \
          --device cuda --model /tmp/qwen35-0.8b --concurrency 16,64 --gen_tokens 32 \
          --prompt_tokens 4000 --history 0 --state_memory_mb 4096 --kv_memory_mb 8192 \
          --max_step_tokens 8192 --kv_dtype "$kv"
        echo "engine_benchmark (4k prompts, $attn decode attention, $kv KV) exit $?"
      done
    done
    echo "== engine_benchmark: Qwen3.5-0.8B shape, wide decode step (LINFER_CUDA_STEP=wide)"
    LINFER_CUDA_STEP=wide timeout "$(left 45)" "$bin/engine_benchmark" --device cuda \
      --model /tmp/qwen35-0.8b --concurrency 64,256 --gen_tokens 64 --prompt_tokens 32 \
      --history 0 --state_memory_mb 16384
    echo "engine_benchmark (wide step, Qwen3.5) exit $?"
    # bf16 matmul inputs (LINFER_CUDA_BF16_INPUTS=1): the block norms and Qwen3.5's gated norm
    # write their projections' input as bf16 (no conversion passes); the model and engine tests
    # under it, then the Qwen3.5 decode benchmark with it, and with every new opt-in at once.
    echo "== models_device_test, engine_test, engine_graph_test with LINFER_CUDA_BF16_INPUTS=1"
    LINFER_CUDA_BF16_INPUTS=1 timeout "$(left 60)" "$bin/models_device_test" --gtest_brief=1
    echo "models_device_test (bf16 inputs) exit $?"
    LINFER_CUDA_BF16_INPUTS=1 timeout "$(left 90)" "$bin/engine_test" \
      --gtest_filter="$rerun_filter" --gtest_brief=1
    echo "engine_test (bf16 inputs) exit $?"
    LINFER_CUDA_BF16_INPUTS=1 timeout "$(left 90)" "$bin/engine_graph_test" --gtest_brief=1
    echo "engine_graph_test (bf16 inputs) exit $?"
    echo "== engine_benchmark: Qwen3.5-0.8B shape, LINFER_CUDA_BF16_INPUTS=1"
    LINFER_CUDA_BF16_INPUTS=1 timeout "$(left 60)" "$bin/engine_benchmark" --device cuda \
      --model /tmp/qwen35-0.8b --concurrency 1,16,64,256 --gen_tokens 64 --prompt_tokens 32 \
      --history 0 --state_memory_mb 16384
    echo "engine_benchmark (bf16 inputs, Qwen3.5) exit $?"
    echo "== engine_benchmark: Qwen3.5-0.8B shape, PDL + bf16 inputs + wide step"
    LINFER_CUDA_PDL=on LINFER_CUDA_BF16_INPUTS=1 LINFER_CUDA_STEP=wide timeout "$(left 60)" \
      "$bin/engine_benchmark" --device cuda --model /tmp/qwen35-0.8b --concurrency 1,16,64,256 \
      --gen_tokens 64 --prompt_tokens 32 --history 0 --state_memory_mb 16384
    echo "engine_benchmark (PDL + bf16 inputs + wide, Qwen3.5) exit $?"
    echo "== models_device_test, engine_test, engine_graph_test with LINFER_CUDA_PDL=on"
    LINFER_CUDA_PDL=on timeout "$(left 60)" "$bin/models_device_test" --gtest_brief=1
    echo "models_device_test (PDL) exit $?"
    LINFER_CUDA_PDL=on timeout "$(left 90)" "$bin/engine_test" --gtest_filter="$rerun_filter" \
      --gtest_brief=1
    echo "engine_test (PDL) exit $?"
    LINFER_CUDA_PDL=on timeout "$(left 90)" "$bin/engine_graph_test" --gtest_brief=1
    echo "engine_graph_test (PDL) exit $?"
    # Temperature 1 over the whole row (an OpenAI client's default): drawn on the device, then
    # the former way (the 248,320-logit rows downloaded and sampled on the host, --presample off).
    for presample in auto off; do
      echo "== engine_benchmark: Qwen3.5-0.8B shape, temperature 1, --presample $presample"
      timeout "$(left 60)" "$bin/engine_benchmark" --device cuda --model /tmp/qwen35-0.8b \
        --concurrency 64,256 --gen_tokens 32 --prompt_tokens 32 --history 0 \
        --state_memory_mb 16384 --temperature 1 --presample "$presample"
      echo "engine_benchmark exit $?"
    done
    for mode in staged flash; do
      echo "== engine_benchmark: Qwen3.5-0.8B shape, prefill with the $mode attention"
      LINFER_CUDA_ATTENTION=$mode timeout "$(left 60)" "$bin/engine_benchmark" --device cuda \
        --model /tmp/qwen35-0.8b --concurrency 1 --gen_tokens 4 --history 0 \
        --state_memory_mb 16384 --prefill 8x4096 --max_step_tokens 8192
      echo "engine_benchmark exit $?"
    done
    # The prefix cache as linfer serve runs it (--prefix_cache_mb 1024): every one-off request
    # saves its state at its prompt's end and at its end (20.6 MB each on this shape) — kept in
    # free slots (the default: no copy at a request's end, a device-to-device one mid-prompt),
    # copied to host RAM at once (--prefix_cache_slots=false), and copied to host RAM behind the
    # later steps (LINFER_CUDA_ASYNC_SNAPSHOTS=1). The runs above have the cache off.
    for mode in slots host async; do
      local flags=(--prefix_cache_mb 1024) async=0
      [[ $mode != slots ]] && flags+=(--prefix_cache_slots=false)
      [[ $mode == async ]] && async=1
      echo "== engine_benchmark: Qwen3.5-0.8B shape, prefix cache on ($mode)"
      LINFER_CUDA_ASYNC_SNAPSHOTS=$async timeout "$(left 75)" "$bin/engine_benchmark" \
        --device cuda --model /tmp/qwen35-0.8b --concurrency 64,256 --gen_tokens 64 \
        --prompt_tokens 32 --history 0 --state_memory_mb 16384 --prefill 8x4096 \
        --max_step_tokens 8192 "${flags[@]}"
      echo "engine_benchmark exit $?"
    done
    # Measured at ba0e522 (together / apart 1.04 warm): again only with RERUN_DECIDED=1.
    if [[ ${RERUN_DECIDED:-0} == 1 ]]; then
      echo "== engine_benchmark: Qwen3.5-0.8B shape, mixed steps (64 decoding + a 4096-token prompt)"
      timeout "$(left 90)" "$bin/engine_benchmark" --device cuda --model /tmp/qwen35-0.8b \
        --concurrency 1 --gen_tokens 4 --history 0 --state_memory_mb 16384 \
        --max_step_tokens 1024 --mixed 64x4096
      echo "engine_benchmark exit $?"
    fi
    # Last (cut first when the budget runs out): runs of paths that passed on the H200 at ba0e522
    # or whose opt-ins are not the question of this run.
    for mode in staged flash; do
      echo "== models_device_test, $mode tensor-core attention (LINFER_CUDA_ATTENTION=$mode)"
      LINFER_CUDA_ATTENTION=$mode timeout "$(left 60)" "$bin/models_device_test" --gtest_brief=1
      echo "models_device_test ($mode attention) exit $?"
    done
    # The prefix cache on the device: resumed turns against cold ones, with the snapshots copied
    # out at once (the default) and behind the later steps (LINFER_CUDA_ASYNC_SNAPSHOTS=1), and
    # the engine tests and the stress run with the latter.
    for async in 0 1; do
      echo "== engine_prefix_cache_test (device), LINFER_CUDA_ASYNC_SNAPSHOTS=$async"
      LINFER_CUDA_ASYNC_SNAPSHOTS=$async timeout "$(left 60)" "$bin/engine_prefix_cache_test" \
        --gtest_filter='Devices/*' --gtest_brief=1
      echo "engine_prefix_cache_test (async snapshots $async) exit $?"
    done
    echo "== engine_test and engine_stress_test, LINFER_CUDA_ASYNC_SNAPSHOTS=1"
    LINFER_CUDA_ASYNC_SNAPSHOTS=1 timeout "$(left 120)" "$bin/engine_test" \
      --gtest_filter="$rerun_filter" --gtest_brief=1
    echo "engine_test (async snapshots) exit $?"
    LINFER_CUDA_ASYNC_SNAPSHOTS=1 CUDA_MODULE_LOADING=EAGER timeout "$(left 120)" \
      "$bin/engine_stress_test" --gtest_filter='*Gpu*'
    echo "engine_stress_test (async snapshots) exit $?"
    echo "== engine_stress_test (GPU run)"
    # Modules loaded eagerly: lazy loading (CUDA's default) would grow device memory as the
    # stress run reaches new kernels, which the leak check would count.
    CUDA_MODULE_LOADING=EAGER timeout "$(left 120)" "$bin/engine_stress_test" --gtest_filter='*Gpu*'
    echo "engine_stress_test exit $?"
  } >"$log" 2>&1
  grep -E '^== |exit|FAILED|PASSED|of bound|x  *$|prefill|follow-up|^mixed' "$log" | tail -40
}

# Where the time goes, kernel by kernel (Nsight Compute, GPU time of each launch; clocks left
# alone): the chunked prefill and decode step of cuda_recurrence_benchmark, eager decode steps
# of the 1.3B GDN at batch 1 and 64 (engine_benchmark; graphs off so that each kernel shows), and
# the Qwen3.5-0.8B shape's prefill (8 x 4096 tokens in 8192-token steps: the server's burst
# bottleneck, ≈ 52 k tokens/s on 2026-11-27) and decode steps at batch 256.
stage_profile() {
  local ncu_args=(--clock-control none --metrics gpu__time_duration.sum --print-summary per-kernel)
  {
    echo "== ncu: chunked prefill, Qwen3.5-0.8B layer, 1 x 32768 and 8 x 8192"
    timeout "$(left 60)" ncu "${ncu_args[@]}" "$bench" \
      --benchmark_filter='^Prefill/qwen3.5-0.8b/.*/warm'
    echo "ncu exit $?"
    echo "== ncu: decode step, Qwen3.5-0.8B layer, f32 state, batch 256"
    timeout "$(left 40)" ncu "${ncu_args[@]}" "$bench" \
      --benchmark_filter='^Decode/qwen3.5-0.8b/F32/warm/batch:256'
    echo "ncu exit $?"
    echo "== ncu: the former defaults (plain scan, registers step) and the attention prefill"
    LINFER_CUDA_SCAN=plain LINFER_CUDA_STEP=registers timeout "$(left 60)" ncu "${ncu_args[@]}" \
      "$bench" --benchmark_filter='^Prefill/qwen3.5-0.8b/1x32768/warm|^Decode/qwen3.5-0.8b/F32/warm/batch:256|^Attention/prefill/8x4096/warm'
    echo "ncu exit $?"
    # Why the slow kernels are slow: stall reasons, occupancy and memory throughput of a few
    # launches each (chunk_prep is ≈ 45 % of the pipelined prefill at ≈ 30 % of the SMs' and
    # the memory's throughput; the flash attention has never been profiled).
    local details=(--clock-control none --launch-count 2 --section SpeedOfLight --section Occupancy
      --section LaunchStats --section WarpStateStats --section MemoryWorkloadAnalysis)
    echo "== ncu details: ChunkPrepKernel, Qwen3.5-0.8B layer, 8 x 8192"
    timeout "$(left 60)" ncu "${details[@]}" --kernel-name regex:ChunkPrepKernel "$bench" \
      --benchmark_filter='^Prefill/qwen3.5-0.8b/8x8192/warm'
    echo "ncu exit $?"
    echo "== ncu details: FlashAttendKernel (LINFER_CUDA_ATTENTION=flash), prefill 8 x 4096"
    LINFER_CUDA_ATTENTION=flash timeout "$(left 60)" ncu "${details[@]}" \
      --kernel-name regex:FlashAttendKernel "$bench" --benchmark_filter='^Attention/prefill/8x4096/warm'
    echo "ncu exit $?"
    echo "== ncu details: StepKernel, Qwen3.5-0.8B layer, f32 state, batch 256"
    timeout "$(left 60)" ncu "${details[@]}" --kernel-name regex:StepKernel "$bench" \
      --benchmark_filter='^Decode/qwen3.5-0.8b/F32/warm/batch:256'
    echo "ncu exit $?"
    echo "== ncu: the split scan, chunked prefill 1 x 32768"
    LINFER_CUDA_SCAN="split" timeout "$(left 40)" ncu "${ncu_args[@]}" "$bench" \
      --benchmark_filter='^Prefill/qwen3.5-0.8b/1x32768/warm'
    echo "ncu exit $?"
    for c in 1 64; do
      echo "== ncu: engine decode steps, random 1.3B GDN, batch $c, eager"
      timeout "$(left 90)" ncu "${ncu_args[@]}" --launch-skip 600 --launch-count 1500 \
        "$pkg/bin/engine_benchmark" --device cuda --random_shape 1.3b --concurrency $c \
        --gen_tokens 24 --prompt_tokens 16 --history 0 --state_memory_mb 4096 --cuda_graphs=false
      echo "ncu exit $?"
    done
    [[ -e /tmp/qwen35-0.8b/config.json ]] ||
      python3 tests/bench/make_qwen35_bench_model.py /tmp/qwen35-0.8b >/dev/null
    local qwen=("$pkg/bin/engine_benchmark" --device cuda --model /tmp/qwen35-0.8b --history 0
      --state_memory_mb 8192 --max_step_tokens 8192 --cuda_graphs=false)
    echo "== ncu: engine prefill steps, Qwen3.5-0.8B shape, 8 prompts x 4096 tokens, eager"
    timeout "$(left 90)" ncu "${ncu_args[@]}" --launch-count 3000 "${qwen[@]}" --concurrency 8 \
      --prompt_tokens 4096 --gen_tokens 1
    echo "ncu exit $?"
    echo "== ncu: engine decode steps, Qwen3.5-0.8B shape, batch 256, eager"
    timeout "$(left 90)" ncu "${ncu_args[@]}" --launch-skip 1500 --launch-count 1500 "${qwen[@]}" \
      --concurrency 256 --prompt_tokens 16 --gen_tokens 12
    echo "ncu exit $?"
  } >"$OUT/profile.log" 2>&1
  grep -E '^== |exit' "$OUT/profile.log" | tail -20
}

stage_serve() {
  local spkg=/tmp/linfer-serve log=$OUT/serve.log model=/tmp/qwen35-0.8b port=50151 http=18151
  local bin=$spkg/bin
  if [[ ! -x "$spkg/bin/linfer" ]]; then
    mkdir -p "$spkg" && tar -xJf "$root/.device/linfer-serve/linfer-serve.tar.xz" -C "$spkg" ||
      echo "cannot unpack .device/linfer-serve/linfer-serve.tar.xz: was it carried?" >&2
  fi
  local LD_LIBRARY_PATH="$spkg/lib:$LD_LIBRARY_PATH"
  export LD_LIBRARY_PATH
  {
    [[ -e $model/config.json ]] || python3 tests/bench/make_qwen35_bench_model.py $model >/dev/null
    # The budgets by device (engine/memory_plan.h, cli/cmd_serve.cc): the server started with no
    # --state_memory_mb, --kv_memory_mb or --max_step_tokens, its plan read from its log, stopped.
    echo "== linfer serve with the default budgets (by device)"
    "$bin/linfer" serve --device cuda --model $model --port 0 --http_port -1 \
      >"$OUT/serve_defaults.log" 2>&1 &
    local dpid=$!
    for _ in $(seq 1 120); do
      grep -q "linfer: serving" "$OUT/serve_defaults.log" 2>/dev/null && break
      kill -0 $dpid 2>/dev/null || break
      sleep 0.5
    done
    grep -E "pool budgets|state: [0-9]|KV cache: |linfer: serving|rror" "$OUT/serve_defaults.log" |
      cut -c1-400
    grep -o "max_step_tokens [^,]*" "$OUT/serve_defaults.log"
    kill -TERM $dpid 2>/dev/null
    for _ in $(seq 1 40); do # drained within 20 s, else killed: a hung server must not hang here
      kill -0 $dpid 2>/dev/null || break
      sleep 0.5
    done
    kill -KILL $dpid 2>/dev/null
    wait $dpid
    echo "linfer serve (defaults) exit $?"
    "$bin/linfer" serve --device cuda --model $model --port $port --http_port $http \
      --state_memory_mb 16384 --kv_memory_mb 24576 --max_running 256 \
      --max_tokens_limit 4096 --log_stats_interval_s 5 >"$OUT/serve_server.log" 2>&1 &
    local pid=$! up=0
    # Until the gRPC port accepts or the server exits: a server that fails to start (a CUDA error)
    # must not cost the bench runs' ready timeouts in device time.
    for _ in $(seq 1 240); do
      kill -0 $pid 2>/dev/null || break
      if (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null; then
        up=1
        break
      fi
      sleep 0.5
    done
    if ((up)); then
      # --max_step_tokens by device (cli/cmd_serve.cc MaxStepTokens): 8192 on a GPU of ≥ 70 GiB.
      echo "step budget: $(grep -o 'max_step_tokens [0-9]*[^,]*' "$OUT/serve_server.log")"
      echo "== linfer_bench: throughput vs concurrency (random 128 in / 128 out)"
      timeout "$(left 200)" "$bin/linfer_bench" --server 127.0.0.1:$port --ready_timeout_s 120 \
        --sweep_concurrency 1,16,64,256 --num_prompts 256 --input_len 128 --output_len 128 \
        --duration_s "${SERVE_RUN_S:-30}" --progress=false --result_json "$OUT/serve_sweep.json"
      echo "linfer_bench exit $?"
      # Attention's prefill is quadratic in the history: the 32k run is one conversation of two
      # turns, to keep the stage inside its budget.
      for hist in 4096 32768; do
        local convs=2 turns=3
        ((hist > 8192)) && convs=1 turns=2
        echo "== linfer_bench: multi-turn, first turn $hist tokens, sessions vs re-sent history"
        timeout "$(left 150)" "$bin/linfer_bench" --server 127.0.0.1:$port --workload multiturn \
          --conversations $convs --turns $turns --first_turn_len $hist --input_len 64 \
          --output_len 16 --progress=false --result_json "$OUT/serve_multiturn_$hist.json"
        echo "linfer_bench exit $?"
      done
    else
      echo "linfer serve did not come up: linfer_bench skipped"
    fi
    kill -TERM $pid
    wait $pid
    echo "linfer serve exit $? (after SIGTERM)"
    echo "== server_benchmark: 64 streams through gRPC vs the engine driven directly (target >= 95%)"
    timeout "$(left 120)" "$bin/server_benchmark" --device cuda --model $model --streams 64 \
      --gen_tokens 128 --rounds 3 --state_memory_mb 4096
    echo "server_benchmark exit $?"
    # The Responses API's stored states on the device (models/tiny, --device auto: cuda here):
    # previous_response_id forks a state in the device pool; re-sent conversations prefill.
    echo "== Responses API: follow-up TTFT with previous_response_id vs the conversation re-sent"
    timeout "$(left 60)" python3 tests/bench/responses_followups.py "$bin/linfer" "$root" 10 60 3
    echo "responses_followups exit $?"
    # Forced tool calls (the tool grammar's constrained rows come back whole from the device
    # while other rows are pre-sampled): the CPU suite's wire test against a CUDA server.
    echo "== forced tool calls on the device (tests/server/forced_tools_test.py)"
    timeout "$(left 30)" python3 tests/server/forced_tools_test.py "$bin/linfer" "$root" |
      grep -E 'FAIL|passed'
    echo "forced_tools exit ${PIPESTATUS[0]}"
    echo "== server log (config, CUDA graphs, stats)"
    grep -E 'config:|CUDA graphs|device:|steps|error|Error' "$OUT/serve_server.log" | head -40
  } >"$log" 2>&1
  grep -E '^== |exit|throughput|TTFT|ITL|Follow-up|CUDA graphs|of the engine|per round|last turn|FAIL' \
    "$log" | tail -40
}

for s in "${stages[@]}"; do
  case "$s" in
    env | tests | bench | fla | sanitize | engine | serve | profile) echo "### $s ($(($(date +%s) - start)) s)"; "stage_$s" ;;
    *) echo "unknown stage $s" >&2 ;;
  esac
done
if [[ -e "$OUT/bench.json" || -e "$OUT/fla.json" ]]; then
  python3 tests/gpu/summarize.py "$OUT" | tail -40
fi
echo "done in $(($(date +%s) - start)) s; files: $(ls "$OUT" | tr '\n' ' ')"
