#!/usr/bin/python3
"""The OpenAI-compatible HTTP API of the real `linfer serve` on loopback (the bundled model with
the real Qwen3.5 chat template, API keys on):

- the official `openai` Node SDK (tests/server/openai_sdk/sdk_test.mjs, npm-installed by the ctest
  fixture) for models, chat, completions, streaming, include_usage, n, logprobs, seeds, stop,
  reasoning, errors, API-key isolation, sessions and an aborted stream;
- curl for the SSE framing (headers, one `data:` event per token, `data: [DONE]`) and CORS (a
  browser's preflight and request);
- echo + logprobs on /v1/completions: the prompt's logprobs, each what the model gives that token
  when it generates it;
- the aborted stream's request is cancelled (metrics), and SIGTERM lets a stream in flight finish
  while new requests get 503;
- /tokenize (prompt, and messages + add_generation_prompt) gives the ids of gRPC Tokenize of the
  same text / of the template rendered by jinja2 the way transformers renders it; /detokenize
  round-trips;
- errors in OpenAI's JSON shape from servers set up for them: 413 for a body over
  --http_max_body_mb, 429 when the queue is full (--max_waiting 1);
- sampling defaults from generation_config.json reach a request that leaves them out;
- structured output (response_format json_schema / json_object, structured_outputs): every
  finished output validates against its schema by Debian's python3-jsonschema.

usage: openai_api_test.py LINFER_BINARY SOURCE_DIR SDK_NODE_MODULES
"""
import datetime
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testing"))
from harness import Server, check, finish, make_stubs, wait_until  # noqa: E402
from openai_http import KEY, OTHER, check_error, completion, curl, post  # noqa: E402
from openai_vllm_params import (  # noqa: E402
    test_allowed_token_ids_and_bad_words, test_cache_salt, test_logprob_token_ids,
    test_min_tokens_and_penalty_context,
    test_regex_outputs, test_request_id_prompt_text_and_truncation_side, test_return_token_ids,
    test_thinking_token_budget, test_vllm_prompt_params)


def test_sse_framing(port):
    body = {"model": "tiny", "prompt": "In the beginning", "max_tokens": 10, "temperature": 0,
            "stream": True, "stream_options": {"include_usage": True}}
    head, raw = curl(port, "/v1/completions", body)
    check(" 200 " in head.splitlines()[0], f"SSE: 200 ({head.splitlines()[0]})")
    lower = head.lower()
    check("content-type: text/event-stream" in lower, "SSE: text/event-stream")
    check("transfer-encoding: chunked" in lower, "SSE: chunked transfer encoding")
    check("cache-control: no-cache" in lower, "SSE: no-cache")
    text = raw.decode()
    check(text.endswith("data: [DONE]\n\n"), f"SSE: ends with data: [DONE] ({text[-40:]!r})")
    events = text.split("\n\n")
    check(events[-1] == "", "SSE: every event ends with a blank line")
    events = events[:-1]
    check(all(e.startswith("data: ") and "\n" not in e for e in events),
          "SSE: each event is one data: line")
    payloads = [json.loads(e[6:]) for e in events[:-1]]
    tokens = [p for p in payloads if p["choices"]]
    check(len(tokens) == 10 and all(p["choices"][0]["text"] for p in tokens),
          f"SSE: one event per token ({len(tokens)})")
    # The finish rides on the last token's event, as vLLM's (`vllm bench` counts every event).
    check(payloads[-2]["choices"][0]["finish_reason"] == "length" and
          all(p["choices"][0]["finish_reason"] is None for p in tokens[:-1]),
          "SSE: the last token's event finishes")
    check(payloads[-1]["choices"] == [] and payloads[-1]["usage"]["completion_tokens"] == 10,
          "SSE: usage event")
    # Chat: the role rides on the first token's chunk, and ids are stable across chunks.
    chat = {"model": "tiny", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5,
            "stream": True, "chat_template_kwargs": {"enable_thinking": False}}
    _, raw = curl(port, "/v1/chat/completions", chat, extra=["-H", "x-request-id: abc-123"])
    events = [json.loads(e[6:]) for e in raw.decode().split("\n\n") if e.startswith("data: {")]
    check(len(events) == 5 and events[0]["choices"][0]["delta"].get("role") == "assistant" and
          events[-1]["choices"][0]["finish_reason"] == "length" and
          events[-1]["choices"][0]["delta"].get("content"),
          f"chat SSE: 5 token events, role first, the finish on the last ({len(events)})")
    check(len({e["id"] for e in events}) == 1 and events[0]["id"].startswith("chatcmpl-"),
          "chat SSE: one id")
    head, _ = curl(port, "/v1/models", extra=["-H", "x-request-id: abc-123"])
    check(" 200 " in head, "models with a request id")


def test_cors(port):
    """A browser's preflight and request (the server's default --allowed_origins "*"): the
    preflight gets 204 with the route's methods and the asked headers, without an API key; the
    request's answer (a stream too) carries Access-Control-Allow-Origin."""
    head, _ = curl(port, "/v1/chat/completions", key=None, extra=[
        "-X", "OPTIONS", "-H", "Origin: http://localhost:3000",
        "-H", "Access-Control-Request-Method: POST",
        "-H", "Access-Control-Request-Headers: authorization, content-type"])
    lower = head.lower()
    check(" 204 " in head.splitlines()[0], f"CORS preflight: 204 ({head.splitlines()[0]})")
    check("access-control-allow-origin: *" in lower, "CORS preflight: allow-origin")
    check("access-control-allow-methods: post, options" in lower, "CORS preflight: methods")
    check("access-control-allow-headers: authorization, content-type" in lower,
          "CORS preflight: the asked headers (Authorization included)")
    body = {"model": "tiny", "prompt": "In", "max_tokens": 2, "stream": True}
    head, raw = curl(port, "/v1/completions", body, extra=["-H", "Origin: http://localhost:3000"])
    check(" 200 " in head and "access-control-allow-origin: *" in head.lower() and
          raw.decode().endswith("data: [DONE]\n\n"), "CORS: a stream carries allow-origin")
    head, _ = curl(port, "/v1/models")
    check("access-control" not in head.lower(), "no Origin, no CORS headers")


def test_prompt_logprobs(port):
    """echo + logprobs on /v1/completions (lm-evaluation-harness' loglikelihood request): the
    prompt's tokens first (the first with null logprob and top_logprobs), then the generated one;
    their offsets count the echoed text; a prompt token's logprob is the one the model gives that
    token when it generates it greedily after the prompt's start."""
    st, _, raw = post(port, "/v1/completions", {
        "model": "tiny", "prompt": "In the beginning", "max_tokens": 1, "temperature": 0,
        "logprobs": 1})
    first = json.loads(raw)["choices"][0]
    st, _, raw = post(port, "/v1/completions", {
        "model": "tiny", "prompt": "In the beginning", "max_tokens": 1, "temperature": 0,
        "logprobs": 1, "echo": True})
    check(st == 200, f"echo + logprobs: 200 ({st} {raw[:200]!r})")
    if st != 200:
        return
    r = json.loads(raw)
    lp = r["choices"][0]["logprobs"]
    n = r["usage"]["prompt_tokens"]
    check(len(lp["tokens"]) == n + 1 == len(lp["token_logprobs"]) == len(lp["text_offset"]),
          f"echo + logprobs: {n} prompt entries + 1 ({len(lp['tokens'])})")
    check(lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None,
          "echo + logprobs: the first token has none")
    check(all(isinstance(v, float) and v <= 0 for v in lp["token_logprobs"][1:]),
          "echo + logprobs: the others are logprobs")
    # (The model's tokenizer adds <|endoftext|> in front: its text is among the tokens', not in
    # the echo.)
    check("".join(lp["tokens"][:n]).endswith("In the beginning") and lp["text_offset"][0] == 0 and
          all(lp["text_offset"][k + 1] == lp["text_offset"][k] + len(lp["tokens"][k])
              for k in range(n)),
          f"echo + logprobs: tokens and offsets ({lp['tokens']}, {lp['text_offset']})")
    # Offsets count characters (Python's len, as OpenAI's API), also past a two-byte one; every
    # top_logprobs holds the sampled token ("up to logprobs + 1 elements").
    st, _, raw = post(port, "/v1/completions", {
        "model": "tiny", "prompt": "a\u00b7b\u00b7c and", "max_tokens": 3, "temperature": 0,
        "logprobs": 0, "echo": True})
    wide = json.loads(raw)["choices"][0]["logprobs"]
    check(st == 200 and all(wide["text_offset"][k + 1] ==
                            wide["text_offset"][k] + len(wide["tokens"][k])
                            for k in range(len(wide["tokens"]) - 1)),
          f"echo + logprobs past '\u00b7': offsets in characters ({wide['tokens']}, "
          f"{wide['text_offset']})")
    check(all(top is None or list(top) == [tok]
              for tok, top in zip(wide["tokens"], wide["top_logprobs"])) and
          all(lp["tokens"][k] in lp["top_logprobs"][k] for k in range(1, n + 1)),
          f"top_logprobs hold the token itself ({wide['top_logprobs']}, {lp['top_logprobs']})")
    check(r["choices"][0]["text"] == "In the beginning" + first["text"] and
          abs(lp["token_logprobs"][n] - first["logprobs"]["token_logprobs"][0]) < 1e-5,
          "echo + logprobs: the generated token as without echo")
    # The prompt's ids with the token generated after them and one more: that token's echoed
    # logprob is the one it was generated with.
    _, _, raw = post(port, "/tokenize", {"model": "tiny", "prompt": "In the beginning"})
    ids = json.loads(raw)["tokens"]
    st, _, raw = post(port, "/tokenize", {"model": "tiny", "prompt": "a",
                                          "messages": [{"role": "user", "content": "b"}]})
    check(st == 400 and b"not both" in raw, f"/tokenize with prompt and messages: {st} {raw!r}")
    _, _, raw = post(port, "/v1/completions", {
        "model": "tiny", "prompt": ids, "max_tokens": 1, "temperature": 0, "logprobs": 1})
    gen = json.loads(raw)["choices"][0]["logprobs"]["token_logprobs"][0]
    _, _, raw = post(port, "/tokenize", {"model": "tiny", "prompt": first["text"],
                                         "add_special_tokens": False})
    st, _, raw = post(port, "/v1/completions", {
        "model": "tiny", "prompt": ids + json.loads(raw)["tokens"][:1] + [5], "max_tokens": 1,
        "temperature": 0, "logprobs": 1, "echo": True})
    again = json.loads(raw)["choices"][0]["logprobs"]
    check(st == 200 and abs(again["token_logprobs"][len(ids)] - gen) < 1e-4,
          f"echo + logprobs: a prompt token's logprob = its logprob when generated "
          f"({again['token_logprobs'][len(ids)]} vs {gen})")


def test_cached_tokens_from_the_first_chunk(port):
    """A prompt that resends an earlier request's tokens and its reply resumes from the prefix
    cache; with continuous_usage_stats every chunk says so, from the first token on (it used to
    say 0 until the last)."""
    prompt = "In the beginning God created the heaven and the earth. " * 5
    _, _, raw = post(port, "/v1/completions", {"model": "tiny", "prompt": prompt,
                                                "max_tokens": 8, "temperature": 0})
    reply = json.loads(raw)["choices"][0]["text"]
    _, _, raw = post(port, "/v1/completions", {
        "model": "tiny", "prompt": prompt + reply + " And", "max_tokens": 4, "temperature": 0,
        "stream": True, "stream_options": {"include_usage": True, "continuous_usage_stats": True}})
    cached = [json.loads(line[6:])["usage"]["prompt_tokens_details"]["cached_tokens"]
              for line in raw.decode().split("\n") if line.startswith("data: {")]
    check(len(cached) > 1 and cached[0] > 0 and len(set(cached)) == 1,
          f"cached_tokens from the first chunk on ({cached})")
    # n > 1: the prompt's prefill resumes from the cache, counted once (it used to say 0).
    _, _, raw = post(port, "/v1/completions", {
        "model": "tiny", "prompt": prompt + reply + " And so", "max_tokens": 2, "n": 2,
        "temperature": 0})
    usage = json.loads(raw)["usage"]
    got = usage["prompt_tokens_details"]["cached_tokens"]
    check(0 < got < usage["prompt_tokens"], f"cached_tokens with n = 2 ({usage})")


def test_vllm_prompt_logprobs(port):
    """vLLM's prompt_logprobs: per completion choice (and at the top of a chat response) a list,
    null for the first prompt token, then {"<id>": {logprob, rank, decoded_token}} holding the
    prompt token with the logprob echo + logprobs gives it; refused with stream."""
    body = {"model": "tiny", "prompt": "In the beginning", "max_tokens": 1, "temperature": 0}
    st, _, raw = post(port, "/v1/completions", {**body, "prompt_logprobs": 2})
    check(st == 200, f"prompt_logprobs: 200 ({st} {raw[:200]!r})")
    if st != 200:
        return
    r = json.loads(raw)
    pl = r["choices"][0]["prompt_logprobs"]
    _, _, raw = post(port, "/v1/completions", {**body, "echo": True, "logprobs": 1})
    echo = json.loads(raw)["choices"][0]["logprobs"]
    _, _, raw = post(port, "/tokenize", {"model": "tiny", "prompt": "In the beginning"})
    ids = json.loads(raw)["tokens"]
    check(len(pl) == len(ids) == r["usage"]["prompt_tokens"] and pl[0] is None,
          f"prompt_logprobs: one per prompt token, null first ({len(pl)} vs {len(ids)})")
    ok = True
    for k in range(1, len(ids)):
        e = pl[k].get(str(ids[k]))
        ok &= (e is not None and e["rank"] >= 1 and isinstance(e["decoded_token"], str) and
               abs(e["logprob"] - echo["token_logprobs"][k]) < 1e-5 and
               len(pl[k]) <= 3 and any(v["rank"] == 1 for v in pl[k].values()))
    check(ok, f"prompt_logprobs: each prompt token with its rank, as echo's logprobs ({pl[:3]})")
    st, _, raw = post(port, "/v1/chat/completions", {
        "model": "tiny", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1,
        "prompt_logprobs": 0})
    r = json.loads(raw)
    check(st == 200 and len(r.get("prompt_logprobs") or []) == r["usage"]["prompt_tokens"] and
          all(len(d) == 1 for d in r["prompt_logprobs"][1:]),
          f"chat prompt_logprobs: top level, the tokens alone with 0 ({st})")
    check_error("prompt_logprobs with stream", post(port, "/v1/completions", {
        **body, "prompt_logprobs": 1, "stream": True}), 400, "invalid_request_error")


def test_chat_extras(port):
    """vLLM's continue_final_message (an assistant prefill continued; refused with a session) and
    reasoning_effort on chat."""
    msgs = [{"role": "user", "content": "Say a color."},
            {"role": "assistant", "content": "The color is"}]
    st, _, raw = post(port, "/v1/chat/completions", {
        "model": "tiny", "messages": msgs, "max_tokens": 3, "continue_final_message": True,
        "add_generation_prompt": False})
    check(st == 200, f"continue_final_message: 200 ({st} {raw[:200]!r})")
    _, _, raw = post(port, "/tokenize", {"model": "tiny", "messages": msgs,
                                         "continue_final_message": True})
    _, _, text = post(port, "/detokenize", {"model": "tiny", "tokens": json.loads(raw)["tokens"]})
    check(json.loads(text)["prompt"].endswith("The color is"),
          f"continue_final_message: the prompt ends in the open message ({text[-80:]!r})")
    check_error("continue_final_message with a session",
                post(port, "/v1/chat/completions", {
                    "model": "tiny", "messages": msgs, "max_tokens": 3,
                    "continue_final_message": True, "session_id": "cfm-1",
                    "create_session": True}), 400, "invalid_request_error")
    check_error("reasoning_effort", post(port, "/v1/chat/completions", {
        "model": "tiny", "messages": msgs[:1], "max_tokens": 1, "reasoning_effort": "max"}),
        400, "invalid_request_error")
    st, _, _ = post(port, "/v1/chat/completions", {
        "model": "tiny", "messages": msgs[:1], "max_tokens": 1, "reasoning_effort": "none"})
    check(st == 200, f"reasoning_effort none: 200 ({st})")


def test_auth_and_errors(port):
    head, body = curl(port, "/v1/models", key=None)
    check(" 401 " in head and "www-authenticate: bearer" in head.lower(), "no key: 401")
    check(json.loads(body)["error"]["type"] == "authentication_error", "401 body")
    head, body = curl(port, "/v1/chat/completions", {"model": "tiny", "messages": "hi"})
    check(" 400 " in head and json.loads(body)["error"]["param"] == "messages",
          f"messages not a list: 400 naming it ({body[:120]!r})")
    head, _ = curl(port, "/v1/chat/completions", key=KEY, extra=["-X", "GET"])
    check(" 405 " in head and "allow: post" in head.lower(), "GET on a POST route: 405")
    head, _ = curl(port, "/health", key=None)
    check(" 200 " in head, "health needs no key")
    # Priorities are vLLM's opt-in (--scheduling_policy priority): under fcfs, the default, a
    # client cannot put itself ahead of the others.
    got = post(port, "/v1/completions", {"model": "tiny", "prompt": "hi", "max_tokens": 2,
                                         "priority": -5})
    check_error("a priority under fcfs", got, 400, "invalid_request_error")
    check(b"--scheduling_policy priority" in got[2], f"a priority under fcfs ({got[2][:200]!r})")
    st, _, _ = post(port, "/v1/completions", {"model": "tiny", "prompt": "hi", "max_tokens": 2,
                                              "priority": 0})
    check(st == 200, f"priority 0 under fcfs: 200 ({st})")
    # One request may not fill the queue: 256 prompts × n 128 is refused, naming why.
    got = post(port, "/v1/completions", {"model": "tiny", "prompt": ["hi"] * 256, "n": 128,
                                         "max_tokens": 2})
    check_error("256 prompts × n 128", got, 400, "invalid_request_error")
    check(b"asks for 32768 sequences" in got[2], f"256 prompts × n 128: names it ({got[2][:200]!r})")
    # A prompt past the context: worded as vLLM's and OpenAI's, which clients recognise.
    got = post(port, "/v1/completions", {"model": "tiny", "prompt": [1] * 5000, "max_tokens": 3})
    check_error("a prompt past max_model_len", got, 400, "invalid_request_error")
    check(b"This model's maximum context length is " in got[2] and b"5003 tokens" in got[2],
          f"a prompt past max_model_len: the context error's wording ({got[2][:200]!r})")
    # With n > 1 the same numbers (the engine sees a prefill and one token per choice; its error
    # said "4999 in the prompt, 1 for max_tokens").
    got = post(port, "/v1/completions", {"model": "tiny", "prompt": [1] * 5000, "max_tokens": 3,
                                         "n": 2})
    check(got[0] == 400 and b"5000 in the prompt, 3 for max_tokens" in got[2],
          f"n 2, a prompt past max_model_len: the client's numbers ({got[2][:200]!r})")


STRUCTURED_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 12,
                 "pattern": "^[A-Z][a-z]*( [A-Z][a-z]*)?$"},
        "born": {"type": "string", "format": "date"},
        "age": {"type": "integer", "minimum": 0, "exclusiveMaximum": 130},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 6}, "maxItems": 3},
        "pet": {"anyOf": [{"type": "null"},
                          {"type": "object",
                           "properties": {"kind": {"enum": ["cat", "dog", 7]},
                                          "legs": {"type": "number", "minimum": 0,
                                                   "exclusiveMaximum": 8.5}},
                           "required": ["kind"], "additionalProperties": False}]},
        "ok": {"type": "boolean"},
    },
    "required": ["name", "age", "born", "ok"],
    "additionalProperties": False,
}


def validate(jsonschema, doc, schema):
    """python3-jsonschema with its format checker (date: datetime.date.fromisoformat)."""
    jsonschema.validate(doc, schema, format_checker=jsonschema.FormatChecker())


def test_structured_grpc(address, jsonschema):
    """gRPC Generate's json_schema / json_object: the streamed text validates."""
    import grpc
    from linfer.v1 import generation_pb2 as g, generation_pb2_grpc
    stub = generation_pb2_grpc.GenerationStub(grpc.insecure_channel(address))
    md = [("authorization", f"Bearer {KEY}")]
    for i, fields in enumerate([{"json_schema": json.dumps(STRUCTURED_SCHEMA)},
                                {"json_object": True}]):
        req = g.GenerateRequest(text="{", sampling=g.SamplingParams(temperature=1.0, seed=i),
                                **fields)
        req.stop.max_tokens = 600
        msgs = list(stub.Generate(req, metadata=md, timeout=60))
        text = "".join(m.text for m in msgs)
        if msgs and msgs[-1].finish_reason == "stop":
            try:
                doc = json.loads(text)
                if "json_schema" in fields:
                    validate(jsonschema, doc, STRUCTURED_SCHEMA)
                check(isinstance(doc, dict), "")
            except (ValueError, jsonschema.ValidationError) as e:
                check(False, f"gRPC structured output {i} validates: {text!r}: {e}")
        else:
            check(i == 1, f"gRPC structured output {i} ends by itself ({text!r})")
    req = g.GenerateRequest(text="{", json_schema='{"type": "integer", "multipleOf": 3}')
    try:
        list(stub.Generate(req, metadata=md, timeout=60))
        check(False, "gRPC: an unsupported keyword is refused")
    except grpc.RpcError as e:
        check(e.code() == grpc.StatusCode.INVALID_ARGUMENT and "json_schema.multipleOf" in
              (e.details() or ""), f"gRPC: INVALID_ARGUMENT naming the keyword ({e.details()})")


def test_structured_output(port, *srv_address):
    """response_format / structured_outputs: every finished output is JSON that an independent
    validator (python3-jsonschema) accepts against the request's schema; greedy, sampled, n > 1,
    streamed, chat and completions; schema errors are 400s naming the keyword."""
    try:
        import jsonschema  # noqa: PLC0415 - Debian's python3-jsonschema (deploy/setup.sh)
    except ImportError:
        check(False, "python3-jsonschema is not installed (deploy/setup.sh installs it)")
        return
    fmt = {"type": "json_schema",
           "json_schema": {"name": "person", "strict": True, "schema": STRUCTURED_SCHEMA}}
    msgs = [{"role": "user", "content": "Describe a person as JSON."}]
    outputs = []
    for i, temp in enumerate([0, 1.0, 1.0, 0.7, 1.3]):
        st, _, raw = post(port, "/v1/chat/completions",
                          {"messages": msgs, "response_format": fmt, "max_tokens": 600,
                           "temperature": temp, "seed": i, "n": 2 if i == 2 else 1})
        check(st == 200, f"structured chat {i}: 200 ({st} {raw[:200]!r})")
        if st == 200:
            outputs += [(c["finish_reason"], c["message"]["content"])
                        for c in json.loads(raw)["choices"]]
    st, _, raw = post(port, "/v1/completions",
                      {"prompt": "{", "max_tokens": 600, "seed": 9, "temperature": 1.0,
                       "structured_outputs": {"json": STRUCTURED_SCHEMA}})
    check(st == 200, f"structured completion: 200 ({st} {raw[:200]!r})")
    if st == 200:
        c = json.loads(raw)["choices"][0]
        outputs.append((c["finish_reason"], c["text"]))
    _, body = curl(port, "/v1/chat/completions",
                   {"messages": msgs, "response_format": fmt, "max_tokens": 600, "seed": 3,
                    "stream": True})
    text = ""
    for line in body.decode().splitlines():
        if line.startswith("data: {"):
            for c in json.loads(line[6:])["choices"]:
                text += c["delta"].get("content") or ""
    outputs.append(("stop" if text else "empty", text))
    finished = 0
    for finish, content in outputs:
        if finish != "stop":
            continue  # cut by max_tokens: a prefix of a document
        finished += 1
        try:
            doc = json.loads(content)
            validate(jsonschema, doc, STRUCTURED_SCHEMA)
            check(True, "")
        except (ValueError, jsonschema.ValidationError) as e:
            check(False, f"structured output validates: {content!r}: {e}")
    check(finished >= len(outputs) - 2, f"structured outputs end by themselves ({outputs})")
    st, _, raw = post(port, "/v1/chat/completions",
                      {"messages": msgs, "response_format": {"type": "json_object"},
                       "max_tokens": 300, "seed": 1, "temperature": 0.8})
    c = json.loads(raw)["choices"][0] if st == 200 else {}
    if c.get("finish_reason") == "stop":
        check(isinstance(json.loads(c["message"]["content"]), dict), "json_object: an object")
    test_structured_grpc(srv_address[0], jsonschema)
    st, _, raw = post(port, "/v1/chat/completions",
                      {"messages": msgs, "response_format": fmt, "max_tokens": 300, "seed": 4,
                       "structured_outputs": {"disable_any_whitespace": True}})
    c = json.loads(raw)["choices"][0] if st == 200 else {}
    text = c.get("message", {}).get("content") or ""

    def outside_strings(t):  # the document's bytes that are not inside a string
        out, inside, escaped = [], False, False
        for ch in t:
            if inside:
                inside = escaped or ch != '"'
                escaped = not escaped and ch == "\\"
            elif ch == '"':
                inside = True
            else:
                out.append(ch)
        return "".join(out)
    try:
        json.loads(text)
        compact = not any(ch in " \t\n\r" for ch in outside_strings(text))
    except ValueError:
        compact = False
    check(c.get("finish_reason") != "stop" or compact,
          f"disable_any_whitespace: compact JSON ({st} {text!r})")
    choices = ["positive", "negative", "neutral", "pos"]
    for seed in range(4):
        st, _, raw = post(port, "/v1/chat/completions",
                          {"messages": msgs, "structured_outputs": {"choice": choices},
                           "max_tokens": 20, "seed": seed, "temperature": 1.0})
        c = json.loads(raw)["choices"][0] if st == 200 else {}
        check(c.get("finish_reason") == "stop" and c["message"]["content"] in choices,
              f"structured_outputs.choice: one of them ({st} {raw[:200]!r})")
    bad = dict(STRUCTURED_SCHEMA, properties={"name": {"type": "integer", "multipleOf": 2}})
    got = post(port, "/v1/chat/completions",
               {"messages": msgs, "response_format": {"type": "json_schema",
                                                      "json_schema": {"name": "p",
                                                                      "schema": bad}}})
    check_error("unsupported schema keyword", got, 400, "invalid_request_error")
    param = json.loads(got[2])["error"]["param"] if got[0] == 400 else None
    check(param == "response_format.json_schema.schema.properties.name.multipleOf",
          f"the error names the keyword ({param})")



def run_sdk(srv, node_modules, source_dir):
    script = os.path.join(source_dir, "tests", "server", "openai_sdk", "sdk_test.mjs")
    p = subprocess.run(["node", script, node_modules, f"http://127.0.0.1:{srv.http_port}", KEY,
                        OTHER, "tiny"], capture_output=True, text=True, timeout=600)
    print(p.stdout[-6000:], p.stderr[-3000:], flush=True)
    check(p.returncode == 0, f"openai SDK test passed (exit {p.returncode})")


def test_cancel_and_drain(srv):
    check(wait_until(lambda: (srv.metric("linfer_requests_running") or 0) == 0, 10),
          "the aborted stream's request is gone")
    test_generation_defaults_tiny(srv.http_port)
    cancelled = srv.metrics()
    check('finish_reason="cancelled"' in cancelled, "an aborted stream is cancelled")
    # SIGTERM while a stream is in flight: it finishes (drain grace), then the server exits 0.
    out = {}

    def stream():
        body = {"model": "tiny", "prompt": "Then", "max_tokens": 1500, "ignore_eos": True,
                "stream": True}
        out["head"], out["raw"] = curl(srv.http_port, "/v1/completions", body)

    t = threading.Thread(target=stream)
    t.start()
    wait_until(lambda: (srv.metric("linfer_requests_running") or 0) >= 1, 10, 0.01)
    srv.proc.send_signal(signal.SIGTERM)
    got = {}

    def refused():
        try:
            got["r"] = post(srv.http_port, "/v1/completions",
                            {"model": "tiny", "prompt": "x", "max_tokens": 2}, timeout=10)
        except OSError as e:
            got["r"] = (None, {}, str(e).encode())
        return got["r"][0] == 503

    wait_until(refused, 10, 0.05)
    check_error("a new request while draining", got["r"], 503, "service_unavailable")
    try:
        code = srv.proc.wait(60)
    except subprocess.TimeoutExpired:
        code = None
    t.join(90)
    raw = out.get("raw", b"").decode()
    check(raw.endswith("data: [DONE]\n\n") and '"finish_reason":"length"' in raw,
          f"the stream in flight finished during the drain ({raw[-80:]!r})")
    check(code == 0, f"drained and exited 0 (exit {code})")


def test_tokenize(srv, source_dir, template):
    """/tokenize and /detokenize against gRPC Tokenize / Detokenize and a jinja2 render."""
    import grpc
    from linfer.v1 import generation_pb2 as g, generation_pb2_grpc
    sys.path.insert(0, os.path.join(source_dir, "tests", "tokenizer", "chat_template"))
    from oracle import make_env
    channel = grpc.insecure_channel(srv.address)
    stub = generation_pb2_grpc.GenerationStub(channel)
    md = [("authorization", f"Bearer {KEY}")]
    port = srv.http_port
    for text in ["In the beginning", "Hello, w\u00f6rld! \u4f60\u597d \U0001f642\n  two  spaces\ttab",
                 "<|im_start|>user"]:
        st, _, body = post(port, "/tokenize", {"model": "tiny", "prompt": text})
        out = json.loads(body) if st == 200 else {}
        ref = list(stub.Tokenize(g.TokenizeRequest(text=text, add_special_tokens=True),
                                 metadata=md, timeout=30).token_ids)
        check(st == 200 and out["tokens"] == ref and out["count"] == len(ref) and ref,
              f"/tokenize prompt {text[:20]!r} = gRPC Tokenize ({body[:150]!r} vs {ref[:10]})")
        # Without the BOS that add_special_tokens puts first, /detokenize gives the text back (it
        # keeps special tokens, as vLLM's does).
        st, _, body = post(port, "/tokenize", {"prompt": text, "add_special_tokens": False})
        plain = json.loads(body).get("tokens") if st == 200 else []
        ref_plain = list(stub.Tokenize(g.TokenizeRequest(text=text), metadata=md,
                                       timeout=30).token_ids)
        check(plain == ref_plain, f"/tokenize add_special_tokens false = gRPC ({text[:20]!r})")
        for ids, want in [(plain, text), (ref, None)]:
            st, _, body = post(port, "/detokenize", {"model": "tiny", "tokens": ids})
            back = json.loads(body).get("prompt") if st == 200 else None
            ref_text = stub.Detokenize(g.DetokenizeRequest(token_ids=ids), metadata=md,
                                       timeout=30).text
            check(back == ref_text and (want is None or back == want),
                  f"/detokenize {ids[:4]}... = gRPC Detokenize, round-trips ({back!r})")
    with open(template) as f:
        env = make_env(datetime.datetime.now())
        compiled = env.from_string(f.read())
    messages = [{"role": "system", "content": "You are terse."},
                {"role": "user", "content": "Hi \u00fc"},
                {"role": "assistant", "content": "Hello."},
                {"role": "user", "content": "Count to 3"}]
    for agp in (True, False):
        for kwargs in ({}, {"enable_thinking": False}):
            text = compiled.render(messages=messages, add_generation_prompt=agp, **kwargs)
            st, _, body = post(port, "/tokenize", {
                "model": "tiny", "messages": messages, "add_generation_prompt": agp,
                "chat_template_kwargs": kwargs})
            ids = json.loads(body).get("tokens") if st == 200 else None
            ref = list(stub.Tokenize(g.TokenizeRequest(text=text, add_special_tokens=False),
                                     metadata=md, timeout=30).token_ids)
            check(ids == ref and ref, f"/tokenize messages (add_generation_prompt={agp}, "
                  f"{kwargs}) = Tokenize(jinja2 render) ({st} {body[:100]!r})")
    channel.close()


def test_body_too_large(binary, model):
    """A body over --http_max_body_mb gets a JSON 413 (not libevent's HTML page)."""
    with Server(binary, model, "--http_max_body_mb", "1", "--log_stats_interval_s", "0") as srv:
        big = {"model": "tiny", "prompt": "x" * (1536 << 10), "max_tokens": 1}
        for path in ["/v1/completions", "/tokenize", "/no/such/path"]:
            check_error(f"1.5 MiB body to {path}", post(srv.http_port, path, big, key=None), 413,
                        "invalid_request_error")
        # Unknown fields are ignored: a body just under the limit is a valid request.
        st, _, _ = post(srv.http_port, "/v1/completions",
                        {"model": "tiny", "prompt": "x", "max_tokens": 1, "pad": "x" * (1000 << 10)},
                        key=None)
        check(st == 200, f"a body just under the limit is served ({st})")


def open_stream(port, body):
    """Starts a streaming request on a raw socket and returns the socket once it answered."""
    data = json.dumps(body).encode()
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % len(data) + data)
    return s


def test_queue_full(binary, model):
    """--max_running 1 --max_waiting 1: one running, one waiting, the next gets 429."""
    with Server(binary, model, "--max_running", "1", "--max_waiting", "1", "--max_model_len",
                "100000", "--log_stats_interval_s", "0") as srv:
        long = {"model": "tiny", "prompt": "Then", "max_tokens": 30000, "ignore_eos": True,
                "stream": True}
        socks = [open_stream(srv.http_port, long)]
        check(wait_until(lambda: (srv.metric("linfer_requests_running") or 0) == 1, 10, 0.02),
              "429 setup: one request running")
        socks.append(open_stream(srv.http_port, long))
        check(wait_until(lambda: (srv.metric("linfer_requests_waiting") or 0) == 1, 10, 0.02),
              "429 setup: one request waiting")
        check_error("a request beyond --max_waiting", post(
            srv.http_port, "/v1/completions", {"model": "tiny", "prompt": "x", "max_tokens": 2},
            key=None), 429, "rate_limit_error")
        check_error("a streaming request beyond --max_waiting", post(
            srv.http_port, "/v1/completions",
            {"model": "tiny", "prompt": "x", "max_tokens": 2, "stream": True}, key=None),
            429, "rate_limit_error")
        for s in socks:
            s.close()
        check(wait_until(lambda: (srv.metric("linfer_requests_running") or 0) == 0 and
                         (srv.metric("linfer_requests_waiting") or 0) == 0, 15),
              "429 setup: the held streams are cancelled")
        st, _, _ = post(srv.http_port, "/v1/completions",
                        {"model": "tiny", "prompt": "x", "max_tokens": 2}, key=None)
        check(st == 200, f"served again once the queue has room ({st})")


def test_generation_defaults_tiny(port):
    """models/tiny's generation_config.json: temperature 0.8, top_p 0.95, max_new_tokens 200."""
    _, _, usage = completion(port)
    check(usage.get("completion_tokens") == 200,
          f"max_tokens left out: generation_config's max_new_tokens 200 ({usage})")
    sampled = {completion(port, seed=s, max_tokens=24)[1] for s in range(4)}
    greedy = {completion(port, seed=s, max_tokens=24, temperature=0)[1] for s in range(4)}
    check(len(sampled) > 1, f"temperature left out: sampled (0.8), seeds differ ({sampled})")
    check(len(greedy) == 1, f"temperature 0 given: greedy, seeds agree ({greedy})")


def test_generation_defaults_greedy(binary, source_dir, tmp):
    """The same weights with generation_config.json {temperature 0, max_new_tokens 7}: a request
    that leaves both out is greedy and 7 tokens long."""
    model = os.path.join(tmp, "tiny-greedy")
    os.makedirs(model)
    tiny = os.path.join(source_dir, "models", "tiny")
    for name in ["config.json", "tokenizer.json", "model.safetensors"]:
        os.symlink(os.path.join(tiny, name), os.path.join(model, name))
    with open(os.path.join(model, "generation_config.json"), "w") as f:
        json.dump({"temperature": 0.0, "max_new_tokens": 7}, f)
    with Server(binary, model, "--log_stats_interval_s", "0") as srv:
        runs = [completion(srv.http_port, key=None, seed=s) for s in range(3)]
        check(all(r[0] == 200 and r[2].get("completion_tokens") == 7 for r in runs),
              f"generation_config max_new_tokens 7 reaches the request ({runs[0]})")
        check(len({r[1] for r in runs}) == 1, f"generation_config temperature 0: greedy ({runs})")
        _, _, usage = completion(srv.http_port, key=None, max_tokens=3)
        check(usage.get("completion_tokens") == 3, "an explicit max_tokens wins over the default")


def test_split_request_metrics(binary, model):
    """n > 1 runs as several engine requests (a prefill and forks; min_tokens ran as two legs
    before the engine took it): each choice counts once among the finished requests, and its
    latencies count from the client's request (the e2e of a min_tokens request was its second
    leg's alone, below its own TTFT)."""
    with Server(binary, model, "--log_stats_interval_s", "0") as srv:
        def totals():
            return {name: srv.metric(name) or 0 for name in [
                "linfer_requests_finished_total", "linfer_e2e_request_latency_seconds_sum",
                "linfer_e2e_request_latency_seconds_count",
                "linfer_time_to_first_token_seconds_sum",
                "linfer_request_generation_tokens_sum", "linfer_request_prompt_tokens_sum",
                "linfer_request_decode_time_seconds_sum",
                "linfer_request_prefill_time_seconds_count"]}
        prompt = "Once upon a time " * 40
        for fields, choices in [({"n": 3}, 3), ({"min_tokens": 150, "max_tokens": 200}, 1)]:
            before = totals()
            start = time.monotonic()
            st, _, raw = post(srv.http_port, "/v1/completions",
                              {"prompt": prompt, "max_tokens": 200, "ignore_eos": True,
                               **fields}, key=None)
            wall = time.monotonic() - start
            check(st == 200, f"{fields}: {st} {raw[:200]!r}")
            usage = json.loads(raw)["usage"]
            check(wait_until(lambda: (srv.metric("linfer_requests_running") or 0) == 0, 10),
                  "idle after the request")
            d = {k: v - before[k] for k, v in totals().items()}
            check(d["linfer_requests_finished_total"] == choices and
                  d["linfer_e2e_request_latency_seconds_count"] == choices,
                  f"{fields}: {choices} finished, each counted once: {d}")
            e2e = d["linfer_e2e_request_latency_seconds_sum"] / choices
            check(0.5 * wall <= e2e <= wall + 0.05,
                  f"{fields}: e2e {e2e:.3f} s per choice, the request took {wall:.3f} s")
            check(d["linfer_time_to_first_token_seconds_sum"] / choices <= e2e,
                  f"{fields}: TTFT within the e2e: {d}")
            # Per choice as the client sees it: its prompt, all of its tokens.
            check(d["linfer_request_generation_tokens_sum"] == usage["completion_tokens"] and
                  d["linfer_request_prompt_tokens_sum"] == choices * usage["prompt_tokens"] and
                  d["linfer_request_prefill_time_seconds_count"] == choices,
                  f"{fields}: per-request token histograms ({usage}): {d}")
            check(0 < d["linfer_request_decode_time_seconds_sum"] / choices <= e2e,
                  f"{fields}: decode time within the e2e: {d}")


def main():
    binary, source_dir, node_modules = sys.argv[1], sys.argv[2], sys.argv[3]
    model = os.path.join(source_dir, "models", "tiny")
    template = os.path.join(source_dir, "tests", "data", "chat_templates", "qwen3.5.jinja")
    with tempfile.TemporaryDirectory() as d:
        make_stubs(source_dir, os.path.join(d, "stubs"))
        keys = os.path.join(d, "keys")
        with open(keys, "w") as f:
            f.write(f"{KEY} alice\n{OTHER} bob\n")
        with Server(binary, model, "--chat_template", template, "--api_keys_file", keys,
                    "--log_stats_interval_s", "0") as srv:
            test_sse_framing(srv.http_port)
            test_cors(srv.http_port)
            test_prompt_logprobs(srv.http_port)
            test_chat_extras(srv.http_port)
            test_vllm_prompt_logprobs(srv.http_port)
            test_cached_tokens_from_the_first_chunk(srv.http_port)
            test_auth_and_errors(srv.http_port)
            test_tokenize(srv, source_dir, template)
            test_structured_output(srv.http_port, srv.address)
            test_vllm_prompt_params(srv.http_port)
            test_return_token_ids(srv.http_port)
            test_cache_salt(srv.http_port)
            test_thinking_token_budget(srv.http_port)
            test_allowed_token_ids_and_bad_words(srv.http_port, srv.address)
            test_request_id_prompt_text_and_truncation_side(srv.http_port)
            test_logprob_token_ids(srv.http_port)
            test_min_tokens_and_penalty_context(srv.http_port)
            test_regex_outputs(srv.http_port, srv.address)
            run_sdk(srv, node_modules, source_dir)
            test_cancel_and_drain(srv)
            if _failed_now():
                print(srv.stderr())
        for name, fn, args in [("413", test_body_too_large, [binary, model]),
                               ("429", test_queue_full, [binary, model]),
                               ("defaults", test_generation_defaults_greedy, [binary, source_dir, d]),
                               ("split metrics", test_split_request_metrics, [binary, model])]:
            try:
                fn(*args)
            except Exception as e:  # noqa: BLE001 - a crash fails the group only
                check(False, f"{name}: {type(e).__name__}: {e}")
    return finish()


def _failed_now():
    import harness
    return harness._failed > 0


if __name__ == "__main__":
    sys.exit(main())
