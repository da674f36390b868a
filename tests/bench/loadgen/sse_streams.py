#!/usr/bin/python3
"""Many concurrent SSE streams on loopback: starts `linfer serve` (free ports, --max_running N so
every stream is generating at once) and sends N streaming /v1/completions at t=0 with
linfer_bench --backend openai --max_concurrency N: one connection per stream, all open together.
Passes when every stream completes with data: [DONE] and its exact token count, and the peak
number of streams open at once is N. Prints linfer_bench's report and the server's peak of
running requests (sampled from /metrics).

usage: sse_streams.py LINFER LINFER_BENCH MODEL_DIR [N=1000] [OUTPUT_LEN=32]
"""
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "testing"))
from harness import Server, check, finish  # noqa: E402


def main():
    linfer, linfer_bench, model = sys.argv[1:4]
    n = int(sys.argv[4]) if len(sys.argv) > 4 else 1000
    output_len = int(sys.argv[5]) if len(sys.argv) > 5 else 32
    result = os.path.join(tempfile.mkdtemp(prefix="linfer-sse-"), "sse.json")
    with Server(linfer, model, "--max_running", str(n), "--max_waiting", str(2 * n),
                "--log_stats_interval_s", "0") as srv:
        peak = [0]
        stop = threading.Event()

        def sample():
            while not stop.is_set():
                try:
                    peak[0] = max(peak[0], int(srv.metric("linfer_requests_running") or 0))
                except OSError:
                    pass
                time.sleep(0.2)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        t = time.monotonic()
        r = subprocess.run(
            [linfer_bench, "--backend", "openai", "--http_server", f"127.0.0.1:{srv.http_port}",
             "--server", srv.address, "--num_prompts", str(n), "--max_concurrency", str(n),
             "--input_len", "16", "--output_len", str(output_len), "--progress=false",
             "--duration_s", "600", "--result_json", result],
            capture_output=True, text=True, timeout=900)
        stop.set()
        sampler.join()
        print(r.stdout, r.stderr[-3000:], flush=True)
        check(r.returncode == 0, f"linfer_bench exit {r.returncode}")
        if r.returncode == 0:
            with open(result) as f:
                j = json.load(f)
            check(j["completed"] == n and j["failed"] == 0,
                  f"{j['completed']} of {n} streams ended with [DONE] ({j['failed']} failed: "
                  f"{j.get('errors', [])[:3]})")
            check(j["length_mismatches"] == 0 and j["total_output_tokens"] == n * output_len,
                  f"every stream carried its {output_len} tokens")
            check(j["max_concurrent_requests"] == n,
                  f"{j['max_concurrent_requests']} streams open at once (of {n})")
            print(f"{n} concurrent SSE streams: {j['completed']} completed with [DONE], peak "
                  f"{j['max_concurrent_requests']} open at once (client), {peak[0]} running at "
                  f"once (server /metrics), {time.monotonic() - t:.1f} s wall", flush=True)
        check(srv.proc.poll() is None, "the server is still running")
    return finish()


if __name__ == "__main__":
    sys.exit(main())
