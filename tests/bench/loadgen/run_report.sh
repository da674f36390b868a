#!/usr/bin/env bash
# Reproduces tests/bench/REPORT.md: starts `linfer serve` on MODEL_DIR (loopback), runs the
# linfer_bench sweeps and the multi-turn comparison, and renders the plots. The environment
# (OMP_NUM_THREADS, and the sizes below: RATES, CONCURRENCY, ...) passes through.
#   tests/bench/loadgen/run_report.sh BUILD_DIR MODEL_DIR RESULTS_DIR [PLOTS_DIR]
set -euo pipefail
build=$1 model=$2 results=$3
plots=${4:-$(cd "$(dirname "$0")/.." && pwd)/plots}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$results" "$plots"
bench="$build/bin/linfer_bench"

"$build/bin/linfer" serve --model "$model" --bind 127.0.0.1 --port 0 --http_port -1 \
  >"$results/serve.out" 2>"$results/serve.log" &
server_pid=$!
trap 'kill "$server_pid" 2>/dev/null || true' EXIT
for _ in $(seq 300); do
  grep -q "(gRPC)" "$results/serve.out" 2>/dev/null && break
  sleep 0.2
done
port=$(sed -n 's/.*127\.0\.0\.1:\([0-9]*\) (gRPC).*/\1/p' "$results/serve.out")
server=127.0.0.1:$port
echo "server on $server"

# Shared flags: random token-id prompts, exact lengths (ignore_eos), greedy, seed 0.
common=(--server "$server" --seed 0 --num_warmups 2 --duration_s 300 --goodput "${GOODPUT:-ttft:1000,tpot:100}")

# 1. Throughput and latency vs. concurrency (infinite rate, concurrency cap).
"$bench" "${common[@]}" --input_len "${INPUT_LEN:-256}" --output_len "${OUTPUT_LEN:-64}" \
  --num_prompts "${SWEEP_PROMPTS:-32}" --sweep_concurrency "${CONCURRENCY:-1,2,4,8,16}" \
  --result_json "$results/concurrency.json" --csv "$results/concurrency.csv" \
  | tee "$results/concurrency.txt"

# 2. Latency vs. offered load: Poisson arrivals at fixed rates.
"$bench" "${common[@]}" --input_len "${INPUT_LEN:-256}" --output_len "${OUTPUT_LEN:-64}" \
  --num_prompts "${RATE_PROMPTS:-20}" --sweep_rate "${RATES:-0.5,1,1.5,2}" \
  --result_json "$results/rate.json" --csv "$results/rate.csv" | tee "$results/rate.txt"

# 3. Shared-prefix workload (4 prefixes of 512 tokens + 64 random tokens).
"$bench" "${common[@]}" --workload shared_prefix --prefix_len 512 --num_prefixes 4 \
  --input_len 64 --output_len "${OUTPUT_LEN:-64}" --num_prompts 16 --max_concurrency 4 \
  --result_json "$results/shared_prefix.json" | tee "$results/shared_prefix.txt"

# 4. Multi-turn chat: persistent sessions vs. the same conversations resent as full histories.
"$bench" "${common[@]}" --workload multiturn --conversations "${CONVERSATIONS:-4}" \
  --turns "${TURNS:-10}" --input_len "${TURN_LEN:-128}" --output_len "${REPLY_LEN:-32}" \
  --max_concurrency "${CONV_CONCURRENCY:-1}" \
  --result_json "$results/multiturn.json" --csv "$results/multiturn.csv" | tee "$results/multiturn.txt"

title=${TITLE:-"linfer (CPU), $(basename "$model")"}
sfx=${PLOT_SUFFIX:-}
/usr/bin/python3 "$here/plot.py" sweep "$results/concurrency.csv" "$plots/concurrency$sfx" --title "$title"
/usr/bin/python3 "$here/plot.py" sweep "$results/rate.csv" "$plots/rate$sfx" --title "$title, Poisson arrivals"
/usr/bin/python3 "$here/plot.py" turns "$results/multiturn.csv" "$plots/multiturn_ttft$sfx.png" --title "$title"
ls -l "$plots"
