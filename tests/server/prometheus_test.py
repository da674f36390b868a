#!/usr/bin/env python3
"""A real Prometheus (Debian's /usr/bin/prometheus, on loopback) scrapes `linfer serve`; after a
generation through gRPC, Prometheus's HTTP API shows the generation-token counter and the
time-to-first-token histogram moving.
Usage: /usr/bin/python3 prometheus_test.py LINFER_BINARY FIXTURES_DIR SOURCE_DIR"""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testing"))
from harness import Server, check, finish, make_stubs, wait_until  # noqa: E402

PROMETHEUS = "/usr/bin/prometheus"
WAIT_S = 60


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url):
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return json.loads(r.read().decode())
    except (OSError, ValueError):
        return None


class Prometheus:
    def __init__(self, target, tmp):
        self.port = free_port()
        config = os.path.join(tmp, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
                    "scrape_configs:\n"
                    "  - job_name: linfer\n"
                    f"    static_configs: [{{targets: ['{target}']}}]\n")
        self.log = open(os.path.join(tmp, "prometheus.log"), "w")
        self.proc = subprocess.Popen(
            [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp}/data",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT)
        self.base = f"http://127.0.0.1:{self.port}"

    def query(self, q):
        """The float values of an instant query's vector (empty when it has none)."""
        r = get_json(f"{self.base}/api/v1/query?" + urllib.parse.urlencode({"query": q}))
        if not r or r.get("status") != "success":
            return []
        return [float(x["value"][1]) for x in r["data"]["result"]]

    def target_up(self):
        r = get_json(f"{self.base}/api/v1/targets")
        targets = (r or {}).get("data", {}).get("activeTargets", [])
        return any(t.get("health") == "up" for t in targets)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.close()


def generate(address):
    import grpc
    from linfer.v1 import generation_pb2 as g
    from linfer.v1 import generation_pb2_grpc
    with grpc.insecure_channel(address) as channel:
        stub = generation_pb2_grpc.GenerationStub(channel)
        req = g.GenerateRequest(token_ids=g.TokenIds(ids=[1, 2, 3, 4]),
                                sampling=g.SamplingParams(temperature=0.0))
        req.stop.max_tokens = 20
        return sum(len(m.token_ids) for m in stub.Generate(req, timeout=30))


def main():
    binary, fixtures, source = sys.argv[1], sys.argv[2], sys.argv[3]
    if not os.path.exists(PROMETHEUS):
        print(f"FAIL: {PROMETHEUS} is missing: run deploy/setup.sh (Debian package prometheus)")
        return 1
    tmp = tempfile.mkdtemp(prefix="linfer-prom-test-")
    prom = None
    try:
        make_stubs(source, os.path.join(tmp, "stubs"))
        with Server(binary, os.path.join(fixtures, "gdn_default")) as srv:
            prom = Prometheus(f"127.0.0.1:{srv.http_port}", tmp)
            ready = wait_until(lambda: prom.proc.poll() is not None or prom.target_up(),
                               WAIT_S, 0.5) and prom.proc.poll() is None
            check(ready, "Prometheus is up and its linfer target is healthy")
            check(prom.query("up") == [1.0], f"up == 1: {prom.query('up')}")
            before = prom.query("linfer_generation_tokens_total")
            check(before == [0.0], f"no tokens generated yet: {before}")
            check(generate(srv.address) == 20, "a generation through gRPC")
            moved = wait_until(
                lambda: prom.query("linfer_generation_tokens_total") == [20.0]
                and sum(prom.query("linfer_time_to_first_token_seconds_count")) > 0, WAIT_S, 0.5)
            check(moved, "Prometheus sees the tokens and the TTFT histogram: "
                  f"tokens {prom.query('linfer_generation_tokens_total')}, ttft count "
                  f"{prom.query('linfer_time_to_first_token_seconds_count')}")
            p50 = prom.query(
                "histogram_quantile(0.5, sum by (le) (linfer_e2e_request_latency_seconds_bucket))")
            check(len(p50) == 1 and p50[0] > 0, f"an e2e latency quantile: {p50}")
            check(srv.terminate() == 0, "linfer exits 0 on SIGTERM")
    finally:
        if prom is not None:
            prom.stop()
            if prom.proc.returncode not in (0, None):
                with open(os.path.join(tmp, "prometheus.log"), errors="replace") as f:
                    print("prometheus log:", f.read()[-3000:])
        shutil.rmtree(tmp, ignore_errors=True)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
