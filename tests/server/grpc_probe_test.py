#!/usr/bin/python3
"""Bytes that are not the method's protobuf, sent to every method of linfer.v1 by a raw
python3-grpcio client (identity serializers): each gets INVALID_ARGUMENT naming the method and the
message type, and the server keeps serving valid requests.

usage: grpc_probe_test.py LINFER_BINARY FIXTURES_DIR SOURCE_DIR
"""
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testing"))
from harness import Server, check, finish, make_stubs  # noqa: E402

T = 30

# (method, kind, request type): every RPC of proto/linfer/v1.
METHODS = [
    ("linfer.v1.Generation/Generate", "unary_stream", "GenerateRequest"),
    ("linfer.v1.Generation/Tokenize", "unary_unary", "TokenizeRequest"),
    ("linfer.v1.Generation/Detokenize", "unary_unary", "DetokenizeRequest"),
    ("linfer.v1.Sessions/Create", "unary_unary", "CreateSessionRequest"),
    ("linfer.v1.Sessions/Get", "unary_unary", "GetSessionRequest"),
    ("linfer.v1.Sessions/List", "unary_unary", "ListSessionsRequest"),
    ("linfer.v1.Sessions/Fork", "unary_unary", "ForkSessionRequest"),
    ("linfer.v1.Sessions/Delete", "unary_unary", "DeleteSessionRequest"),
    ("linfer.v1.Sessions/Export", "unary_stream", "ExportSessionRequest"),
    ("linfer.v1.Sessions/Import", "stream_unary", "StateChunk"),
    ("linfer.v1.Models/List", "unary_unary", "ListModelsRequest"),
    ("linfer.v1.Models/Info", "unary_unary", "ModelInfoRequest"),
]

GARBAGE = [
    b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff",  # a varint tag that never ends
    b"\x0a\x40abc",  # field 1, length 64, 3 bytes present
    b"\x07",  # wire type 7 does not exist
    b"\x00\x01",  # field number 0
]


def call_raw(grpc, channel, method, kind, payload):
    """Sends `payload` as the request bytes; returns (code, details)."""
    ident = dict(request_serializer=None, response_deserializer=None)
    try:
        if kind == "unary_unary":
            channel.unary_unary("/" + method, **ident)(payload, timeout=T)
        elif kind == "unary_stream":
            for _ in channel.unary_stream("/" + method, **ident)(payload, timeout=T):
                pass
        else:
            channel.stream_unary("/" + method, **ident)(iter([payload]), timeout=T)
        return grpc.StatusCode.OK, ""
    except grpc.RpcError as e:
        return e.code(), e.details() or ""


def generate(gg, g, channel, ids, max_tokens):
    r = g.GenerateRequest(token_ids=g.TokenIds(ids=ids))
    r.sampling.temperature = 0.0
    r.stop.max_tokens = max_tokens
    r.stop.ignore_eos = True
    return [t for m in gg.GenerationStub(channel).Generate(r, timeout=T) for t in m.token_ids]


def test_garbage(binary, model_dir):
    import grpc
    from linfer.v1 import generation_pb2 as g, generation_pb2_grpc as gg
    from linfer.v1 import models_pb2 as m, models_pb2_grpc as mg
    from linfer.v1 import sessions_pb2 as s
    with Server(binary, model_dir) as srv:
        ch = grpc.insecure_channel(srv.address)
        before = generate(gg, g, ch, [1, 2, 3], 4)
        check(len(before) == 4, "a valid Generate works before the probe")
        for method, kind, type_name in METHODS:
            for payload in GARBAGE:
                code, details = call_raw(grpc, ch, method, kind, payload)
                want = f"{method}: " + ("a message" if kind == "stream_unary" else "request")
                want += f" is not a valid {type_name} protobuf"
                check(code == grpc.StatusCode.INVALID_ARGUMENT and details == want,
                      f"{method} with {payload!r}: {code} {details!r} (want INVALID_ARGUMENT "
                      f"{want!r})")
        # A string field that is not UTF-8 does not parse as proto3 either.
        code, details = call_raw(grpc, ch, "linfer.v1.Generation/Generate", "unary_stream",
                                 b"\x0a\x02\xff\xfe")
        check(code == grpc.StatusCode.INVALID_ARGUMENT and "GenerateRequest" in details,
              f"a text prompt that is not UTF-8: {code} {details!r}")
        # Import: a valid first chunk, then garbage.
        first = s.StateChunk(session_id="probe", data=b"LNFR").SerializeToString()
        try:
            ch.stream_unary("/linfer.v1.Sessions/Import", request_serializer=None,
                            response_deserializer=None)(iter([first, b"\xff\xff"]), timeout=T)
            code, details = grpc.StatusCode.OK, ""
        except grpc.RpcError as e:
            code, details = e.code(), e.details()
        check(code == grpc.StatusCode.INVALID_ARGUMENT and "StateChunk" in (details or ""),
              f"Import with a bad second chunk: {code} {details!r}")
        # The engine's checks are told in the proto's field names.
        for field, value, name in (("stop", [""], "stop.stop[0]"),
                                   ("stop_token_ids", [1 << 30], "stop.stop_token_ids[0]")):
            r = g.GenerateRequest(token_ids=g.TokenIds(ids=[1, 2]))
            getattr(r.stop, field).extend(value)
            try:
                list(gg.GenerationStub(ch).Generate(r, timeout=T))
                code, details = grpc.StatusCode.OK, ""
            except grpc.RpcError as e:
                code, details = e.code(), e.details() or ""
            check(code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith(name),
                  f"stop.{field} = {value}: {code} {details!r} (want one naming {name})")
        # min_tokens: out of range, or above max_tokens (as vLLM), named; in range, the stop
        # token a bias forces comes right after it.
        for mn, mx, name in ((-1, None, "stop.min_tokens must be >= 0"),
                             (5, 4, "stop.min_tokens (5) must be at most stop.max_tokens (4)")):
            r = g.GenerateRequest(token_ids=g.TokenIds(ids=[1, 2]))
            r.stop.min_tokens = mn
            if mx is not None:
                r.stop.max_tokens = mx
            try:
                list(gg.GenerationStub(ch).Generate(r, timeout=T))
                code, details = grpc.StatusCode.OK, ""
            except grpc.RpcError as e:
                code, details = e.code(), e.details() or ""
            check(code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith(name),
                  f"min_tokens {mn}, max_tokens {mx}: {code} {details!r}")
        r = g.GenerateRequest(token_ids=g.TokenIds(ids=[1, 2, 3]))
        r.sampling.temperature = 0.0
        r.sampling.logit_bias[7] = 100.0
        r.stop.stop_token_ids.append(7)
        r.stop.min_tokens = 3
        r.stop.max_tokens = 8
        msgs = list(gg.GenerationStub(ch).Generate(r, timeout=T))
        ids = [t for m in msgs for t in m.token_ids]
        last = msgs[-1] if msgs else None
        check(len(ids) == 4 and 7 not in ids[:3] and ids[3] == 7 and last.finish_reason == "stop"
              and last.stop_token_id == 7,
              f"min_tokens 3 with stop token 7 forced: 3 others, then 7 ({ids}, "
              f"{last and last.finish_reason})")
        # An empty message is a valid (all-default) request: it is not refused as garbage.
        code, details = call_raw(grpc, ch, "linfer.v1.Models/Info", "unary_unary", b"")
        check(code == grpc.StatusCode.OK, f"an empty ModelInfoRequest is valid: {code} {details}")

        check(srv.proc.poll() is None, "the server is still running")
        after = generate(gg, g, ch, [1, 2, 3], 4)
        check(after == before, f"a valid Generate still works afterwards: {after} vs {before}")
        info = mg.ModelsStub(ch).Info(m.ModelInfoRequest(), timeout=T)
        check(info.vocab_size > 0, "Models.Info still works afterwards")
        errors = srv.metric("linfer_request_errors_total") or 0
        check(errors >= len(METHODS) * len(GARBAGE),
              f"the refusals are counted as errors ({errors})")
        ch.close()


def test_transfers(binary, model_dir):
    """Sessions/Export and Import streams share a memory budget (--session_transfer_mb 1 here):
    a transfer past it is refused with RESOURCE_EXHAUSTED instead of the server holding every
    unfinished stream's blob; a cancelled import frees its share and creates no session."""
    import threading
    import grpc
    from linfer.v1 import generation_pb2 as g, generation_pb2_grpc as gg
    from linfer.v1 import sessions_pb2 as s, sessions_pb2_grpc as sg
    with Server(binary, model_dir, "--session_transfer_mb", "1",
                "--stream_stall_timeout_s", "2") as srv:
        ch = grpc.insecure_channel(srv.address)
        stub = sg.SessionsStub(ch)
        stub.Create(s.CreateSessionRequest(session_id="src"), timeout=T)
        r = g.GenerateRequest(token_ids=g.TokenIds(ids=[1, 2, 3]), session_id="src")
        r.stop.max_tokens = 2
        list(gg.GenerationStub(ch).Generate(r, timeout=T))
        blob = b"".join(c.data for c in stub.Export(s.ExportSessionRequest(session_id="src"),
                                                    timeout=T))
        check(len(blob) > 0, f"an export ({len(blob)} bytes)")
        # Export and Import failures count as errors, as every other RPC's do (they never did).
        errors = srv.metric("linfer_request_errors_total") or 0
        for call in (lambda: list(stub.Export(s.ExportSessionRequest(session_id="none"),
                                              timeout=T)),
                     lambda: stub.Import(iter([s.StateChunk(session_id="bad", data=b"junk")]),
                                         timeout=T)):
            try:
                call()
                check(False, "a failed Export or Import")
            except grpc.RpcError:
                pass
        counted = (srv.metric("linfer_request_errors_total") or 0) - errors
        check(counted == 2, f"a failed Export and Import are counted as errors ({counted})")

        def held(chunks, release):
            """Yields `chunks`, then holds the stream open until `release` is set."""
            yield from chunks
            release.wait(30)

        try:  # larger than the whole budget: said so, not "retry"
            stub.Import(iter([s.StateChunk(session_id="huge", data=b"\0" * (2 << 20))]), timeout=T)
            code, details = grpc.StatusCode.OK, ""
        except grpc.RpcError as e:
            code, details = e.code(), e.details() or ""
        check(code == grpc.StatusCode.RESOURCE_EXHAUSTED and "larger than the budget" in details
              and "--session_transfer_mb" in details,
              f"a blob larger than the budget says so ({code} {details!r})")
        release = threading.Event()
        big = s.StateChunk(session_id="big", data=b"\0" * (700 << 10))
        first = stub.Import.future(held([big], release), timeout=T)
        ghost = stub.Import.future(held([s.StateChunk(session_id="ghost", data=blob)], release),
                                   timeout=T)
        import time
        time.sleep(1.0)  # both first chunks are in
        try:
            stub.Import(iter([s.StateChunk(session_id="x", data=b"\0" * (700 << 10))]), timeout=T)
            code, details = grpc.StatusCode.OK, ""
        except grpc.RpcError as e:
            code, details = e.code(), e.details() or ""
        check(code == grpc.StatusCode.RESOURCE_EXHAUSTED and "transfers" in details,
              f"a transfer past the budget: RESOURCE_EXHAUSTED ({code} {details!r})")
        first.cancel()
        ghost.cancel()
        release.set()
        time.sleep(0.5)
        try:
            stub.Get(s.GetSessionRequest(session_id="ghost"), timeout=T)
            code = grpc.StatusCode.OK
        except grpc.RpcError as e:
            code = e.code()
        check(code == grpc.StatusCode.NOT_FOUND,
              f"a cancelled import creates no session ({code})")
        got = stub.Import(iter([s.StateChunk(session_id="copy", data=blob)]), timeout=T)
        check(got.session_id == "copy", "once they are cancelled, an import is taken again")
        # A stream that stops sending (not half-closed) is cancelled after the stall timeout
        # (--stream_stall_timeout_s 2) and gives its share back.
        hold = threading.Event()
        stalled = stub.Import.future(held([big], hold), timeout=T)
        t0 = time.monotonic()
        try:
            stalled.result(timeout=10)
            code = grpc.StatusCode.OK
        except grpc.RpcError as e:
            code = e.code()
        except grpc.FutureTimeoutError:
            code = None
        waited = time.monotonic() - t0
        hold.set()
        check(code == grpc.StatusCode.CANCELLED and 1.5 <= waited <= 6,
              f"a stalled import is cancelled by the server ({code} after {waited:.1f} s)")
        got = stub.Import(iter([s.StateChunk(session_id="copy2", data=blob)]), timeout=T)
        check(got.session_id == "copy2", "and its share of the budget is back")
        check(srv.proc.poll() is None, "the server is still running")
        ch.close()


def main():
    binary, fixtures, source = sys.argv[1], sys.argv[2], sys.argv[3]
    model_dir = os.path.join(fixtures, "gdn_default")
    tmp = tempfile.mkdtemp(prefix="linfer-grpc-probe-")
    try:
        make_stubs(source, tmp)
        try:
            test_garbage(binary, model_dir)
            test_transfers(binary, model_dir)
        except Exception as e:  # noqa: BLE001 - report, don't hide the tally
            check(False, f"{type(e).__name__}: {e}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
