#!/usr/bin/python3
"""HTTP port probe: every path and method gets an answer, malformed and oversized requests get a
4xx, slow and half-open clients hurt nobody, 200 connections at once are served, a second server
on a busy port refuses to start, a request trickling in is cut at its deadline, connections past the
cap close the idle ones -- and afterwards the server still streams a generation.

usage: http_probe_test.py LINFER_BINARY FIXTURES_DIR SOURCE_DIR
"""
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testing"))
from harness import Server, check, finish, make_stubs  # noqa: E402


def raw(port, data, timeout=5.0, shut=False):
    """Sends raw bytes, returns everything the server answers until it closes or goes quiet."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        try:
            s.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered (and closed) before reading everything
        if shut:
            s.shutdown(socket.SHUT_WR)
        out = b""
        try:
            while True:
                try:
                    b = s.recv(65536)
                except ConnectionResetError:
                    break
                if not b:
                    break
                out += b
                if b"\r\n\r\n" in out and not shut:
                    head, _, body = out.partition(b"\r\n\r\n")
                    n = [int(l.split(b":")[1]) for l in head.split(b"\r\n")
                         if l.lower().startswith(b"content-length:")]
                    if n and len(body) >= n[0]:
                        break
        except socket.timeout:
            pass
        return out


def status_of(resp):
    try:
        return int(resp.split(b" ", 2)[1])
    except (IndexError, ValueError):
        return None


def request(port, method, path, body=b"", version="HTTP/1.1", headers=()):
    lines = [f"{method} {path} {version}", "Host: 127.0.0.1", "Connection: close",
             f"Content-Length: {len(body)}", *headers]
    return raw(port, ("\r\n".join(lines) + "\r\n\r\n").encode() + body)


def health_ok(port, timeout=2.0):
    t0 = time.monotonic()
    r = request(port, "GET", "/health")
    return status_of(r) == 200 and r.endswith(b"ok\n"), time.monotonic() - t0


def test_routes(port):
    for path in ["/", "/favicon.ico", "/v1/nothing", "/metricsx", "/healthz", "/metrics/", "//health",
                 "/%00", "/" + "a" * 5000]:
        r = request(port, "GET", path)
        check(status_of(r) == 404, f"GET {path[:40]} -> 404 (got {r[:60]!r})")
        body = r.partition(b"\r\n\r\n")[2]
        try:
            check(json.loads(body)["error"]["code"] == 404, f"GET {path[:40]}: JSON error body")
        except (ValueError, KeyError, TypeError):
            check(False, f"GET {path[:40]}: JSON error body, got {body[:80]!r}")
    for method in ["POST", "PUT", "DELETE", "PATCH", "OPTIONS"]:
        r = request(port, method, "/health", b"{}")
        check(status_of(r) == 405 and b"Allow: GET" in r, f"{method} /health -> 405 with Allow")
    r = request(port, "HEAD", "/health")
    check(status_of(r) == 200 and r.endswith(b"\r\n\r\n"), f"HEAD /health -> 200, no body: {r!r}")
    r = request(port, "GET", "/health", version="HTTP/1.0")
    check(status_of(r) == 200 and r.endswith(b"ok\n"), f"HTTP/1.0 GET /health: {r!r}")
    r = request(port, "GET", "/metrics")
    check(status_of(r) == 200 and b"linfer_requests_running" in r, "GET /metrics")
    for method in ["GET", "POST"]:  # vLLM's /ping (SageMaker): as /health
        r = request(port, method, "/ping")
        check(status_of(r) == 200 and r.endswith(b"ok\n"), f"{method} /ping -> 200 ok: {r[-40:]!r}")
    r = request(port, "GET", "/version")
    try:
        version = json.loads(r.partition(b"\r\n\r\n")[2])["version"]
    except (ValueError, KeyError, TypeError):
        version = None
    check(status_of(r) == 200 and isinstance(version, str) and version.count(".") == 2,
          f"GET /version -> {{\"version\": \"x.y.z\"}}: {r[-60:]!r}")


def test_malformed(port):
    for data in [b"GARBAGE\r\n\r\n", b"GET\r\n\r\n", b"GET / HTTP/9.9\r\n\r\n",
                 b"\x00\x01\x02\xff" * 100 + b"\r\n\r\n", b"GET / HTTP/1.1\r\nBad Header\r\n\r\n",
                 b"POST /health HTTP/1.1\r\nContent-Length: -5\r\n\r\n",
                 b"POST /health HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
                 os.urandom(200000)]:
        r = raw(port, data, timeout=5)
        code = status_of(r)
        check(r == b"" or (code is not None and 400 <= code < 500),
              f"malformed {data[:20]!r}...: a 4xx or a closed connection, got {r[:60]!r}")
        check(health_ok(port)[0], f"healthy after malformed {data[:20]!r}")
    big = "X-Big: " + "a" * 100_000
    r = request(port, "GET", "/health", headers=[big])
    check(status_of(r) in (400, 413, 431) or r == b"", f"100 KB header -> 4xx, got {r[:60]!r}")
    r = request(port, "GET", "/health", headers=[f"X-Header-{i}: value" for i in range(10000)])
    check(status_of(r) in (400, 413, 431) or r == b"", f"10000 headers -> 4xx, got {r[:60]!r}")
    body = b"x" * (40 << 20)
    r = request(port, "POST", "/health", body)
    check(status_of(r) in (405, 413) or r == b"", f"40 MB body -> 405/413, got {r[:60]!r}")
    check(health_ok(port)[0], "healthy after oversized requests")


def test_slow_clients(port):
    # Slow-loris: connections that send half a request and stall must not delay anyone.
    stalled = []
    for _ in range(16):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        stalled.append(s)
    half_body = socket.create_connection(("127.0.0.1", port), timeout=5)
    half_body.sendall(b"POST /health HTTP/1.1\r\nContent-Length: 1000\r\n\r\nabc")
    stalled.append(half_body)
    worst = 0.0
    for _ in range(10):
        ok, dt = health_ok(port)
        check(ok, "health answered while 17 connections stall")
        worst = max(worst, dt)
    check(worst < 1.0, f"health stays fast with stalled clients (worst {worst:.3f} s)")
    t0 = time.monotonic()
    r = request(port, "GET", "/metrics")
    check(status_of(r) == 200 and time.monotonic() - t0 < 1.0, "metrics fast with stalled clients")
    # The idle timeout (--http_idle_timeout_s 2) closes them.
    closed = 0
    for s in stalled:
        s.settimeout(6)
        try:
            data = s.recv(100)
            closed += 1 if data == b"" or data.startswith(b"HTTP/1.1 4") else 0
        except (socket.timeout, ConnectionResetError):
            closed += 1 if isinstance(sys.exc_info()[1], ConnectionResetError) else 0
        s.close()
    check(closed == len(stalled), f"stalled connections closed by the idle timeout ({closed})")


def test_many_connections(port):
    socks, results = [], []
    for _ in range(200):
        socks.append(socket.create_connection(("127.0.0.1", port), timeout=10))
    for s in socks:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    for s in socks:
        data = b""
        try:
            while True:
                b = s.recv(4096)
                if not b:
                    break
                data += b
        except socket.timeout:
            pass
        results.append(status_of(data) == 200)
        s.close()
    check(all(results), f"200 simultaneous connections all answered ({sum(results)}/200)")


def closed_by_server(s, wait):
    """Whether the server closes (EOF or reset) the socket within `wait` seconds."""
    s.settimeout(wait)
    try:
        while True:
            if s.recv(4096) == b"":
                return True
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def test_trickling_request(port):
    # Slow-loris that defeats the idle timeout (2 s): a header line every 0.5 s. The request
    # deadline (--http_request_timeout_s 3) closes it about 3 s after its first byte.
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    t0 = time.monotonic()
    s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
    cut = None
    for i in range(24):
        try:
            s.sendall(b"X-Trickle-%d: y\r\n" % i)
        except (BrokenPipeError, ConnectionResetError):
            cut = time.monotonic() - t0
            break
        if closed_by_server(s, 0.5):
            cut = time.monotonic() - t0
            break
    s.close()
    check(cut is not None and 2.5 <= cut <= 6.0,
          f"a trickling request is cut at the request deadline (after {cut} s)")
    m = request(port, "GET", "/metrics").decode(errors="replace")
    check('linfer_http_connections_closed_total{model_name="gdn_default",reason="request_timeout"} 1'
          in m, "the cut shows in linfer_http_connections_closed_total")
    check(health_ok(port)[0], "healthy after the trickling client")


def test_connection_cap(port):
    # 300 idle connections against --http_max_connections 256: the ones waiting longest are
    # closed to make room, and a client arriving after them is answered at once.
    idle = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(300)]
    ok, dt = health_ok(port)
    check(ok and dt < 1.0, f"health answered at once past the connection cap ({dt:.3f} s)")
    closed = sum(closed_by_server(s, 0.05) for s in idle[:60])
    check(closed >= 45, f"the oldest idle connections were closed for room ({closed} of the first 60)")
    check(not closed_by_server(idle[-1], 0.2), "the newest idle connection stays open")
    m = request(port, "GET", "/metrics").decode(errors="replace")
    open_now = [line for line in m.splitlines() if line.startswith("linfer_http_connections{")]
    check(open_now and 200 <= float(open_now[0].split()[-1]) <= 257,
          f"linfer_http_connections counts the open ones ({open_now})")
    check('reason="connection_cap"} 0' not in m and 'reason="connection_cap"}' in m,
          "linfer_http_connections_closed_total counts the ones closed for room")
    for s in idle:
        s.close()
    check(health_ok(port)[0], "healthy after the idle connections")


def test_slow_reader(port):
    # A client that pipelines requests and reads 4 KB every 0.5 s through a tiny receive window:
    # the answers wait in the server's output buffer. libevent's write timeout (the idle timeout,
    # 30 s here) would take far longer, and never fires when the client drains a third of the
    # socket's send buffer in time. Under --http_min_send_rate 65536 over --http_write_timeout_s 2
    # it is dropped.
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", port))
    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" * 1000)
    s.setblocking(False)
    counter = 'linfer_http_connections_closed_total{model_name="gdn_default",reason="slow_reader"} '
    seen, t0 = [], time.monotonic()
    while seen != [counter + "1"] and time.monotonic() - t0 < 8:
        time.sleep(0.5)
        try:
            s.recv(4096)
        except BlockingIOError:
            pass
        m = request(port, "GET", "/metrics").decode(errors="replace")
        seen = [line for line in m.splitlines() if line.startswith(counter)]
    dt = time.monotonic() - t0
    check(seen == [counter + "1"] and dt >= 1.5,
          f"a client not reading is dropped under the send rate ({dt:.1f} s, {seen})")
    s.setblocking(True)
    check(closed_by_server(s, 5), "the slow reader's connection is closed")
    s.close()
    check(health_ok(port)[0], "healthy after the slow reader")


def test_vanishing_client(port):
    # A client that sends a request and resets the connection at once.
    for _ in range(20):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        s.close()
    check(health_ok(port)[0], "healthy after 20 vanishing clients")


def test_port_conflicts(binary, model_dir, srv):
    for flag, port, other in [("--port", srv.grpc_port, "--http_port"),
                              ("--http_port", srv.http_port, "--port")]:
        p = subprocess.run([binary, "serve", "--model", model_dir, flag, str(port), other, "0"],
                           capture_output=True, text=True, timeout=60)
        check(p.returncode != 0, f"second server on busy {flag} {port} exits non-zero")
        check("address already in use" in p.stderr,
              f"busy {flag}: says 'address already in use': {p.stderr[-300:]!r}")


def test_bad_http_flags(binary, model_dir):
    # Each impossible --http_* value stops `serve` before the model loads, naming the flag.
    for flag, value in [("--http_request_timeout_s", "0"), ("--http_max_connections", "-1"),
                        ("--http_workers", "0"), ("--http_max_body_mb", "99999999999"),
                        ("--http_min_send_rate", "-1"), ("--http_min_send_rate", str(1 << 62))]:
        p = subprocess.run([binary, "serve", "--model", model_dir, flag, value, "--port", "0",
                            "--http_port", "0"], capture_output=True, text=True, timeout=60)
        check(p.returncode != 0 and flag in p.stderr,
              f"{flag} {value}: refused, naming the flag ({p.returncode}, {p.stderr[-200:]!r})")


def test_still_streams(srv, source_dir):
    with tempfile.TemporaryDirectory() as d:
        make_stubs(source_dir, d)
        import grpc
        from linfer.v1 import generation_pb2, generation_pb2_grpc
        channel = grpc.insecure_channel(srv.address)
        stub = generation_pb2_grpc.GenerationStub(channel)
        req = generation_pb2.GenerateRequest(token_ids=generation_pb2.TokenIds(ids=[1, 2, 3]))
        req.stop.max_tokens = 12
        req.stop.ignore_eos = True
        ids = []
        for msg in stub.Generate(req, timeout=60):
            ids.extend(msg.token_ids)
        check(len(ids) == 12, f"a generation still streams after the probes ({len(ids)} tokens)")
        channel.close()


def main():
    binary, fixtures, source_dir = sys.argv[1], sys.argv[2], sys.argv[3]
    model_dir = os.path.join(fixtures, "gdn_default")
    with Server(binary, model_dir, "--http_idle_timeout_s", "2", "--http_request_timeout_s", "3",
                "--http_max_connections", "256") as srv:
        port = srv.http_port
        test_routes(port)
        test_malformed(port)
        test_slow_clients(port)
        test_many_connections(port)
        test_trickling_request(port)
        test_connection_cap(port)
        test_vanishing_client(port)
        test_port_conflicts(binary, model_dir, srv)
        test_bad_http_flags(binary, model_dir)
        test_still_streams(srv, source_dir)
        check(srv.proc.poll() is None, "the server is still running")
    with Server(binary, model_dir, "--http_write_timeout_s", "2",
                "--http_min_send_rate", "65536") as srv:
        test_slow_reader(srv.http_port)
        check(srv.proc.poll() is None, "the server is still running")
    return finish()


if __name__ == "__main__":
    sys.exit(main())
