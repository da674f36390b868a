#!/usr/bin/python3
"""The real `linfer serve` under the hardening issue's scenarios: sessions survive a graceful
restart and (on the disk tier) a SIGKILL; clients that stop reading cannot hold memory or slots;
the process is named linfer; TTFT is observed at the first token and cancellations are not errors;
a second signal or an overlong shutdown ends the process; impossible numeric flags are refused;
a lost device ends the process with status 3, sessions it could not save at shutdown with 1.

usage: hardening_test.py LINFER_BINARY FIXTURES_DIR SOURCE_DIR
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testing"))
from harness import Server, check, finish, make_stubs, wait_until  # noqa: E402

T = 30


def stubs():
    import grpc
    from linfer.v1 import generation_pb2 as g, generation_pb2_grpc as gg
    from linfer.v1 import sessions_pb2 as s, sessions_pb2_grpc as sg
    return grpc, g, gg, s, sg


def request(g, ids, max_tokens, session="", temperature=0.0):
    r = g.GenerateRequest(token_ids=g.TokenIds(ids=ids), session_id=session)
    r.sampling.temperature = temperature
    r.stop.max_tokens = max_tokens
    r.stop.ignore_eos = True
    return r


def ids_of(gen, req):
    return [t for m in gen.Generate(req, timeout=T) for t in m.token_ids]


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0


def test_restart(binary, model_dir, tmp):
    grpc, g, gg, s, sg = stubs()
    disk = os.path.join(tmp, "sessions")
    flags = ["--session_disk_dir", disk, "--max_slots", "2", "--session_host_mb", "0"]
    expected = {}
    with Server(binary, model_dir, *flags) as srv:
        ch = grpc.insecure_channel(srv.address)
        gen, ses = gg.GenerationStub(ch), sg.SessionsStub(ch)
        for i in range(4):  # a slot, and (host budget 0) disk
            ses.Create(s.CreateSessionRequest(session_id=f"r{i}"), timeout=T)
            ids_of(gen, request(g, [1 + i, 2, 3], 3, session=f"r{i}"))
        ses.Fork(s.ForkSessionRequest(session_id="r0", new_session_id="probe"), timeout=T)
        expected["continuation"] = ids_of(gen, request(g, [7, 8], 6, session="probe"))
        ses.Delete(s.DeleteSessionRequest(session_id="probe"), timeout=T)
        listed = ses.List(s.ListSessionsRequest(), timeout=T).sessions
        expected["tokens"] = {x.session_id: x.tokens for x in listed}
        tiers = {x.tier for x in listed}
        check("disk" in tiers, f"some sessions are on the disk tier: {tiers}")
        with open(f"/proc/{srv.proc.pid}/comm") as f:
            check(f.read().strip() == "linfer", "the process is named linfer")
        ch.close()
        check(srv.terminate() == 0, "graceful exit")
    modes = {os.stat(os.path.join(disk, f)).st_mode & 0o777 for f in os.listdir(disk)
             if f != ".linfer.lock"}  # (the lock holds nothing; 0644 for other users' servers)
    check(modes == {0o600}, f"session files are 0600: {[oct(m) for m in modes]}")
    with open(os.path.join(disk, "ffffffffffffffff-corrupt.lnfstate"), "wb") as f:
        f.write(b"LNFRSTAT" + os.urandom(100))
    with Server(binary, model_dir, *flags) as srv:
        ch = grpc.insecure_channel(srv.address)
        gen, ses = gg.GenerationStub(ch), sg.SessionsStub(ch)
        listed = ses.List(s.ListSessionsRequest(), timeout=T).sessions
        got = {x.session_id: x.tokens for x in listed}
        check(got == expected["tokens"], f"graceful restart keeps every session: {got}")
        check("skipping" in srv.stderr() and "corrupt" in srv.stderr(),
              "a corrupt file is skipped with a log line")
        check(ids_of(gen, request(g, [7, 8], 6, session="r0")) == expected["continuation"],
              "a restored session continues as before the restart")
        # Crash: SIGKILL. What is on the disk tier survives it.
        ids_of(gen, request(g, [9], 2, session="r1"))  # r1 back in a slot (its file is gone)
        on_disk = {x.session_id for x in ses.List(s.ListSessionsRequest(), timeout=T).sessions
                   if x.tier == "disk"}
        ch.close()
        srv.proc.send_signal(signal.SIGKILL)
        srv.proc.wait(10)
    check(os.path.exists(os.path.join(disk, "ffffffffffffffff-corrupt.lnfstate")),
          "a corrupt file is never deleted silently")
    with Server(binary, model_dir, *flags) as srv:
        ch = grpc.insecure_channel(srv.address)
        ses = sg.SessionsStub(ch)
        after = {x.session_id for x in ses.List(s.ListSessionsRequest(), timeout=T).sessions}
        check(on_disk and on_disk <= after, f"disk-tier sessions survive SIGKILL: {on_disk} ⊆ {after}")
        ch.close()


def test_unsaved_at_shutdown(binary, model_dir, tmp):
    # A shutdown that cannot write the sessions (their directory removed behind the server's
    # back) says so and exits with status 1, so that a supervisor or script sees the loss.
    grpc, g, gg, s, sg = stubs()
    disk = os.path.join(tmp, "vanishing")
    with Server(binary, model_dir, "--session_disk_dir", disk) as srv:
        ch = grpc.insecure_channel(srv.address)
        gen, ses = gg.GenerationStub(ch), sg.SessionsStub(ch)
        ses.Create(s.CreateSessionRequest(session_id="kept"), timeout=T)
        ids_of(gen, request(g, [1, 2, 3], 2, session="kept"))
        ch.close()
        shutil.rmtree(disk)
        rc = srv.terminate()
        err = srv.stderr()
        check(rc == 1, f"a shutdown that lost sessions exits with 1: {rc}")
        check("not everything was saved" in err and "1 of 1 not written" in err,
              f"and says what was lost: {err[-400:]!r}")


def test_slow_readers(binary, model_dir):
    grpc, g, gg, s, sg = stubs()
    with Server(binary, model_dir, "--stream_stall_timeout_s", "2") as srv:
        # A client that never reads: a small receive window and no BDP probing.
        opts = [("grpc.http2.bdp_probe", 0), ("grpc.http2.lookahead_bytes", 1024),
                ("grpc.max_receive_message_length", 1 << 20)]
        chans = [grpc.insecure_channel(srv.address, options=opts) for _ in range(4)]
        rss0 = rss_mb(srv.proc.pid)
        calls = [gg.GenerationStub(c).Generate(request(g, [1, 2, 3], 30000, temperature=1.0),
                                              timeout=120) for c in chans]
        time.sleep(1)
        freed = wait_until(lambda: srv.metric("linfer_requests_running") == 0
                           and srv.metric("linfer_state_slots_used") == 0, timeout=30)
        check(freed, "requests of clients that stop reading end and free their slots: running "
              f"{srv.metric('linfer_requests_running')}, slots {srv.metric('linfer_state_slots_used')}")
        cancelled = [l for l in srv.metrics().splitlines()
                     if l.startswith("linfer_requests_finished_total{")
                     and 'finish_reason="cancelled"' in l]
        check(cancelled and float(cancelled[0].split()[-1]) == 4,
              f"the stall watchdog cancelled the four non-reading streams: {cancelled}")
        grown = rss_mb(srv.proc.pid) - rss0
        check(grown < 64, f"server memory stays bounded ({grown:.0f} MB more)")
        for c in calls:
            c.cancel()
        for c in chans:
            c.close()
        ch = grpc.insecure_channel(srv.address)
        check(len(ids_of(gg.GenerationStub(ch), request(g, [1], 5))) == 5,
              "the server still serves others")
        ch.close()


def test_metrics(binary, model_dir):
    grpc, g, gg, s, sg = stubs()
    with Server(binary, model_dir) as srv:
        ch = grpc.insecure_channel(srv.address)
        gen = gg.GenerationStub(ch)
        call = gen.Generate(request(g, [1, 2], 30000), timeout=60)
        next(iter(call))
        observed = wait_until(lambda: srv.metric("linfer_time_to_first_token_seconds_count") == 1,
                              timeout=10)
        check(observed, "TTFT is observed when the first token is sent, before the request ends")
        call.cancel()
        wait_until(lambda: srv.metric("linfer_requests_running") == 0, timeout=10)
        errors = srv.metric("linfer_request_errors_total") or 0
        check(errors == 0, f"a cancelled request is not counted as an error ({errors})")
        parts = {l.split('part="')[1].split('"')[0]: float(l.rsplit(" ", 1)[1])
                 for l in srv.metrics().splitlines()
                 if l.startswith("linfer_step_seconds_total{")}
        check(set(parts) == {"forward", "prefix_snapshots", "scheduler", "other"} and
              parts["forward"] > 0, f"linfer_step_seconds_total by part: {parts}")
        # Calls that reach their gRPC deadline count as deadlines, not cancels (the client's
        # timer cancelled most of them before the server's noticed).
        def finished(reason):
            lines = [l for l in srv.metrics().splitlines()
                     if l.startswith("linfer_requests_finished_total{")
                     and f'finish_reason="{reason}"' in l]
            return float(lines[0].split()[-1]) if lines else 0.0
        deadlines, cancels = finished("deadline"), finished("cancelled")
        codes = []
        for _ in range(8):
            try:
                ids_of_with_timeout = [t for m in gen.Generate(request(g, [1, 2], 30000),
                                                               timeout=0.3) for t in m.token_ids]
                codes.append(f"OK {len(ids_of_with_timeout)}")
            except grpc.RpcError as e:
                codes.append(e.code().name)
        wait_until(lambda: srv.metric("linfer_requests_running") == 0, timeout=10)
        check(codes == ["DEADLINE_EXCEEDED"] * 8, f"every call ran out of time: {codes}")
        check(finished("deadline") - deadlines == 8 and finished("cancelled") == cancels,
              f"8 deadlines counted as such: deadline +{finished('deadline') - deadlines}, "
              f"cancelled +{finished('cancelled') - cancels}")
        info = [l for l in srv.metrics().splitlines() if l.startswith("linfer_build_info{")]
        check(info and 'device="cpu"' in info[0] and "version=" in info[0],
              f"linfer_build_info: {info}")
        check("config: model" in srv.stderr(), "a start-up line with the effective configuration")
        # --max_step_tokens 0 (the default) goes by the device: 128 on the CPU.
        check("max_step_tokens 128 (by device)" in srv.stderr(),
              "the step budget by device on the CPU: 128")
        ch.close()


def test_shutdown_limits(binary, model_dir):
    grpc, g, gg, s, sg = stubs()
    # A second SIGTERM while in-flight requests drain ends the process at once, with status 1.
    with Server(binary, model_dir, "--drain_timeout_s", "60") as srv:
        ch = grpc.insecure_channel(srv.address)
        call = gg.GenerationStub(ch).Generate(request(g, [1, 2], 30000), timeout=120)
        next(iter(call))
        srv.proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        check(srv.proc.poll() is None, "still draining 0.5 s after the first SIGTERM")
        start = time.monotonic()
        rc = srv.terminate(timeout=20)
        elapsed = time.monotonic() - start
        check(rc == 1 and elapsed < 5, f"a second SIGTERM exits at once with 1: {rc} after "
              f"{elapsed:.1f} s")
        check("a second signal during the shutdown" in srv.stderr(),
              f"the second signal is logged: {srv.stderr()[-300:]!r}")
        call.cancel()
        ch.close()
    # A shutdown that outlasts --drain_timeout_s + --shutdown_timeout_s is cut short: here the
    # HTTP server would wait 2 s for a stream's client, which reads nothing, to take its end.
    with Server(binary, model_dir, "--drain_timeout_s", "0", "--shutdown_timeout_s",
                "0.3") as srv:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", srv.http_port))
        body = json.dumps({"prompt": [1, 2, 3], "max_tokens": 30000, "stream": True,
                           "ignore_eos": True}).encode()
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                     b"application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        time.sleep(1)  # the stream fills the socket's buffers
        start = time.monotonic()
        rc = srv.terminate(timeout=20)
        elapsed = time.monotonic() - start
        check(rc == 1 and elapsed < 1.8, f"the shutdown is cut after 0.3 s: exit {rc} after "
              f"{elapsed:.1f} s")
        check("the shutdown took longer than --drain_timeout_s + --shutdown_timeout_s" in
              srv.stderr(), f"the cut is logged: {srv.stderr()[-300:]!r}")
        sock.close()
    # Impossible values are refused by name before the model loads.
    for flag, value in [("--shutdown_timeout_s", "0"), ("--drain_timeout_s", "nan"),
                        ("--session_host_mb", str(1 << 62)), ("--workers", "-1"),
                        ("--stream_stall_timeout_s", "0"), ("--stored_responses", "-1")]:
        p = subprocess.run([binary, "serve", "--model", model_dir, flag, value, "--port", "0",
                            "--http_port", "0"], capture_output=True, text=True, timeout=60)
        check(p.returncode != 0 and f"{flag} must be" in p.stderr,
              f"{flag} {value}: refused, naming the flag ({p.returncode}, {p.stderr[-200:]!r})")


def test_device_lost(binary, model_dir, tmp):
    """A lost device (LINFER_TEST_FORWARD_FAULT stands in for one): the stream in flight ends
    UNAVAILABLE naming it, and the process drains and exits on its own with status 3 (so that
    its supervisor restarts it), writing the sessions held in host RAM to the disk tier and
    not those the device's memory held."""
    grpc, g, gg, s, sg = stubs()
    disk = os.path.join(tmp, "lost-sessions")
    with Server(binary, model_dir, "--session_disk_dir", disk,
                env={"LINFER_TEST_FORWARD_FAULT": "lost:20"}) as srv:
        ch = grpc.insecure_channel(srv.address)
        gen, ses = gg.GenerationStub(ch), sg.SessionsStub(ch)
        ses.Create(s.CreateSessionRequest(session_id="in_slot"), timeout=T)
        ids_of(gen, request(g, [1, 2, 3], 3, session="in_slot"))
        blob = b"".join(m.data for m in ses.Export(
            s.ExportSessionRequest(session_id="in_slot"), timeout=T))

        def chunks():
            yield s.StateChunk(session_id="in_ram", data=blob)
        ses.Import(chunks(), timeout=T)
        tiers = {x.session_id: x.tier for x in ses.List(s.ListSessionsRequest(), timeout=T).sessions}
        check(tiers == {"in_slot": "slot", "in_ram": "host"}, f"one session a tier: {tiers}")
        try:
            ids_of(gen, request(g, [4, 5], 30000))
            check(False, "the stream outlives a lost device")
        except grpc.RpcError as e:
            check(e.code() == grpc.StatusCode.UNAVAILABLE and
                  "device failed and cannot be used again" in e.details() and
                  "LINFER_TEST_FORWARD_FAULT" in e.details(),
                  f"the stream ends UNAVAILABLE naming the device's error: {e.code()} {e.details()}")
        ch.close()
        try:
            rc = srv.proc.wait(30)
        except subprocess.TimeoutExpired:
            rc = None
        check(rc == 3, f"the server exits on its own with status 3: {rc}")
        with open(srv.log.name, errors="replace") as f:
            log = f.read()
        check("device is lost: draining, then exiting with status 3" in log,
              f"the exit is logged: {log[-400:]!r}")
        check("1 held in the lost device's memory are gone" in log,
              f"the lost session is logged: {log[-400:]!r}")
    with Server(binary, model_dir, "--session_disk_dir", disk) as srv:
        ch = grpc.insecure_channel(srv.address)
        ses = sg.SessionsStub(ch)
        after = {x.session_id for x in ses.List(s.ListSessionsRequest(), timeout=T).sessions}
        check(after == {"in_ram"}, f"only the host tier's session was written: {after}")
        ch.close()
    # A malformed test hook is refused at start.
    p = subprocess.run([binary, "serve", "--model", model_dir, "--port", "0", "--http_port", "0"],
                       capture_output=True, text=True, timeout=60,
                       env={**os.environ, "LINFER_TEST_FORWARD_FAULT": "lost"})
    check(p.returncode != 0 and "expected lost:N or error:N" in p.stderr,
          f"a malformed LINFER_TEST_FORWARD_FAULT is refused: {p.returncode} {p.stderr[-200:]!r}")


def main():
    binary, fixtures, source = sys.argv[1], sys.argv[2], sys.argv[3]
    model_dir = os.path.join(fixtures, "gdn_default")
    tmp = tempfile.mkdtemp(prefix="linfer-hardening-")
    try:
        make_stubs(source, tmp)
        for name, fn, args in [("restart", test_restart, [binary, model_dir, tmp]),
                               ("unsaved", test_unsaved_at_shutdown, [binary, model_dir, tmp]),
                               ("slow readers", test_slow_readers, [binary, model_dir]),
                               ("metrics", test_metrics, [binary, model_dir]),
                               ("shutdown limits", test_shutdown_limits, [binary, model_dir]),
                               ("device lost", test_device_lost, [binary, model_dir, tmp])]:
            try:
                fn(*args)
            except Exception as e:  # noqa: BLE001 - a crash fails the group only
                check(False, f"{name}: {type(e).__name__}: {e}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
