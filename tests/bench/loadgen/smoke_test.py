"""Smoke test of linfer_bench: starts `linfer serve` on a tiny fixture model (loopback, free
port), runs a handful of requests per workload and checks the JSON / CSV results.
Usage: smoke_test.py LINFER LINFER_BENCH MODEL_DIR"""
import csv
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "testing"))
from harness import Server, check, finish  # noqa: E402


def bench(binary, server, out_dir, name, *args):
    path = os.path.join(out_dir, name + ".json")
    cmd = [binary, "--server", server, "--progress=false", "--duration_s", "30",
           "--result_json", path, *args]
    t = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=40)
    print(f"{name}: rc {r.returncode}, {time.monotonic() - t:.1f} s", flush=True)
    check(r.returncode == 0, f"{name}: exit code {r.returncode}\n{r.stdout}\n{r.stderr}")
    if r.returncode != 0:
        return None
    with open(path) as f:
        return json.load(f)


KEYS = ["duration", "completed", "failed", "total_input_tokens", "total_output_tokens",
        "request_throughput", "request_goodput", "output_throughput", "total_token_throughput",
        "max_output_tokens_per_s", "max_concurrent_requests"] + [
        f"{s}_{m}_ms" for m in ["ttft", "tpot", "itl", "e2el"]
        for s in ["mean", "median", "std", "p90", "p99"]]


def check_run(name, j, n, input_tokens, output_tokens, cap=None):
    for k in KEYS:
        check(k in j, f"{name}: key {k} missing")
    check(j["completed"] == n and j["failed"] == 0,
          f"{name}: completed {j['completed']} failed {j['failed']} of {n}: {j.get('errors')}")
    check(j["length_mismatches"] == 0, f"{name}: {j['length_mismatches']} length mismatches")
    if input_tokens is not None:
        check(j["total_input_tokens"] == input_tokens,
              f"{name}: input tokens {j['total_input_tokens']} != {input_tokens}")
    if output_tokens is not None:
        check(j["total_output_tokens"] == output_tokens,
              f"{name}: output tokens {j['total_output_tokens']} != {output_tokens}")
    check(j["duration"] > 0 and j["request_throughput"] > 0 and j["output_throughput"] > 0,
          f"{name}: duration / throughput not positive")
    check(0 < j["mean_ttft_ms"] <= j["mean_e2el_ms"], f"{name}: TTFT vs E2E latency")
    # A fast server may deliver a whole reply in one message (it merges events that pile up
    # while a write is in flight); then E2E == TTFT and there are no gaps: TPOT = ITL = 0.
    check(j["mean_tpot_ms"] >= 0 and j["mean_itl_ms"] >= 0, f"{name}: TPOT / ITL negative")
    check(j["median_ttft_ms"] <= j["p99_ttft_ms"], f"{name}: median > p99")
    check(1 <= j["max_concurrent_requests"] <= (cap or n), f"{name}: peak concurrency")


def main():
    linfer, linfer_bench, model = sys.argv[1:4]
    out = tempfile.mkdtemp(prefix="linfer-bench-smoke-")
    # The prefix cache off: "history" mode must recompute what it resends (the baseline).
    with Server(linfer, model, "--prefix_cache_mb", "0") as srv:
        server = srv.address
        j = bench(linfer_bench, server, out, "random", "--num_prompts", "6", "--input_len", "12",
                  "--output_len", "5", "--max_concurrency", "3", "--goodput", "ttft:60000")
        if j:
            check_run("random", j, 6, 6 * 12, 6 * 5, cap=3)
            check(j["request_goodput"] == j["request_throughput"], "random: goodput")
            check(j["max_concurrency"] == 3, "random: max_concurrency metadata")
        j = bench(linfer_bench, server, out, "poisson", "--num_prompts", "5", "--input_len", "10",
                  "--output_len", "6", "--range_ratio", "0.5", "--request_rate", "20",
                  "--burstiness", "0.5", "--save_detailed")
        if j:
            check_run("poisson", j, 5, sum(j["input_lens"]), sum(j["output_lens"]))
            check(j["request_rate"] == 20 and len(j["ttfts"]) == 5, "poisson: metadata / detail")
        j = bench(linfer_bench, server, out, "shared_prefix", "--workload", "shared_prefix",
                  "--num_prompts", "5", "--prefix_len", "16", "--num_prefixes", "2",
                  "--input_len", "8", "--output_len", "4")
        if j:
            check_run("shared_prefix", j, 5, 5 * (16 + 8), 5 * 4)
        csv_path = os.path.join(out, "sweep.csv")
        j = bench(linfer_bench, server, out, "sweep", "--num_prompts", "4", "--input_len", "8",
                  "--output_len", "4", "--sweep_concurrency", "1,2", "--csv", csv_path)
        if j:
            check(len(j["runs"]) == 2, "sweep: two runs")
            for run, c in zip(j["runs"], [1, 2]):
                check_run(f"sweep c={c}", run, 4, 32, 16, cap=c)
            with open(csv_path) as f:
                rows = list(csv.DictReader(f))
            check([r["max_concurrency"] for r in rows] == ["1", "2"], "sweep: CSV rows")
        check_multiturn(linfer_bench, server, out)
        # Bounded in time: 40 requests at 10/s cannot all be sent within --duration_s 1.
        t = time.monotonic()
        j = bench(linfer_bench, server, out, "capped", "--num_prompts", "40", "--input_len", "8",
                  "--output_len", "4", "--request_rate", "10", "--duration_s", "1")
        if j:
            check(j["not_sent"] > 0 and j["failed"] == 0 and
                  j["completed"] + j["not_sent"] + j["cut_at_time_cap"] == 40,
                  f"capped: not_sent {j['not_sent']} completed {j['completed']} "
                  f"cut {j['cut_at_time_cap']} failed {j['failed']}")
            check(time.monotonic() - t < 5, "capped: did not stop by itself")
    # With the prefix cache (the server's default), resent histories are served from it.
    with Server(linfer, model) as srv:
        j = bench(linfer_bench, srv.address, out, "multiturn_cached", "--workload", "multiturn",
                  "--conversations", "2", "--turns", "3", "--input_len", "8", "--output_len", "4")
        if j:
            h = j["history"]["per_turn"]
            check(all(t["mean_cached_tokens"] > 0 for t in h[1:]),
                  f"history with the prefix cache: cached per turn "
                  f"{[t['mean_cached_tokens'] for t in h]}")
    return finish()


def check_multiturn(linfer_bench, server, out):
    n, m, inp, outp = 2, 3, 8, 4
    csv_path = os.path.join(out, "turns.csv")
    j = bench(linfer_bench, server, out, "multiturn", "--workload", "multiturn",
              "--conversations", str(n), "--turns", str(m), "--input_len", str(inp),
              "--output_len", str(outp), "--csv", csv_path)
    if not j:
        return
    hist_in = n * sum(t * inp + (t - 1) * outp for t in range(1, m + 1))
    check_run("multiturn/sessions", j["sessions"], n * m, n * m * inp, n * m * outp, cap=n)
    check_run("multiturn/history", j["history"], n * m, hist_in, n * m * outp, cap=n)
    for mode in ["sessions", "history"]:
        turns = j[mode]["per_turn"]
        check(len(turns) == m and all(t["count"] == n for t in turns), f"{mode}: per-turn counts")
    s, h = j["sessions"]["per_turn"], j["history"]["per_turn"]
    check(s[0]["mean_cached_tokens"] == 0 and all(t["mean_cached_tokens"] > 0 for t in s[1:]),
          f"sessions: cached tokens per turn {[t['mean_cached_tokens'] for t in s]}")
    check(all(t["mean_cached_tokens"] == 0 for t in h), "history: nothing cached")
    check([t["mean_prompt_tokens"] for t in h] ==
          [t * inp + (t - 1) * outp for t in range(1, m + 1)], "history: prompt lengths")
    with open(csv_path) as f:
        rows = list(csv.DictReader(f))
    check(len(rows) == 2 * m and rows[0]["mode"] == "sessions", "multiturn: CSV rows")


if __name__ == "__main__":
    sys.exit(main())
