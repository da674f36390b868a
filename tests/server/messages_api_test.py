#!/usr/bin/python3
"""Anthropic's Messages API on the real `linfer serve` on loopback (the bundled model, the real
Qwen3.5 chat template, API keys on):

- the official Anthropic TypeScript SDK (openai_sdk/anthropic_sdk_test.mjs, npm-installed by the
  SDK fixture beside openai's): create, the stream helper, count_tokens, stop reasons, a tool
  round trip, errors and their SDK classes;
- at the wire: `x-api-key` and `Authorization: Bearer` both authenticate; the stream is
  `event: TYPE` + `data: {"type": TYPE}` from message_start to message_stop, no `[DONE]`; errors
  are {"type": "error", "error": {"type", "message"}} with the HTTP status; thinking blocks come
  only when asked;
- linfer's sessions on /v1/messages (session_id / x-session-id, as on chat completions).

usage: messages_api_test.py LINFER_BINARY SOURCE_DIR SDK_NODE_MODULES
"""
import http.client
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testing"))
from harness import Server, check, finish  # noqa: E402

KEY = "carol-key-0001"
BODY = {"model": "tiny", "max_tokens": 8, "temperature": 0,
        "messages": [{"role": "user", "content": "Who art thou?"}]}


def post(port, path, body, headers):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        c.request("POST", path, body=json.dumps(body),
                  headers={"Content-Type": "application/json", **headers})
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        c.close()


def test_wire(port):
    for name, headers in [("x-api-key", {"x-api-key": KEY}),
                          ("bearer", {"Authorization": f"Bearer {KEY}"})]:
        status, _, body = post(port, "/v1/messages", BODY, headers)
        check(status == 200 and json.loads(body)["type"] == "message",
              f"{name} authenticates ({status})")
    status, _, body = post(port, "/v1/messages", BODY, {"x-api-key": "wrong"})
    err = json.loads(body)
    check(status == 401 and err.get("type") == "error" and
          err["error"]["type"] == "authentication_error", f"a wrong key: 401 in shape ({body!r})")
    status, _, body = post(port, "/v1/messages", {**BODY, "max_tokens": None}, {"x-api-key": KEY})
    err = json.loads(body)
    check(status == 400 and err["error"] == {"type": "invalid_request_error",
                                             "message": "max_tokens: required"},
          f"a missing max_tokens: 400 in shape ({body!r})")
    status, headers, raw = post(port, "/v1/messages", {**BODY, "stream": True}, {"x-api-key": KEY})
    check(status == 200 and headers.get("content-type", "").startswith("text/event-stream"),
          "stream: 200 text/event-stream")
    events = []
    for block in raw.decode().split("\n\n"):
        if not block.strip():
            continue
        lines = block.split("\n")
        ok = len(lines) == 2 and lines[0].startswith("event: ") and lines[1].startswith("data: ")
        check(ok, f"stream: event + data lines ({block[:80]!r})")
        if ok:
            data = json.loads(lines[1][6:])
            check(data.get("type") == lines[0][7:], "stream: data names its event")
            events.append(data)
    types = [e["type"] for e in events]
    check(types[0] == "message_start" and types[-2:] == ["message_delta", "message_stop"] and
          b"[DONE]" not in raw, f"stream: message_start ... message_delta, message_stop ({types})")
    text = "".join(e["delta"].get("text", "") for e in events if e["type"] == "content_block_delta")
    _, _, whole = post(port, "/v1/messages", BODY, {"x-api-key": KEY})
    check(text == "".join(b.get("text", "") for b in json.loads(whole)["content"]),
          "stream = not streamed (greedy)")
    # Thinking: off unless asked; asked, the reasoning comes as a thinking block first.
    _, _, plain = post(port, "/v1/messages", BODY, {"x-api-key": KEY})
    check(all(b["type"] != "thinking" for b in json.loads(plain)["content"]), "no thinking unasked")
    _, _, thought = post(port, "/v1/messages",
                         {**BODY, "max_tokens": 40, "thinking": {"type": "enabled",
                                                                 "budget_tokens": 1024}},
                         {"x-api-key": KEY})
    blocks = json.loads(thought)["content"]
    check(blocks and blocks[0]["type"] == "thinking" and blocks[0]["thinking"],
          f"thinking enabled: a thinking block first ({[b['type'] for b in blocks]})")


def test_refusals_keep_their_status(port):
    """A streamed request the engine refuses at once is answered with its HTTP status and the
    API's error shape, not a stream that opens and fails; a final assistant message is
    continued, and one that cannot be is refused."""
    too_long = {**BODY, "max_tokens": 100000, "stream": True}
    status, headers, body = post(port, "/v1/messages", too_long, {"x-api-key": KEY})
    check(status == 400 and json.loads(body)["error"]["type"] == "invalid_request_error",
          f"streamed, max_tokens past the context: 400 ({status} {body[:120]!r})")
    prefill = {**BODY, "messages": BODY["messages"] + [
        {"role": "assistant", "content": "I am"}]}
    status, _, body = post(port, "/v1/messages", prefill, {"x-api-key": KEY})
    _, _, count = post(port, "/v1/messages/count_tokens", prefill, {"x-api-key": KEY})
    _, _, plain = post(port, "/v1/messages/count_tokens", BODY, {"x-api-key": KEY})
    usage = json.loads(body).get("usage", {}) if status == 200 else {}
    check(usage.get("input_tokens", 0) + usage.get("cache_read_input_tokens", 0) ==
          json.loads(count)["input_tokens"],
          f"a final assistant message is continued ({status} {usage} {count!r})")
    check(json.loads(count)["input_tokens"] != json.loads(plain)["input_tokens"],
          "its text is part of the prompt")
    bad = {**BODY, "messages": BODY["messages"] + [{"role": "assistant", "content": [
        {"type": "tool_use", "id": "t", "name": "f", "input": {}}]}]}
    status, _, body = post(port, "/v1/messages", bad, {"x-api-key": KEY})
    check(status == 400 and b"messages[1]" in body, f"a final tool_use: 400 ({status})")
    # With a system prompt the error still names the request's own message (not messages[2]).
    status, _, body = post(port, "/v1/messages", {**bad, "system": "Be brief."},
                           {"x-api-key": KEY})
    check(status == 400 and b"messages[1]:" in body and b"messages[2]" not in body,
          f"a final tool_use after a system prompt: 400 naming messages[1] ({status} {body!r})")
    # An empty final assistant message is no prefill: the same prompt as none.
    for content in ["", []]:
        empty = {**BODY, "messages": BODY["messages"] + [
            {"role": "assistant", "content": content}]}
        status, _, body = post(port, "/v1/messages", empty, {"x-api-key": KEY})
        _, _, count = post(port, "/v1/messages/count_tokens", empty, {"x-api-key": KEY})
        check(status == 200 and json.loads(count)["input_tokens"] ==
              json.loads(plain)["input_tokens"],
              f"an empty final assistant message ({content!r}): 200, no prefill "
              f"({status} {body[:160]!r} {count!r})")


def test_sessions(port):
    """linfer's session_id (body or x-session-id) on /v1/messages: a turn appends only the new
    messages to the session's state — sent whole or alone, turn 2 gives the same reply and state
    — and its history counts as cache_read_input_tokens."""
    auth = {"x-api-key": KEY}
    user1 = BODY["messages"]
    replies, notes = {}, {}
    for sid in ["m-whole", "m-alone"]:
        status, headers, body = post(port, "/v1/messages",
                                     {**BODY, "session_id": sid, "create_session": True}, auth)
        reply = json.loads(body)
        check(status == 200 and headers.get("x-session-id") == sid and
              reply.get("session", {}).get("id") == sid and
              reply["session"]["history_tokens"] == 0,
              f"turn 1 on a new session {sid} ({status} {body[:200]!r})")
        replies[sid] = "".join(b.get("text", "") for b in reply["content"])
        notes[sid] = reply.get("session", {})
    check(replies["m-whole"] == replies["m-alone"], "the same first turn on both sessions")
    user2 = {"role": "user", "content": "And then?"}
    whole = {**BODY, "messages": user1 + [
        {"role": "assistant", "content": replies["m-whole"]}, user2]}
    _, _, a = post(port, "/v1/messages", whole, {**auth, "x-session-id": "m-whole"})
    _, _, b = post(port, "/v1/messages", {**BODY, "session_id": "m-alone", "messages": [user2]},
                   auth)
    a, b = json.loads(a), json.loads(b)
    history = notes["m-whole"].get("tokens")
    check(a.get("content") == b.get("content") and a.get("session", {}).get("tokens") ==
          b.get("session", {}).get("tokens"),
          f"turn 2 sent whole = sent alone ({a.get('session')} {b.get('session')})")
    # (The reply's last token is pending in the session, fed with the new messages: not cached.)
    check(a.get("session", {}).get("history_tokens") == history and a["usage"] == b["usage"] and
          a["usage"]["cache_read_input_tokens"] == history - 1 and
          a["usage"]["input_tokens"] == a["session"]["new_tokens"] + 1,
          f"the session's history is read from the state ({history}: {a['usage']} {b['usage']})")
    # Streamed: message_start counts the whole conversation, the session note comes at the end.
    _, _, raw = post(port, "/v1/messages", {**BODY, "session_id": "m-alone", "stream": True,
                                            "messages": [{"role": "user", "content": "Go on."}]},
                     auth)
    events = [json.loads(line[6:]) for line in raw.decode().split("\n")
              if line.startswith("data: ")]
    start = events[0]["message"]["usage"]["input_tokens"]
    delta = [e for e in events if e["type"] == "message_delta"][0]
    check(start == delta["usage"]["input_tokens"] + delta["usage"]["cache_read_input_tokens"] and
          delta.get("session", {}).get("tokens", 0) > b["session"]["tokens"],
          f"streamed turn: usage and session note ({events[0]} {delta})")
    # Anthropic's system field comes with every request: sent with only the new messages it is
    # the session's first message, not a new one — the same reply as the whole conversation.
    for sid, messages in [("m-sys-alone", [user2]),
                          ("m-sys-whole", user1 + [{"role": "assistant", "content": None},
                                                   user2])]:
        _, _, t1 = post(port, "/v1/messages", {**BODY, "system": "Be brief.", "session_id": sid,
                                               "create_session": True}, auth)
        t1 = json.loads(t1)
        if messages[1:2] and messages[1]["content"] is None:
            messages[1]["content"] = "".join(x.get("text", "") for x in t1["content"])
        status, _, t2 = post(port, "/v1/messages", {**BODY, "system": "Be brief.",
                                                    "session_id": sid, "messages": messages},
                             auth)
        t2 = json.loads(t2)
        check(status == 200 and t2["session"]["history_tokens"] == t1["session"]["tokens"],
              f"{sid}: system with the new messages continues the session ({status} {t2})")
        replies[sid] = t2.get("content")
    check(replies["m-sys-alone"] == replies["m-sys-whole"], "system + new = system + whole")
    # The history sent again with a change is refused, naming the request's message (not the
    # index it has after the system prompt and tool results are made messages).
    changed = user1 + [{"role": "assistant", "content": "x"},
                       {"role": "user", "content": [
                           {"type": "tool_result", "tool_use_id": "t1", "content": "42"},
                           {"type": "text", "text": "Not what I said."}]}]
    status, _, body = post(port, "/v1/messages", {**BODY, "system": "Be brief.",
                                                  "session_id": "m-sys-whole",
                                                  "messages": changed}, auth)
    check(status == 400 and b"messages[2].content[0]: differs from the session's history" in body,
          f"a changed history on a session: 400 naming messages[2] ({status} {body!r})")
    # Its first message changed (the rest as the session holds them, and a new one after).
    changed = [{"role": "user", "content": "Something else."},
               {"role": "assistant", "content": "x"}, user2,
               {"role": "assistant", "content": "y"}, {"role": "user", "content": "More?"}]
    status, _, body = post(port, "/v1/messages", {**BODY, "system": "Be brief.",
                                                  "session_id": "m-sys-whole",
                                                  "messages": changed}, auth)
    check(status == 400 and b"messages[0]: differs from the session's history" in body,
          f"a history with its first message changed: 400 naming messages[0] ({status} {body!r})")
    # Refused by name: a prefill on a session, count_tokens with one, an unknown session.
    prefill = {**BODY, "session_id": "m-alone",
               "messages": [user2, {"role": "assistant", "content": "Well"}]}
    status, _, body = post(port, "/v1/messages", prefill, auth)
    check(status == 400 and b"messages[1]: an assistant message to continue" in body,
          f"a prefill on a session: 400 ({status} {body!r})")
    status, _, body = post(port, "/v1/messages/count_tokens", {**BODY, "session_id": "m-alone"},
                           auth)
    check(status == 400 and b"session_id:" in body, f"count_tokens with a session ({body!r})")
    status, _, body = post(port, "/v1/messages/count_tokens", BODY,
                           {**auth, "x-session-id": "m-alone"})
    check(status == 400 and b"x-session-id: count_tokens" in body,
          f"count_tokens with an x-session-id header ({status} {body!r})")
    status, _, body = post(port, "/v1/messages", {**BODY, "session_id": "m-nope"}, auth)
    check(status == 404 and json.loads(body)["error"]["type"] == "not_found_error",
          f"an unknown session: 404 ({status} {body!r})")


def test_router_errors(port):
    """The HTTP layer's own errors on /v1/messages paths are in the API's shape too."""
    for method, path, status, kind in [("POST", "/v1/messages/nope", 404, "not_found_error"),
                                       ("GET", "/v1/messages", 405, None)]:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        c.request(method, path, body=b"{}" if method == "POST" else None,
                  headers={"x-api-key": KEY})
        r = c.getresponse()
        body = json.loads(r.read())
        c.close()
        check(r.status == status and body.get("type") == "error" and
              (kind is None or body["error"]["type"] == kind),
              f"{method} {path}: {status} in the API's shape ({body})")
    big = {**BODY, "pad": "x" * (1536 << 10)}  # over 1 MiB, under the 2 MiB libevent reads
    status, _, body = post(port, "/v1/messages", big, {"x-api-key": KEY})
    err = json.loads(body)
    check(status == 413 and err.get("type") == "error" and
          err["error"]["type"] == "request_too_large", f"a body over the limit: 413 ({body[:100]!r})")


def test_overload(binary, model, template):
    """A full queue is Anthropic's 529 overloaded_error (its SDK retries it)."""
    import socket
    from harness import wait_until
    with Server(binary, model, "--chat_template", template, "--max_running", "1",
                "--max_waiting", "1", "--max_model_len", "100000",
                "--log_stats_interval_s", "0") as srv:
        long = json.dumps({"model": "tiny", "prompt": "Then", "max_tokens": 30000,
                           "ignore_eos": True, "stream": True}).encode()
        socks = []
        for gauge in ("linfer_requests_running", "linfer_requests_waiting"):
            s = socket.create_connection(("127.0.0.1", srv.http_port), timeout=30)
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                      b"application/json\r\nContent-Length: %d\r\n\r\n" % len(long) + long)
            socks.append(s)
            check(wait_until(lambda: (srv.metric(gauge) or 0) == 1, 10, 0.02), f"{gauge} 1")
        for stream in (False, True):
            status, _, body = post(srv.http_port, "/v1/messages", {**BODY, "stream": stream}, {})
            err = json.loads(body)
            check(status == 529 and err["error"]["type"] == "overloaded_error",
                  f"a full queue (stream {stream}): 529 overloaded_error ({status} {body[:100]!r})")
        for s in socks:
            s.close()


def test_template_special_tokens(binary, model, source_dir):
    """models/tiny has no tokenizer_config.json; Mistral's template adds eos_token after every
    assistant turn: the server names it from the model's ids, so such a conversation renders."""
    mistral = os.path.join(source_dir, "tests", "data", "chat_templates", "mistral-small-3.1.jinja")
    with Server(binary, model, "--chat_template", mistral, "--log_stats_interval_s", "0") as srv:
        body = {**BODY, "messages": [{"role": "user", "content": "Hi"},
                                     {"role": "assistant", "content": "Hello."},
                                     {"role": "user", "content": "More?"}]}
        status, _, raw = post(srv.http_port, "/v1/messages", body, {})
        check(status == 200, f"an assistant turn under Mistral's template renders ({raw[:200]!r})")


def main():
    binary, source_dir, node_modules = sys.argv[1], sys.argv[2], sys.argv[3]
    model = os.path.join(source_dir, "models", "tiny")
    template = os.path.join(source_dir, "tests", "data", "chat_templates", "qwen3.5.jinja")
    with tempfile.TemporaryDirectory() as d:
        keys = os.path.join(d, "keys")
        with open(keys, "w") as f:
            f.write(f"{KEY} carol\n")
        with Server(binary, model, "--chat_template", template, "--api_keys_file", keys,
                    "--http_max_body_mb", "1", "--log_stats_interval_s", "0") as srv:
            test_wire(srv.http_port)
            test_router_errors(srv.http_port)
            test_refusals_keep_their_status(srv.http_port)
            test_sessions(srv.http_port)
            script = os.path.join(source_dir, "tests", "server", "openai_sdk",
                                  "anthropic_sdk_test.mjs")
            p = subprocess.run(["node", script, node_modules, f"http://127.0.0.1:{srv.http_port}",
                                KEY, "tiny"], capture_output=True, text=True, timeout=600)
            print(p.stdout + p.stderr)
            check(p.returncode == 0, "the Anthropic SDK test passed")
            check(srv.proc.poll() is None, "the server is still running")
        test_overload(binary, model, template)
        test_template_special_tokens(binary, model, source_dir)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
