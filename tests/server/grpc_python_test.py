#!/usr/bin/env python3
"""An independent client: Debian's python3-grpcio with stubs that protoc generates at test time,
against the real `linfer serve`. Covers Generate, Tokenize, Sessions, Models, health, reflection,
error codes, cancel mid-stream (the slot is freed) and SIGTERM drain.
Usage: /usr/bin/python3 grpc_python_test.py LINFER_BINARY FIXTURES_DIR SOURCE_DIR"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testing"))
from harness import Server, check, finish, make_stubs, wait_until  # noqa: E402

try:
    import grpc
except ImportError:
    print("FAIL: python3-grpcio is missing (use /usr/bin/python3; deploy/setup.sh installs it)")
    sys.exit(1)

PROMPT = [5, 17, 42, 3, 88, 11]
# Longer than any test waits (the tiny fixture decodes tens of thousands of tokens a second on
# one core), within the default max_model_len (2^20); the servers here raise --max_tokens_limit.
LONG = 1_000_000
T = 30  # seconds: deadline of every call that should finish quickly


class Api:
    def __init__(self, address):
        from linfer.v1 import generation_pb2_grpc, models_pb2_grpc, sessions_pb2_grpc
        from linfer_testing import health_pb2_grpc, reflection_pb2_grpc
        self.channel = grpc.insecure_channel(address)
        self.gen = generation_pb2_grpc.GenerationStub(self.channel)
        self.sessions = sessions_pb2_grpc.SessionsStub(self.channel)
        self.models = models_pb2_grpc.ModelsStub(self.channel)
        self.health = health_pb2_grpc.HealthStub(self.channel)
        self.reflection = reflection_pb2_grpc.ServerReflectionStub(self.channel)


def pb():
    from linfer.v1 import generation_pb2, models_pb2, sessions_pb2
    return generation_pb2, sessions_pb2, models_pb2


def request(ids=PROMPT, max_tokens=8, session="", **sampling):
    g, _, _ = pb()
    sampling.setdefault("temperature", 0.0)
    r = g.GenerateRequest(token_ids=g.TokenIds(ids=ids), session_id=session,
                          sampling=g.SamplingParams(**sampling))
    r.stop.max_tokens = max_tokens
    return r


def generate(api, req):
    """(token ids, messages) of a whole stream."""
    msgs = list(api.gen.Generate(req, timeout=T))
    return [t for m in msgs for t in m.token_ids], msgs


def code_of(fn):
    """(status code, details) of the RPC error `fn` raises, or (OK, "")."""
    try:
        r = fn()
        if hasattr(r, "__iter__") and not isinstance(r, (str, bytes)):
            list(r)
        return grpc.StatusCode.OK, ""
    except grpc.RpcError as e:
        return e.code(), e.details() or ""


def test_models(api):
    _, _, m = pb()
    lst = api.models.List(m.ListModelsRequest(), timeout=T)
    check(len(lst.models) == 1 and lst.models[0].name == "gdn_default", f"Models.List: {lst}")
    info = api.models.Info(m.ModelInfoRequest(), timeout=T)
    check(info.architecture == "gated_deltanet" and info.vocab_size == 96
          and info.hidden_size == 64 and info.num_layers == 2 and info.parameters > 0
          and info.state_bytes_per_session > 0 and info.slots > 0 and not info.has_tokenizer
          and len(info.fingerprint) == 16 and info.device in ("cpu", "cuda")
          and info.weight_dtype in ("f32", "bf16") and info.weight_bytes >= 2 * info.parameters
          and info.quantization == "" and info.fp8_weights == "", f"Info: {info}")
    code, msg = code_of(lambda: api.models.Info(m.ModelInfoRequest(name="other"), timeout=T))
    check(code == grpc.StatusCode.NOT_FOUND and "other" in msg, f"Info unknown: {code} {msg}")


def test_generate(api, binary, model_dir):
    local = subprocess.run([binary, "generate", "--model", model_dir, "--tokens",
                            ",".join(map(str, PROMPT)), "--max_tokens", "10", "--temperature", "0"],
                           capture_output=True, text=True, timeout=60)
    want = json.loads(local.stdout)["tokens"] if local.returncode == 0 else None
    ids, msgs = generate(api, request(max_tokens=10))
    check(ids == want, f"greedy stream {ids} == local generate {want}")
    last = msgs[-1] if msgs else None
    # Events that pile up while a write is in flight are merged into one message, so a fast
    # server may send all ten tokens at once: only the last message may carry a finish reason.
    check(last is not None and last.finish_reason == "length"
          and not any(m.finish_reason for m in msgs[:-1]),
          f"only the final message finishes: {[m.finish_reason for m in msgs]}")
    check(last is not None and last.usage.prompt_tokens == len(PROMPT)
          and last.usage.completion_tokens == 10 and last.usage.total_seconds > 0,
          f"usage: {last.usage if last else None}")
    g, _, _ = pb()
    code, msg = code_of(lambda: api.gen.Tokenize(g.TokenizeRequest(text="hi"), timeout=T))
    check(code == grpc.StatusCode.FAILED_PRECONDITION and "tokenizer" in msg,
          f"Tokenize without tokenizer: {code} {msg}")
    code, msg = code_of(lambda: api.gen.Generate(g.GenerateRequest(text="hi"), timeout=T))
    check(code == grpc.StatusCode.INVALID_ARGUMENT and "tokenizer" in msg,
          f"text prompt without tokenizer: {code} {msg}")
    req = request()
    req.json_object = True
    code, msg = code_of(lambda: api.gen.Generate(req, timeout=T))
    check(code == grpc.StatusCode.FAILED_PRECONDITION and "tokenizer" in msg,
          f"structured output without tokenizer: {code} {msg}")
    req.json_schema = '{"type": "object", "properties": {"a": {"multipleOf": 2}}}'
    code, msg = code_of(lambda: api.gen.Generate(req, timeout=T))
    check(code == grpc.StatusCode.INVALID_ARGUMENT and
          "json_schema.properties.a.multipleOf" in msg,
          f"an unsupported schema keyword: {code} {msg}")
    req.json_schema = "[" * 100
    code, msg = code_of(lambda: api.gen.Generate(req, timeout=T))
    check(code == grpc.StatusCode.INVALID_ARGUMENT and "json_schema" in msg,
          f"a schema nested too deep: {code} {msg}")


def test_sessions(api):
    _, s, _ = pb()
    a = api.sessions.Create(s.CreateSessionRequest(session_id="py-a"), timeout=T)
    check(a.session_id == "py-a" and a.tokens == 0 and not a.busy, f"Create: {a}")
    auto = api.sessions.Create(s.CreateSessionRequest(), timeout=T)
    check(auto.session_id.startswith("s-"), f"Create picks an id: {auto.session_id}")
    ids, msgs = generate(api, request(max_tokens=4, session="py-a"))
    check(len(ids) == 4 and msgs[-1].session_id == "py-a", "Generate on a session")
    a = api.sessions.Get(s.GetSessionRequest(session_id="py-a"), timeout=T)
    check(msgs[-1].session_tokens == a.tokens > 0,
          f"the final message's session_tokens ({msgs[-1].session_tokens}) = Get's ({a.tokens})")
    check(a.tokens >= len(PROMPT) + 3 and a.turns == 1, f"Get after a turn: {a}")
    lst = api.sessions.List(s.ListSessionsRequest(), timeout=T)
    check({"py-a", auto.session_id} <= {x.session_id for x in lst.sessions}, f"List: {lst}")
    b = api.sessions.Fork(s.ForkSessionRequest(session_id="py-a", new_session_id="py-b"),
                          timeout=T)
    check(b.session_id == "py-b" and b.tokens == a.tokens, f"Fork: {b}")
    chunks = list(api.sessions.Export(s.ExportSessionRequest(session_id="py-a"), timeout=T))
    blob = b"".join(c.data for c in chunks)
    check(len(blob) > 0, f"Export: {len(chunks)} chunks, {len(blob)} bytes")
    pieces = [blob[i:i + 1000] for i in range(0, len(blob), 1000)]
    stream = [s.StateChunk(data=pieces[0], session_id="py-c")]
    stream += [s.StateChunk(data=p) for p in pieces[1:]]
    c = api.sessions.Import(iter(stream), timeout=T)
    check(c.session_id == "py-c" and c.tokens == a.tokens, f"Import in {len(pieces)} chunks: {c}")
    outs = [generate(api, request(ids=[9], max_tokens=6, session=x))[0]
            for x in ["py-a", "py-b", "py-c"]]
    check(outs[0] == outs[1] == outs[2] and len(outs[0]) == 6,
          f"original, fork, import continue alike: {outs}")
    api.sessions.Delete(s.DeleteSessionRequest(session_id="py-b"), timeout=T)
    code, _ = code_of(lambda: api.sessions.Get(s.GetSessionRequest(session_id="py-b"), timeout=T))
    check(code == grpc.StatusCode.NOT_FOUND, f"Get after Delete: {code}")
    code, msg = code_of(lambda: api.sessions.Import(
        iter([s.StateChunk(data=b"junk" * 100, session_id="py-d")]), timeout=T))
    check(code == grpc.StatusCode.INVALID_ARGUMENT, f"Import junk: {code} {msg}")
    code, _ = code_of(lambda: api.sessions.Create(s.CreateSessionRequest(session_id="py-a"),
                                                  timeout=T))
    check(code == grpc.StatusCode.ALREADY_EXISTS, f"Create twice: {code}")


def test_health_reflection(api):
    from linfer_testing import health_pb2, reflection_pb2
    r = api.health.Check(health_pb2.HealthCheckRequest(service=""), timeout=T)
    check(r.status == health_pb2.HealthCheckResponse.SERVING, f"health: {r}")
    code, _ = code_of(lambda: api.health.Check(
        health_pb2.HealthCheckRequest(service="no.such.Service"), timeout=T))
    check(code == grpc.StatusCode.NOT_FOUND, f"health of an unknown service: {code}")
    for service in ("linfer.v1.Generation", "linfer.v1.Sessions", "linfer.v1.Models"):
        r = api.health.Check(health_pb2.HealthCheckRequest(service=service), timeout=T)
        check(r.status == health_pb2.HealthCheckResponse.SERVING, f"health of {service}: {r}")
    req = reflection_pb2.ServerReflectionRequest(list_services="")
    try:
        resp = next(iter(api.reflection.ServerReflectionInfo(iter([req]), timeout=T)))
        names = {x.name for x in resp.list_services_response.service}
    except grpc.RpcError as e:
        names = {f"error {e.code()}"}
    want = {"linfer.v1.Generation", "linfer.v1.Sessions", "linfer.v1.Models",
            "grpc.health.v1.Health"}
    check(want <= names, f"reflection lists the services: {sorted(names)}")


def test_errors(api):
    g, s, _ = pb()
    bad = [
        (request(top_p=2.0), "top_p"), (request(max_tokens=0), "max_tokens"),
        (request(ids=[1, 100000]), "100000"), (g.GenerateRequest(), "prompt"),
        (request(logprobs=50), "logprobs"), (request(session="bad id!"), "session"),
        (request(temperature=-1.0), "temperature"), (request(top_k=-5), "top_k"),
    ]
    for req, word in bad:
        code, msg = code_of(lambda: api.gen.Generate(req, timeout=T))
        check(code == grpc.StatusCode.INVALID_ARGUMENT and word in msg,
              f"INVALID_ARGUMENT naming {word}: {code} {msg!r}")
    code, msg = code_of(lambda: api.gen.Generate(request(session="nope"), timeout=T))
    check(code == grpc.StatusCode.NOT_FOUND and "nope" in msg, f"unknown session: {code} {msg}")
    for name, call in [("Get", lambda: api.sessions.Get(s.GetSessionRequest(session_id="nope"),
                                                        timeout=T)),
                       ("Delete", lambda: api.sessions.Delete(
                           s.DeleteSessionRequest(session_id="nope"), timeout=T)),
                       ("Export", lambda: api.sessions.Export(
                           s.ExportSessionRequest(session_id="nope"), timeout=T))]:
        code, _ = code_of(call)
        check(code == grpc.StatusCode.NOT_FOUND, f"{name} unknown session: {code}")
    code, _ = code_of(lambda: api.gen.Generate(request(max_tokens=LONG), timeout=0.5))
    check(code == grpc.StatusCode.DEADLINE_EXCEEDED, f"deadline: {code}")


def test_cancel_and_busy(api, srv):
    _, s, _ = pb()
    api.sessions.Create(s.CreateSessionRequest(session_id="py-busy"), timeout=T)
    call = api.gen.Generate(request(max_tokens=LONG, session="py-busy"), timeout=120)
    it = iter(call)
    got = [next(it) for _ in range(3)]
    check(len(got) == 3, "long stream started")
    check(srv.metric("linfer_state_slots_used") >= 1, "a slot is used while streaming")
    code, msg = code_of(lambda: api.gen.Generate(request(session="py-busy"), timeout=T))
    check(code == grpc.StatusCode.FAILED_PRECONDITION and "py-busy" in msg,
          f"busy session: {code} {msg}")
    sess = api.sessions.Get(s.GetSessionRequest(session_id="py-busy"), timeout=T)
    check(sess.busy, "Get shows busy")
    call.cancel()
    code, _ = code_of(lambda: list(it))
    check(code == grpc.StatusCode.CANCELLED, f"cancelled stream: {code}")
    idle = wait_until(lambda: not api.sessions.Get(s.GetSessionRequest(session_id="py-busy"),
                                                   timeout=T).busy, timeout=15)
    check(idle, "the session is released after the cancel")
    api.sessions.Delete(s.DeleteSessionRequest(session_id="py-busy"), timeout=T)
    # A one-off generation cancelled mid-stream: its slot is freed. (Idle sessions may keep
    # slots of their own, so the count goes back to what it was, 0 when there are none.)
    base = srv.metric("linfer_state_slots_used")
    resident = api.sessions.List(s.ListSessionsRequest(), timeout=T).sessions
    check(base == sum(x.tier == "slot" for x in resident), f"slots used {base} = idle sessions")
    call = api.gen.Generate(request(max_tokens=LONG), timeout=120)
    it = iter(call)
    next(it)
    check(srv.metric("linfer_state_slots_used") == base + 1, "the stream holds one more slot")
    call.cancel()
    freed = wait_until(lambda: srv.metric("linfer_state_slots_used") == base
                       and srv.metric("linfer_requests_running") == 0, timeout=15)
    check(freed, f"slot freed after cancel: used={srv.metric('linfer_state_slots_used')}, "
          f"before {base}")
    check(generate(api, request(max_tokens=3))[0], "the server still generates after a cancel")


def test_drain(binary, model_dir):
    with Server(binary, model_dir, "--drain_timeout_s", "1",
                "--max_tokens_limit", str(LONG)) as srv:
        api = Api(srv.address)
        # On a fresh server (no sessions) a cancelled stream leaves no slot in use.
        call = api.gen.Generate(request(max_tokens=LONG), timeout=60)
        next(iter(call))
        call.cancel()
        check(wait_until(lambda: srv.metric("linfer_state_slots_used") == 0, timeout=15),
              f"no slot used after a cancel: {srv.metric('linfer_state_slots_used')}")
        call = api.gen.Generate(request(max_tokens=LONG), timeout=60)
        it = iter(call)
        next(it)
        result = {}

        def consume():
            try:
                for _ in it:
                    pass
                result["code"] = grpc.StatusCode.OK
            except grpc.RpcError as e:
                result["code"] = e.code()
            result["t"] = time.monotonic()

        t = threading.Thread(target=consume, daemon=True)
        t.start()
        start = time.monotonic()
        rc = srv.terminate(timeout=20)  # SIGTERM, then wait
        elapsed = time.monotonic() - start
        t.join(10)
        check(rc == 0, f"exit 0 after SIGTERM (got {rc}):\n{srv.stderr()}")
        check(elapsed < 1 + 5, f"exits within the drain timeout: {elapsed:.1f} s")
        check("code" in result and result["code"] != grpc.StatusCode.OK
              and result["t"] - start < 1 + 5, f"the long stream ended: {result}")
        api.channel.close()


def main():
    binary, fixtures, source = sys.argv[1], sys.argv[2], sys.argv[3]
    model_dir = os.path.join(fixtures, "gdn_default")
    tmp = tempfile.mkdtemp(prefix="linfer-grpc-test-")
    try:
        make_stubs(source, tmp)
        with Server(binary, model_dir, "--max_tokens_limit", str(LONG)) as srv:
            api = Api(srv.address)
            grpc.channel_ready_future(api.channel).result(timeout=T)
            for name, fn, args in [("models", test_models, [api]),
                                   ("generate", test_generate, [api, binary, model_dir]),
                                   ("sessions", test_sessions, [api]),
                                   ("health/reflection", test_health_reflection, [api]),
                                   ("errors", test_errors, [api]),
                                   ("cancel", test_cancel_and_busy, [api, srv])]:
                try:
                    fn(*args)
                except Exception as e:  # noqa: BLE001 - a crash fails the group only
                    check(False, f"{name}: {type(e).__name__}: {e}")
            api.channel.close()
        try:
            test_drain(binary, model_dir)
        except Exception as e:  # noqa: BLE001
            check(False, f"drain: {type(e).__name__}: {e}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
