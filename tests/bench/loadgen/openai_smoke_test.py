"""Smoke test of linfer_bench's OpenAI-HTTP mode: starts `linfer serve` on a tiny fixture model
(loopback, free ports) and runs a handful of streamed /v1/completions, with the gRPC address
pointing nowhere so nothing can go over gRPC; then a small --backend compare run (the same
requests over HTTP and gRPC). Checks the counts, exact token totals and the metric keys.
Usage: openai_smoke_test.py LINFER LINFER_BENCH MODEL_DIR"""
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "testing"))
from harness import Server, check, finish  # noqa: E402
from smoke_test import bench, check_run  # noqa: E402


def main():
    linfer, linfer_bench, model = sys.argv[1:4]
    out = tempfile.mkdtemp(prefix="linfer-bench-openai-smoke-")
    with Server(linfer, model) as srv:
        http = f"127.0.0.1:{srv.http_port}"
        before = srv.metric("linfer_generation_tokens_total") or 0
        # No gRPC server at 127.0.0.1:1: every request must go over HTTP.
        j = bench(linfer_bench, "127.0.0.1:1", out, "openai", "--backend", "openai",
                  "--http_server", http, "--vocab_size", "96", "--num_prompts", "8",
                  "--input_len", "12", "--output_len", "6", "--max_concurrency", "4",
                  "--save_detailed")
        if j:
            check_run("openai", j, 8, 8 * 12, 8 * 6, cap=4)
            check(j["backend"] == "openai", "openai: backend recorded")
            check(all(len(itl) == 5 for itl in j["itls"]),
                  f"openai: one SSE event per token (5 gaps each): {j['itls']}")
            generated = (srv.metric("linfer_generation_tokens_total") or 0) - before
            check(generated >= 8 * 6, f"openai: the server generated the tokens ({generated})")
        # Requests still streaming at --duration_s end as cut at the cap (libevent never runs a
        # cancelled request's done callback: the bench crashed here), and the console prints the
        # percentiles asked for.
        # 16 streams at once, so that some are mid-stream when the cap comes (4 fast ones could all
        # finish just before it: nothing cut, the cancel path not taken); at most three tries.
        for attempt in range(3):
            t = time.monotonic()
            r = subprocess.run([linfer_bench, "--server", "127.0.0.1:1", "--backend", "openai",
                                "--http_server", http, "--vocab_size", "96", "--num_prompts",
                                "400", "--input_len", "8", "--output_len", "1500",
                                "--max_concurrency", "16", "--duration_s", "1",
                                "--progress=false", "--num_warmups", "0",
                                "--metric_percentiles", "50,95"],
                               capture_output=True, text=True, timeout=30)
            cut = "In flight at --duration_s (cancelled):" in r.stdout
            if r.returncode != 0 or cut:
                break
        check(r.returncode == 0 and cut and time.monotonic() - t < 10,
              f"openai capped: {r.returncode} (try {attempt + 1})\n{r.stdout[-600:]}")
        check(" p95 " in r.stdout and " p99 " not in r.stdout,
              f"openai capped: the percentiles asked for ({r.stdout[-300:]})")
        # A bad path or a server that is not there fails fast and says so.
        t = time.monotonic()
        r = subprocess.run([linfer_bench, "--backend", "openai", "--http_server", "127.0.0.1:1",
                            "--vocab_size", "96", "--ready_timeout_s", "1", "--progress=false"],
                           capture_output=True, text=True, timeout=30)
        check(r.returncode != 0 and "not ready" in r.stderr and time.monotonic() - t < 10,
              f"openai: no server: fails ({r.returncode}, {r.stderr.strip()[:200]})")
        j = bench(linfer_bench, srv.address, out, "compare", "--backend", "compare",
                  "--http_server", http, "--num_prompts", "6", "--input_len", "10",
                  "--output_len", "5", "--max_concurrency", "3", "--compare_rounds", "2")
        if j:
            check_run("compare/openai", j["openai"], 6, 60, 30, cap=3)
            check_run("compare/grpc", j["grpc"], 6, 60, 30, cap=3)
            check(j["openai"]["backend"] == "openai" and j["grpc"]["backend"] == "grpc",
                  "compare: one run per backend")
            check(len(j["openai_runs"]) == 2 and len(j["grpc_runs"]) == 2,
                  "compare: two rounds of each")
            check(j["openai_grpc_output_throughput_ratio"] > 0, "compare: ratio")
    return finish()


if __name__ == "__main__":
    sys.exit(main())
