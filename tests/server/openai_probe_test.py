#!/usr/bin/python3
"""HTTP probe of the OpenAI endpoints: unknown paths and methods, malformed, mistyped, deeply
nested and oversized JSON, hundreds of randomly mutated requests, slow clients, clients that
vanish mid-stream (their requests are cancelled) and clients that stop reading a stream (paused,
then dropped) -- and afterwards the server still answers and streams.

usage: openai_probe_test.py LINFER_BINARY SOURCE_DIR
"""
import json
import os
import random
import socket
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testing"))
from harness import Server, check, finish, wait_until  # noqa: E402

CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4,
        "chat_template_kwargs": {"enable_thinking": False}}


RESPONSES = {
    "model": "tiny", "instructions": "Be brief.", "max_output_tokens": 4, "temperature": 0.5,
    "input": [{"role": "user", "content": [{"type": "input_text", "text": "Hi"}]},
              {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{\"a\": 1}"},
              {"type": "function_call_output", "call_id": "c1", "output": "1"},
              {"type": "reasoning", "summary": []}],
    "tools": [{"type": "function", "name": "f", "parameters": {
        "type": "object", "properties": {"a": {"type": "string"}}}}],
    "tool_choice": "auto", "text": {"format": {"type": "json_schema", "name": "n", "schema": {
        "type": "object", "properties": {"k": {"type": "integer"}}}}},
    "include": ["message.output_text.logprobs"], "top_logprobs": 1, "store": True,
    "metadata": {"a": "b"}, "reasoning": {"effort": "none"}, "previous_response_id": None,
    "stream": False}

MESSAGES = {
    "model": "tiny", "max_tokens": 4, "system": [{"type": "text", "text": "Be brief."}],
    "messages": [{"role": "user", "content": "Hi"},
                 {"role": "assistant", "content": [
                     {"type": "thinking", "thinking": "hm", "signature": ""},
                     {"type": "tool_use", "id": "t1", "name": "f", "input": {"a": "1"}}]},
                 {"role": "user", "content": [
                     {"type": "tool_result", "tool_use_id": "t1", "content": "1"},
                     {"type": "text", "text": "ok"}]}],
    "tools": [{"name": "f", "input_schema": {"type": "object"}}], "tool_choice": {"type": "auto"},
    "thinking": {"type": "enabled", "budget_tokens": 100}, "stop_sequences": ["x"],
    "temperature": 0.5, "top_k": 5, "metadata": {"user_id": "u"}, "stream": False}


def send(port, method, path, body=b"", headers=(), timeout=30.0):
    """One request on a fresh connection; returns (status, headers text, body bytes)."""
    if not isinstance(body, bytes):
        body = json.dumps(body).encode()
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", "Connection: close",
             f"Content-Length: {len(body)}", "Content-Type: application/json", *headers]
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        try:
            s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        except (BrokenPipeError, ConnectionResetError):
            pass
        out = b""
        try:
            while True:
                b = s.recv(1 << 16)
                if not b:
                    break
                out += b
        except (socket.timeout, ConnectionResetError):
            pass
    head, _, rest = out.partition(b"\r\n\r\n")
    try:
        status = int(head.split(b" ", 2)[1])
    except (IndexError, ValueError):
        status = None
    return status, head.decode(errors="replace"), rest


def error_of(body):
    try:
        return json.loads(body)["error"]
    except (ValueError, KeyError, TypeError):
        return None


def healthy(port):
    status, _, body = send(port, "POST", "/v1/chat/completions", CHAT)
    return status == 200 and b"chat.completion" in body


def test_routes(port):
    for path in ["/v1", "/v1/", "/v1/chat", "/v1/completion", "/v1/models/a/b", "/v1/embeddings",
                 "/v1/responses/", "/v1/responses/x/y", "/v1/chat/completions/", "/tokenizer"]:
        status, _, body = send(port, "POST", path, CHAT)
        check(status == 404 and error_of(body) is not None, f"POST {path} -> 404 JSON ({status})")
    # The SDK's models.retrieve of another model: 404 naming it (it used to be "no route").
    status, _, body = send(port, "GET", "/v1/models/other")
    e = error_of(body)
    check(status == 404 and e is not None and "The model 'other' does not exist" in e["message"],
          f"GET /v1/models/other -> 404 naming the model ({status} {body[:200]!r})")
    for method, path in [("GET", "/v1/chat/completions"), ("PUT", "/v1/completions"),
                         ("DELETE", "/v1/models"), ("PATCH", "/tokenize"), ("GET", "/detokenize"),
                         ("PUT", "/v1/responses/resp_1"), ("GET", "/v1/responses")]:
        status, head, body = send(port, method, path)
        check(status == 405 and "Allow:" in head and error_of(body) is not None,
              f"{method} {path} -> 405 with Allow ({status})")


def test_malformed(port):
    bodies = [b"", b"{", b"[]", b"null", b"\"text\"", b"{\"messages\": }", b"\xff\xfe{}",
              b"{\"messages\": [{\"role\": \"user\", \"content\": \"\xc3\x28\"}]}",
              b"[" * 100000, b"{\"a\":" * 50000, b"{\"max_tokens\": 1e999}",
              b"{\"temperature\": NaN}", b"{\"messages\": \"\\ud800\"}", os.urandom(5000)]
    for path in ["/v1/chat/completions", "/v1/completions", "/tokenize", "/detokenize",
                 "/v1/sessions", "/v1/responses", "/v1/responses/input_tokens", "/v1/messages",
                 "/v1/messages/count_tokens", "/v1/sessions/some-id/fork"]:
        for b in bodies:
            if path.startswith("/v1/sessions") and b == b"":
                continue  # no body: a session with a fresh id
            status, _, body = send(port, "POST", path, b)
            check(status == 400 and error_of(body) is not None,
                  f"POST {path} {b[:16]!r}: 400 JSON ({status} {body[:80]!r})")
    for method in ["GET", "DELETE", "POST"]:
        for sid in ["a%00b", "x" * 200, "%ff", "a.b~c", "a%20b"]:
            path = f"/v1/sessions/{sid}" + ("/fork" if method == "POST" else "")
            status, _, body = send(port, method, path, b"")
            check(status == 400 and "session id" in (error_of(body) or {}).get("message", ""),
                  f"{method} {path[:40]}: 400 naming the id ({status} {body[:100]!r})")
    wrong = [("messages", "hi"), ("messages", [1]), ("messages", [{"role": 5}]),
             ("max_tokens", -1), ("max_tokens", "8"), ("temperature", -1), ("top_p", 0),
             ("top_k", -5), ("n", 1000), ("stop", 5), ("stop", [None]), ("seed", "x"),
             ("logit_bias", []), ("logit_bias", {"99999999": 1}), ("logprobs", "yes"),
             ("stream", "yes"), ("stream_options", 1), ("tools", {}), ("tools", [{}]),
             ("chat_template_kwargs", []), ("session_id", "../etc"), ("session_id", "x" * 500),
             ("min_tokens", -1), ("frequency_penalty", 9), ("repetition_penalty", 0),
             ("model", 7), ("user", {}), ("priority", "high"),
             ("return_tokens_as_token_ids", "yes"), ("return_token_ids", 1),
             ("cache_salt", ""), ("thinking_token_budget", -2), ("thinking_token_budget", "9"),
             ("allowed_token_ids", []), ("allowed_token_ids", [-1]), ("bad_words", "x"),
             ("bad_words", [5])]
    for field, value in wrong:
        status, _, body = send(port, "POST", "/v1/chat/completions", {**CHAT, field: value})
        err = error_of(body) or {}
        check(status == 400 and field in (err.get("param") or "") + err.get("message", ""),
              f"{field}={json.dumps(value)[:20]}: 400 naming the field ({status} {body[:100]!r})")
    # An empty user message on the Messages API used to leave nothing to render: a crash.
    for path in ["/v1/messages", "/v1/messages/count_tokens"]:
        for messages, system in [([{"role": "user", "content": []}], {}),
                                 ([{"role": "user", "content": []}], {"system": "s"}),
                                 ([{"role": "assistant", "content": "a"},
                                   {"role": "user", "content": []}], {})]:
            status, _, body = send(port, "POST", path,
                                   {"model": "tiny", "max_tokens": 4, "messages": messages,
                                    **system})
            check(status == 400 and b"content" in body,
                  f"POST {path}, an empty user message: 400 naming it ({status} {body[:100]!r})")
    check(healthy(port), "still answers after empty Messages API messages")
    status, _, body = send(port, "POST", "/v1/completions",
                           {"model": "tiny", "prompt": "x" * (17 << 20), "max_tokens": 1})
    check(status == 400 and b"prompt" in body, f"a 17 MB prompt: 400 ({status})")
    status, head, body = send(port, "POST", "/v1/completions", b"{\"prompt\":\"" + b"x" * (40 << 20))
    check(status == 413 and error_of(body) is not None and "application/json" in head,
          f"a 40 MB body (over --http_max_body_mb 32): 413 in OpenAI's JSON shape ({status} "
          f"{body[:80]!r})")
    check(healthy(port), "still answers after malformed requests")


def mutate(value, rng):
    """A random edit of a JSON value: type swaps, extreme numbers, deep or huge values."""
    choices = [None, True, -1, 0, 2 ** 63, -2 ** 63, 1e308, -0.5, "", "\u0000\ud7ff\U0010ffff",
               "x" * 1000, [], {}, [[[]]], {"a": {"b": []}}, [1, "a", None]]
    if isinstance(value, dict) and value and rng.random() < 0.7:
        k = rng.choice(list(value))
        value = dict(value)
        value[k] = mutate(value[k], rng)
        return value
    if isinstance(value, list) and value and rng.random() < 0.7:
        value = list(value)
        i = rng.randrange(len(value))
        value[i] = mutate(value[i], rng)
        return value
    return rng.choice(choices)


def test_fuzzed_requests(port):
    rng = random.Random(1234)
    base = {**CHAT, "temperature": 0.5, "top_p": 0.9, "stop": ["x"], "n": 1, "seed": 1,
            "logprobs": True, "top_logprobs": 1, "stream": False, "logit_bias": {"5": 1},
            "tools": [{"type": "function", "function": {"name": "f", "parameters": {
                "type": "object", "properties": {"a": {"type": "string"}}}}}],
            "stream_options": None, "session_id": None, "min_tokens": 1}
    statuses = {}
    for i in range(300):
        req = mutate(base, rng)
        for _ in range(rng.randrange(3)):
            req = mutate(req, rng)
        path = "/v1/completions" if i % 3 == 0 else "/v1/chat/completions"
        if i % 4 == 3:  # the Responses API, from its own base
            path, req = "/v1/responses", mutate(RESPONSES, rng)
            for _ in range(rng.randrange(3)):
                req = mutate(req, rng)
        if i % 8 == 5:  # Anthropic's Messages API, from its own base
            path, req = "/v1/messages", mutate(MESSAGES, rng)
            for _ in range(rng.randrange(3)):
                req = mutate(req, rng)
        if i % 5 == 2 and path == "/v1/chat/completions" and isinstance(req, dict):
            # a forced call: the tool grammar built from whatever tools the mutation left
            req = {**req, "tool_choice": rng.choice(
                ["required", {"type": "function", "function": {"name": "f"}},
                 {"type": "function", "function": {"name": mutate("f", rng)}}])}
        if path == "/v1/completions" and isinstance(req, dict):
            req = {**req, "prompt": mutate("In the", rng) if i % 2 else "In the"}
        status, _, body = send(port, "POST", path, req)
        statuses[status] = statuses.get(status, 0) + 1
        ok = status in (200, 400, 404) and (status == 200 or error_of(body) is not None)
        check(ok, f"mutated request {i}: 200/400/404 ({status} {json.dumps(req)[:150]})")
    print("mutated requests by status:", statuses, flush=True)
    check(healthy(port), "still answers after 300 mutated requests")


def test_slow_and_vanishing(srv):
    port = srv.http_port
    slow = socket.create_connection(("127.0.0.1", port), timeout=10)
    slow.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n{")
    t0 = time.monotonic()
    check(healthy(port) and time.monotonic() - t0 < 5, "a stalled upload delays nobody")
    # Clients that start a stream and vanish: their requests are cancelled.
    body = json.dumps({**CHAT, "max_tokens": 1900, "ignore_eos": True, "stream": True}).encode()
    req = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           b"Content-Length: %d\r\n\r\n" % len(body)) + body
    for linger in (True, False):
        socks = []
        for _ in range(10):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            if linger:  # RST instead of FIN
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            s.sendall(req)
            s.recv(100)  # the stream has started
            socks.append(s)
        for s in socks:
            s.close()
        check(wait_until(lambda: (srv.metric("linfer_requests_running") or 0) == 0, 15),
              f"vanished streaming clients are cancelled (linger={linger})")
    slow.close()


def test_stalled_reader(srv):
    """A client that stops reading: its stream is paused above the high-water mark (generation
    stops), then dropped after --http_write_timeout_s (5 s, so that a loaded machine still sees
    the pause first) and its requests cancelled; others are served meanwhile. n=8 with
    top_logprobs makes ~20 MB of SSE, more than the socket buffers."""
    port = srv.http_port
    before = srv.metric("linfer_generation_tokens_total") or 0
    body = json.dumps({**CHAT, "max_tokens": 1900, "n": 8, "ignore_eos": True, "stream": True,
                       "logprobs": True, "top_logprobs": 20}).encode()
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", port))
    s.sendall((b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
               b"\r\nContent-Length: %d\r\n\r\n" % len(body)) + body)
    s.recv(100)
    samples = []

    def paused():
        samples.append(srv.metric("linfer_generation_tokens_total") or 0)
        return (len(samples) >= 3 and samples[-1] == samples[-3] and
                (srv.metric("linfer_requests_running") or 0) == 8)

    check(wait_until(paused, 20, 0.25), f"generation pauses while the client does not read")
    check(healthy(port), "others are served while a client does not read")
    gone = wait_until(lambda: (srv.metric("linfer_requests_running") or 0) == 0, 30)
    check(gone, "the stalled stream is dropped and its requests cancelled")
    generated = (srv.metric("linfer_generation_tokens_total") or 0) - before
    s.close()
    check(generated < 8 * 1900, f"the stalled stream stopped generating ({generated} tokens)")


def test_still_streams(port):
    status, head, body = send(port, "POST", "/v1/chat/completions",
                              {**CHAT, "stream": True, "max_tokens": 6})
    events = [e for e in body.decode(errors="replace").split("data: ") if e.startswith("{")]
    check(status == 200 and len(events) >= 7 and body.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n")
          or body.rstrip().endswith(b"0"), f"a chat still streams after the probes ({status})")


def main():
    binary, source_dir = sys.argv[1], sys.argv[2]
    model = os.path.join(source_dir, "models", "tiny")
    template = os.path.join(source_dir, "tests", "data", "chat_templates", "qwen3.5.jinja")
    with Server(binary, model, "--chat_template", template, "--http_idle_timeout_s", "3",
                "--http_write_timeout_s", "5", "--log_stats_interval_s", "0") as srv:
        port = srv.http_port
        test_routes(port)
        test_malformed(port)
        test_fuzzed_requests(port)
        test_slow_and_vanishing(srv)
        test_stalled_reader(srv)
        test_still_streams(port)
        check(srv.proc.poll() is None, "the server is still running")
        if not healthy(port):
            print(srv.stderr())
    return finish()


if __name__ == "__main__":
    sys.exit(main())
