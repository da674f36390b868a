#!/usr/bin/python3
"""The Responses API of the real `linfer serve` on loopback (the bundled model, the real Qwen3.5
chat template), checked at the wire and through the server's own accounting (the official SDK's
checks are in openai_sdk/sdk_test.mjs):

- the stream: `text/event-stream`, every event an `event: TYPE` line whose data has that "type",
  sequence numbers 0, 1, 2, … without gaps, the order created → in_progress → item events →
  completed/incomplete, no `data: [DONE]`, and the streamed text equals the non-streamed one;
- stored responses hold one session each (linfer_sessions counts them): a store of 3
  (--stored_responses 3) pushes out the least recently used response and frees its session;
  `store: false`, DELETE, a refused request and a client that leaves mid-stream leave no session
  behind;
- eight concurrent continuations of one response each fork its state: all get the same greedy
  reply, and the response can still be continued afterwards;
- with a session disk directory a graceful restart keeps the stored responses and their states
  (a continuation after it computes only its input); without one a drain deletes the states; a
  broken responses file is moved aside;
- past the session quota the oldest stored responses give their states up, so a conversation
  continued turn after turn keeps its state; a developer message in a continuation works;
- usage counts what the prefix cache reused for a request without a session;
- /metrics counts HTTP requests by method, route pattern and status, and the stored responses.

usage: responses_api_test.py LINFER_BINARY SOURCE_DIR
"""
import http.client
import json
import os
import socket
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testing"))
from harness import Server, check, finish, wait_until  # noqa: E402

GREEDY = {"model": "tiny", "temperature": 0, "max_output_tokens": 8,
          "reasoning": {"effort": "none"}}


def request(port, method, path, body=None, timeout=60):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        data = json.dumps(body).encode() if body is not None else None
        c.request(method, path, body=data, headers={"Content-Type": "application/json"})
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        c.close()


def create(port, **fields):
    status, _, body = request(port, "POST", "/v1/responses", {**GREEDY, **fields})
    check(status == 200, f"POST /v1/responses: 200 ({status} {body[:200]!r})")
    return json.loads(body) if status == 200 else {}


def text_of(response):
    return "".join(c.get("text", "") for o in response.get("output", [])
                   if o.get("type") == "message" for c in o.get("content", []))


def sessions(srv):
    return srv.metric("linfer_sessions")


def parse_sse(raw):
    """[(event name, data object)], and the raw lines that were neither."""
    events, stray = [], []
    for block in raw.decode().split("\n\n"):
        if not block.strip():
            continue
        lines = block.split("\n")
        name = data = None
        for line in lines:
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                data = line[6:]
            else:
                stray.append(line)
        events.append((name, json.loads(data) if data and data.startswith("{") else data))
    return events, stray


def test_stream(port):
    body = {**GREEDY, "input": "Who art thou?", "stream": True,
            "include": ["message.output_text.logprobs"], "top_logprobs": 2}
    status, headers, raw = request(port, "POST", "/v1/responses", body)
    check(status == 200 and headers.get("content-type", "").startswith("text/event-stream"),
          f"stream: 200 text/event-stream ({status} {headers.get('content-type')})")
    events, stray = parse_sse(raw)
    check(not stray and b"[DONE]" not in raw, f"stream: only event/data lines, no [DONE] {stray}")
    check(all(isinstance(d, dict) and d.get("type") == n for n, d in events),
          "stream: every event line names its data's type")
    seq = [d.get("sequence_number") for _, d in events if isinstance(d, dict)]
    check(seq == list(range(len(events))), f"stream: sequence numbers 0..{len(events) - 1} ({seq})")
    types = [n for n, _ in events]
    check(types[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                        "response.content_part.added"],
          f"stream: the opening events ({types[:4]})")
    check(types[-1] in ("response.completed", "response.incomplete"),
          f"stream: the closing event ({types[-1]})")
    final = events[-1][1]["response"]
    deltas = [d for n, d in events if n == "response.output_text.delta"]
    streamed = "".join(d["delta"] for d in deltas)
    check(streamed == text_of(final) and streamed,
          f"stream: the deltas are the final text ({streamed!r})")
    lps = [lp for d in deltas for lp in d["logprobs"]]
    check(lps and all(len(lp["top_logprobs"]) == 2 and lp["logprob"] <= 0 for lp in lps),
          f"stream: logprobs with 2 alternatives on the deltas ({len(lps)})")
    whole = create(port, input="Who art thou?")
    check(text_of(whole) == streamed, "stream = not streamed (greedy)")
    status, _, got = request(port, "GET", f"/v1/responses/{final['id']}")
    check(status == 200 and json.loads(got)["output"] == final["output"],
          "a streamed response is stored as it ended")


def test_stream_items_agree(port):
    """A forced tool call whose model (tiny, greedy) writes text after the call: every item's
    events end with its output_item.done, and what that says is what the final response lists
    (a call's arguments used to arrive after its done events, as '{}' against their '')."""
    body = {**GREEDY, "input": "weather in Paris?", "stream": True, "max_output_tokens": 20,
            "tools": [{"type": "function", "name": "get",
                       "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                      "required": ["city"]}}],
            "tool_choice": "required"}
    status, _, raw = request(port, "POST", "/v1/responses", body)
    events, _ = parse_sse(raw)
    done, late, items = set(), [], {}
    for name, d in events:
        if not isinstance(d, dict) or "output_index" not in d:
            continue
        if d["output_index"] in done:
            late.append(name)
        if name == "response.output_item.done":
            done.add(d["output_index"])
            items[d["output_index"]] = d["item"]
    final = events[-1][1].get("response", {}) if events else {}
    check(status == 200 and not late, f"no event for an item after its done ({late})")
    check(final.get("output") == [items[i] for i in sorted(items)],
          f"the final output is the done items ({final.get('output')} vs {items})")
    calls = [o for o in final.get("output", []) if o.get("type") == "function_call"]
    check(calls, f"the forced call is there ({final.get('output')})")
    # Sent back as input (its arguments as streamed, even empty), it is taken.
    for call in calls:
        status, _, resp = request(port, "POST", "/v1/responses/input_tokens",
                                  {"model": "tiny", "tools": body["tools"],
                                   "input": [{"role": "user", "content": "weather?"},
                                             {**{k: call[k] for k in ("type", "call_id", "name")},
                                              "arguments": ""},
                                             {"type": "function_call_output",
                                              "call_id": call["call_id"], "output": "sunny"}]})
        check(status == 200, f"a call with arguments '' as input: 200 ({status} {resp[:120]!r})")
    # Continuing the response, an output answers one of its calls (or one in the input).
    if calls and final.get("id"):
        follow = {**GREEDY, "tools": body["tools"], "previous_response_id": final["id"],
                  "max_output_tokens": 2}
        status, _, resp = request(port, "POST", "/v1/responses", {**follow, "input": [
            {"type": "function_call_output", "call_id": "no-such-call", "output": "x"}]})
        check(status == 400 and b"input[0].call_id" in resp and b"no-such-call" in resp,
              f"an output answering no call of the conversation: 400 ({status} {resp[:160]!r})")
        status, _, resp = request(port, "POST", "/v1/responses", {**follow, "input": [
            {"type": "function_call_output", "call_id": calls[0]["call_id"], "output": "x"}]})
        check(status == 200, f"an output answering the previous response's call: 200 "
                             f"({status} {resp[:160]!r})")


def test_input_item_ids(port):
    """Client item ids: unique and bounded (a duplicate made input_items' `after` loop for
    ever), and `after` is percent-decoded like any query value."""
    msg = {"type": "message", "role": "user", "content": "hi"}
    status, _, body = request(port, "POST", "/v1/responses",
                              {**GREEDY, "input": [{**msg, "id": "dup"}, {**msg, "id": "dup"}]})
    check(status == 400 and b"input[1].id" in body, f"duplicate ids: 400 naming input[1].id "
                                                     f"({status} {body[:120]!r})")
    status, _, body = request(port, "POST", "/v1/responses",
                              {**GREEDY, "input": [{**msg, "id": "x" * 300}]})
    check(status == 400 and b"input[0].id" in body, f"a 300-byte id: 400 ({status} {body[:120]!r})")
    r = create(port, input=[{**msg, "id": "my item/1"}, {**msg, "id": "my item/2"}])
    status, _, body = request(port, "GET", f"/v1/responses/{r.get('id')}/input_items"
                                           "?order=asc&after=my%20item%2F1")
    got = json.loads(body).get("data", []) if status == 200 else []
    check([i.get("id") for i in got] == ["my item/2"],
          f"after=my%20item%2F1: the item after it ({status} {body[:160]!r})")


def test_refused_stream_keeps_its_status(srv):
    """A streamed request the engine refuses at once gets its HTTP status, not a stream that
    opens and fails, and keeps no state."""
    base = sessions(srv)
    status, headers, body = request(srv.http_port, "POST", "/v1/responses",
                                    {**GREEDY, "input": "x", "stream": True,
                                     "max_output_tokens": 100000})
    check(status == 400 and "max_output_tokens" in json.loads(body)["error"]["message"],
          f"streamed, max_output_tokens past the context: 400 naming it ({status} {body[:150]!r})")
    check(wait_until(lambda: sessions(srv) == base, 10), "and no session is left")
    # The same past a previous response's state: its fork held the history that the engine
    # would count at admission, after the stream had opened with 200.
    first = create(srv.http_port, input="Hello.")
    # (Storing it may push out an older response, whose state is dropped a moment later.)
    settled = lambda: (lambda a: time.sleep(0.3) or a == sessions(srv))(sessions(srv))
    wait_until(settled, 10)
    base = sessions(srv)
    status, headers, body = request(srv.http_port, "POST", "/v1/responses",
                                    {**GREEDY, "input": "More.", "stream": True,
                                     "previous_response_id": first.get("id"),
                                     "max_output_tokens": 2040})
    message = json.loads(body).get("error", {}).get("message", "") if status == 400 else ""
    check(status == 400 and "maximum context length" in message
          and "in the previous responses" in message,
          f"a continuation past the context, streamed: 400 ({status} {body[:200]!r})")
    request(srv.http_port, "DELETE", f"/v1/responses/{first.get('id')}")  # the store as it was
    check(wait_until(lambda: sessions(srv) == base - 1, 10),
          f"and no state of its own kept ({sessions(srv)} vs {base - 1})")


def test_store_accounting(srv):
    port = srv.http_port
    base = sessions(srv)
    ids = [create(port, input=f"Question {i}?")["id"] for i in range(3)]
    check(sessions(srv) == base + 3, f"three stored responses hold three sessions "
                                     f"({sessions(srv)} vs {base})")
    request(port, "GET", f"/v1/responses/{ids[0]}")  # ids[0] is now the most recently used
    fourth = create(port, input="Question 3?")["id"]
    check(wait_until(lambda: sessions(srv) == base + 3, 10),
          f"a fourth pushes one out and frees its session ({sessions(srv)})")
    status, _, body = request(port, "GET", f"/v1/responses/{ids[1]}")
    check(status == 404 and json.loads(body)["error"]["type"] == "not_found_error",
          f"the least recently used response is gone ({status})")
    status, _, body = request(port, "POST", "/v1/responses",
                              {**GREEDY, "input": "x", "previous_response_id": ids[1]})
    check(status == 404 and json.loads(body)["error"]["param"] == "previous_response_id",
          f"continuing it: 404 naming previous_response_id ({status})")
    for gone in (ids[0], ids[2], fourth):
        check(request(port, "GET", f"/v1/responses/{gone}")[0] == 200, "the others stay")
    # store: false, a refused request, a deletion.
    create(port, input="Not kept.", store=False)
    r = create(port, input="Not kept either.", store=False, previous_response_id=fourth)
    check(r.get("usage", {}).get("input_tokens_details", {}).get("cached_tokens", 0) > 0,
          "store: false may still continue a stored response")
    status, _, _ = request(port, "POST", "/v1/responses",
                           {**GREEDY, "input": "x " * 5000, "previous_response_id": fourth})
    check(status == 400, f"a conversation longer than the context: 400 ({status})")
    check(wait_until(lambda: sessions(srv) == base + 3, 10),
          f"store: false and a refused request leave no session ({sessions(srv)})")
    status, _, body = request(port, "DELETE", f"/v1/responses/{fourth}")
    check(status == 200 and json.loads(body) == {"id": fourth, "object": "response.deleted",
                                                 "deleted": True}, "DELETE")
    check(wait_until(lambda: sessions(srv) == base + 2, 10),
          f"DELETE frees the session ({sessions(srv)})")
    check(request(port, "DELETE", f"/v1/responses/{fourth}")[0] == 404, "a second DELETE: 404")


def test_refused_logprobs_leave_no_session(srv):
    """A request refused for its buffered logprobs (n × max_output_tokens × (1 + top_logprobs)
    over 2^22 without stream) frees the session made for it (each used to stay for good)."""
    port = srv.http_port
    base = sessions(srv)
    prev = create(port, input="Kept.")["id"]
    base += 1
    for extra in [{}, {"previous_response_id": prev}]:
        for _ in range(3):
            status, _, body = request(port, "POST", "/v1/responses",
                                      {**GREEDY, "input": "hi", "max_output_tokens": 250000,
                                       "top_logprobs": 20, **extra})
            check(status == 400 and b"logprob" in body,
                  f"250000 tokens × 21 logprobs unstreamed: 400 ({status} {body[:100]!r})")
    check(wait_until(lambda: sessions(srv) == base, 10),
          f"and no session is left ({sessions(srv)} vs {base})")


def labelled(srv, name, **labels):
    """The sum of the samples of `name` whose labels include `labels`."""
    total = 0.0
    for line in srv.metrics().splitlines():
        if not line.startswith(name + "{"):
            continue
        series, value = line.rsplit(" ", 1)
        if all(f'{k}="{v}"' in series for k, v in labels.items()):
            total += float(value)
    return total


def test_metrics(srv):
    """/metrics counts HTTP requests by method, route (the pattern, not the id) and status, and
    the stored responses."""
    port = srv.http_port
    before = labelled(srv, "linfer_http_requests_total", method="POST", route="/v1/responses",
                      code="200")
    r = create(port, input="Counted.")
    request(port, "GET", f"/v1/responses/{r.get('id')}")
    request(port, "GET", "/v1/responses/resp_missing")
    request(port, "GET", "/no/such/path")
    check(labelled(srv, "linfer_http_requests_total", method="POST", route="/v1/responses",
                   code="200") == before + 1, "POST /v1/responses 200 counted")
    check(labelled(srv, "linfer_http_requests_total", method="GET", route="/v1/responses/*",
                   code="404") >= 1, "a GET of a missing response: its route pattern, 404")
    check(labelled(srv, "linfer_http_requests_total", route="unmatched", code="404") >= 1,
          "an unknown path: route unmatched")
    check(srv.metric("linfer_stored_responses") == 3 and
          srv.metric("linfer_stored_responses_bytes") > 0,
          f"linfer_stored_responses ({srv.metric('linfer_stored_responses')})")


def test_client_leaves(srv):
    port = srv.http_port
    base = sessions(srv)
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    body = json.dumps({**GREEDY, "input": "Talk.", "stream": True, "max_output_tokens": 1500,
                       "ignore_eos": True}).encode()
    s.sendall(b"POST /v1/responses HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    got = b""
    while got.count(b"response.output_text.delta") < 3:
        chunk = s.recv(65536)
        if not chunk:
            break
        got += chunk
    s.close()
    check(wait_until(lambda: sessions(srv) == base, 20),
          f"a client that leaves mid-stream leaves no session ({sessions(srv)} vs {base})")


def test_concurrent_continuations(port):
    a = create(port, instructions="Be brief.", input="Hail!")
    results = [None] * 8

    def go(i):
        try:
            results[i] = create(port, instructions="Be brief.", input="And then?",
                                previous_response_id=a["id"])
        except Exception as e:  # noqa: BLE001 - recorded as a failed result
            results[i] = {"error": str(e)}

    threads = [threading.Thread(target=go, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    texts = {text_of(r or {}) for r in results}
    cached = {(r or {}).get("usage", {}).get("input_tokens_details", {}).get("cached_tokens")
              for r in results}
    check(len(texts) == 1 and "" not in texts and len(cached) == 1 and 0 not in cached,
          f"8 concurrent continuations: one reply, each from the stored state ({texts}, {cached})")
    again = create(port, instructions="Be brief.", input="And then?", previous_response_id=a["id"])
    check(texts == {text_of(again)}, "the response continues the same way afterwards")


def test_restart_keeps_responses(binary, model, template, tmp):
    """With a session disk directory a graceful restart keeps the stored responses and their
    states: GET still answers, and a continuation still computes only its input. Without one, a
    drain deletes their states (nothing could name them after a restart). A responses file that
    does not read is moved aside with a log line, never replaced."""
    with Server(binary, model, "--chat_template", template, "--log_stats_interval_s", "0") as srv:
        create(srv.http_port, input="First.")
        check(srv.terminate() == 0, "SIGTERM: exit 0")
        check("stored responses: deleted 1 sessions" in srv.stderr(),
              "without a disk directory the drain deletes the states")
    disk = os.path.join(tmp, "sessions")
    os.mkdir(disk)
    args = ["--chat_template", template, "--session_disk_dir", disk, "--log_stats_interval_s", "0"]
    with Server(binary, model, *args) as srv:
        port = srv.http_port
        status, _, _ = request(port, "POST", "/v1/sessions", {"session_id": "kept"})
        check(status == 200, "a /v1/sessions session")
        a = create(port, instructions="Be brief.", input="First.")
        b = create(port, instructions="Be brief.", input="Second.", previous_response_id=a.get("id"))
        check(srv.terminate() == 0, "SIGTERM: exit 0")
        check("stored responses: 2 written to" in srv.stderr(), "the drain writes the store")
    check(os.path.exists(os.path.join(disk, "responses.json")), "responses.json is written")
    with Server(binary, model, *args) as srv:
        port = srv.http_port
        check("stored responses: 2 restored" in srv.stderr() and "(2 with their state)" in
              srv.stderr(), f"the restart restores both with their states")
        status, _, body = request(port, "GET", f"/v1/responses/{b.get('id')}")
        check(status == 200 and json.loads(body)["output"] == b.get("output"),
              "GET answers after the restart")
        c = create(port, instructions="Be brief.", input="Third.", previous_response_id=b.get("id"))
        cached = c.get("usage", {}).get("input_tokens_details", {}).get("cached_tokens", 0)
        check(cached >= b["usage"]["input_tokens"],
              f"a continuation after the restart reuses the state ({cached})")
        check(not os.path.exists(os.path.join(disk, "responses.json")),
              "the file is removed once read (a DELETE stays deleted after a crash)")
        check(srv.terminate() == 0, "SIGTERM: exit 0")
    # A response whose entry names another response's state (a file edited or mixed up) keeps
    # none — its continuation renders the conversation — and its own state is dropped, not left
    # where nothing names it.
    path = os.path.join(disk, "responses.json")
    with open(path) as f:
        stored = json.load(f)
    entries = {r["id"]: r for r in stored["responses"]}
    wrong, other = entries[c.get("id")], entries[b.get("id")]
    wrong["session_id"], wrong["position"] = other["session_id"], other["position"]
    with open(path, "w") as f:
        json.dump(stored, f)
    with Server(binary, model, *args) as srv:
        check("stored responses: 3 restored" in srv.stderr() and "(2 with their state)" in
              srv.stderr(), f"the mixed-up response keeps no state: {srv.stderr()[-300:]!r}")
        # a, b and the /v1/sessions session "kept"; c's own state is gone
        check(wait_until(lambda: sessions(srv) == 3, 10),
              f"its own state is dropped ({sessions(srv)} sessions)")
        d = create(srv.http_port, instructions="Be brief.", input="Fourth.",
                   previous_response_id=c.get("id"))
        check(text_of(d) != "", "and it still continues (rendered again)")
    broken = '{"version": 1, "turns": [{"previous": 5}]}'
    with open(os.path.join(disk, "responses.json"), "w") as f:
        f.write(broken)
    with Server(binary, model, *args) as srv:
        check("not a stored-responses file" in srv.stderr() and "moved aside to" in srv.stderr(),
              "a broken file: a log line")
        check(request(srv.http_port, "GET", "/v1/models")[0] == 200, "and the server serves")
    # Moved aside whole: the shutdown's new file does not replace it.
    aside = [f for f in os.listdir(disk) if f.startswith("responses.json.unreadable-")]
    check(len(aside) == 1 and open(os.path.join(disk, aside[0])).read() == broken,
          f"the broken file is kept beside the new one: {sorted(os.listdir(disk))}")


def test_eviction_across_keys(binary, model, template, tmp):
    """The store is shared by the API keys: one key's response pushes out another's, whose state
    goes with it (it lives in the other key's namespace)."""
    keys = os.path.join(tmp, "keys")
    with open(keys, "w") as f:
        f.write("alice-key-0001 alice\nbob-key-000001 bob\n")
    with Server(binary, model, "--chat_template", template, "--stored_responses", "2",
                "--api_keys_file", keys, "--log_stats_interval_s", "0") as srv:
        def as_key(key, text):
            c = http.client.HTTPConnection("127.0.0.1", srv.http_port, timeout=60)
            c.request("POST", "/v1/responses", body=json.dumps({**GREEDY, "input": text}),
                      headers={"Content-Type": "application/json",
                               "Authorization": f"Bearer {key}"})
            r = c.getresponse()
            r.read()
            c.close()
            return r.status
        statuses = [as_key("alice-key-0001", "A1"), as_key("alice-key-0001", "A2"),
                    as_key("bob-key-000001", "B1")]
        check(statuses == [200, 200, 200], f"three stored responses, two keys ({statuses})")
        check(wait_until(lambda: sessions(srv) == 2, 10),
              f"alice's oldest is pushed out by bob's, and its state freed ({sessions(srv)})")


def test_quota(binary, model, template):
    """More stored responses than the responses namespace's session quota
    (--max_sessions_per_key 3): the oldest give their states up, and a conversation continued
    turn after turn keeps its state every turn."""
    with Server(binary, model, "--chat_template", template, "--max_sessions_per_key", "3",
                "--log_stats_interval_s", "0") as srv:
        port = srv.http_port
        previous, cached = None, []
        for turn in range(6):
            create(port, input=f"Aside {turn}.")  # another conversation, competing for states
            r = create(port, input=f"Turn {turn}.",
                       **({"previous_response_id": previous} if previous else {}))
            previous = r.get("id")
            cached.append(r.get("usage", {}).get("input_tokens_details", {}).get("cached_tokens"))
        check(all(c > 0 for c in cached[1:]), f"every continuation reuses its state ({cached})")
        check(sessions(srv) <= 3, f"the quota holds ({sessions(srv)} sessions)")
        check("no session" not in srv.stderr(), "no response went without a state")
        # The quota is the client's: a chat with n > 1 (its choices fork sessions of the server's
        # own) goes on past it, and those sessions are not listed as the key's.
        status, _, body = request(port, "POST", "/v1/chat/completions", {
            "model": "tiny", "n": 5, "max_tokens": 3, "temperature": 1, "seed": 7,
            "messages": [{"role": "user", "content": "Count."}]})
        choices = json.loads(body).get("choices", []) if status == 200 else []
        check(status == 200 and len(choices) == 5,
              f"n = 5 past the session quota: 5 choices ({status} {body[:200]!r})")
        status, _, body = request(port, "GET", "/v1/sessions")
        check(status == 200 and json.loads(body).get("data") == [],
              f"the key holds no session of its own ({status} {body[:200]!r})")


def test_developer_messages(port):
    """A developer message in a continuation joins the system prompt at the start (Qwen's template
    refuses one later): the conversation is rendered whole, then continued from its state."""
    a = create(port, instructions="Be brief.", input="Hail!")
    b = create(port, instructions="Be brief.", previous_response_id=a.get("id"),
               input=[{"role": "developer", "content": "Answer in French."},
                      {"role": "user", "content": "And then?"}])
    check(b.get("usage", {}).get("input_tokens_details", {}).get("cached_tokens") == 0,
          "a new developer message: the whole conversation is rendered")
    c = create(port, instructions="Be brief.", previous_response_id=b.get("id"), input="More.")
    check(c.get("usage", {}).get("input_tokens_details", {}).get("cached_tokens", 0) > 0,
          "then continued from the state")


def test_prefix_cache_usage(port):
    """A request without a session that extends a finished one resumes from its saved state
    (the prefix cache), and its usage says so, as OpenAI's prompt caching does."""
    first = "In the beginning God created the heaven and the earth."
    status, _, body = request(port, "POST", "/v1/completions",
                              {"model": "tiny", "prompt": first, "max_tokens": 8, "temperature": 0})
    a = json.loads(body)
    status, _, body = request(port, "POST", "/v1/completions", {
        "model": "tiny", "prompt": first + a["choices"][0]["text"] + " And then",
        "max_tokens": 8, "temperature": 0})
    u = json.loads(body)["usage"]
    check(status == 200 and 0 < u["prompt_tokens_details"]["cached_tokens"] < u["prompt_tokens"],
          f"completions usage counts the prefix cache's reuse ({u})")


def test_store_off(binary, model, template):
    """--stored_responses 0: every response is made as with "store": false, and says so; a
    lookup says why it finds nothing."""
    with Server(binary, model, "--chat_template", template, "--stored_responses", "0",
                "--log_stats_interval_s", "0") as srv:
        r = create(srv.http_port, input="Hello.", store=True)
        check(r.get("store") is False, f"the response says it is not stored ({r.get('store')})")
        status, _, body = request(srv.http_port, "GET", f"/v1/responses/{r.get('id')}")
        check(status == 404 and b"--stored_responses 0" in body,
              f"GET says the server stores none ({status} {body[:200]!r})")
        check(wait_until(lambda: sessions(srv) == 0, 10), "and no state is kept")


def main():
    binary, source_dir = sys.argv[1], sys.argv[2]
    model = os.path.join(source_dir, "models", "tiny")
    template = os.path.join(source_dir, "tests", "data", "chat_templates", "qwen3.5.jinja")
    with Server(binary, model, "--chat_template", template, "--stored_responses", "3",
                "--log_stats_interval_s", "0") as srv:
        test_store_accounting(srv)  # first: it counts on an empty store
        test_refused_stream_keeps_its_status(srv)
        test_client_leaves(srv)
        test_stream(srv.http_port)
        test_metrics(srv)
    with tempfile.TemporaryDirectory() as tmp:
        test_restart_keeps_responses(binary, model, template, tmp)
    test_quota(binary, model, template)
    test_store_off(binary, model, template)
    with tempfile.TemporaryDirectory() as tmp:
        test_eviction_across_keys(binary, model, template, tmp)
    with Server(binary, model, "--chat_template", template, "--log_stats_interval_s", "0",
                "--max_model_len", "300000", "--max_tokens_limit", "300000") as srv:
        test_refused_logprobs_leave_no_session(srv)
        test_stream_items_agree(srv.http_port)
        test_input_item_ids(srv.http_port)
        test_concurrent_continuations(srv.http_port)
        test_developer_messages(srv.http_port)
        test_prefix_cache_usage(srv.http_port)
        check(srv.proc.poll() is None, "the server is still running")
        if finish_failed():
            print(srv.stderr())
    return finish()


def finish_failed():
    import harness
    return harness._failed > 0


if __name__ == "__main__":
    sys.exit(main())
