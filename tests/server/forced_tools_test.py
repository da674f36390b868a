#!/usr/bin/python3
"""Forced tool calls on the real `linfer serve` (the bundled model), once with the Qwen3.5 chat
template (XML calls with raw-text values) and once with a Hermes ChatML template (JSON calls):

- Chat Completions with tool_choice "required" and a named function, greedy and sampled: the
  reply is calls and nothing else (finish_reason "tool_calls"), of the allowed functions, one
  when parallel_tool_calls is false or a function is named, whose arguments Debian's
  python3-jsonschema validates against the tool's schema — the bundled model knows nothing of
  tools, so every valid call here is the grammar's doing;
- streamed calls reassemble into the non-streamed ones;
- the Responses API (function_call items) and Anthropic's Messages API (tool_use blocks, "any"
  and "tool") force calls the same way;
- errors are 400s naming the field: an unknown function, no tools, a forced call together with
  response_format, a schema keyword structured output cannot enforce.

usage: forced_tools_test.py LINFER_BINARY SOURCE_DIR
"""
import http.client
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testing"))
from harness import Server, check, finish  # noqa: E402

WEATHER = {"type": "object",
           "properties": {"location": {"type": "string", "maxLength": 16},
                          "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                          "days": {"type": "integer"}},
           "required": ["location"]}
ALARM = {"type": "object",
         "properties": {"hour": {"type": "integer"},
                        "label": {"type": "string", "maxLength": 8},
                        "repeat": {"type": "boolean"},
                        "days": {"type": "array", "items": {"type": "string", "enum": ["mon", "tue"]},
                                 "maxItems": 2}},
         "required": ["hour", "repeat"]}
SCHEMAS = {"get_weather": WEATHER, "set_alarm": ALARM}
TOOLS = [{"type": "function", "function": {"name": n, "description": f"{n} tool", "parameters": s}}
         for n, s in SCHEMAS.items()]
MESSAGES = [{"role": "user", "content": "What is the weather in Paris? Then wake me at seven."}]


def post(port, path, body, headers=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        c.request("POST", path, body=json.dumps(body),
                  headers={"Content-Type": "application/json", **(headers or {})})
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def valid(name, arguments, jsonschema):
    """Whether `arguments` (an object or its JSON text) satisfies function `name`'s schema."""
    try:
        args = json.loads(arguments) if isinstance(arguments, str) else arguments
        jsonschema.validate(args, SCHEMAS[name])
        return True
    except (KeyError, ValueError, jsonschema.ValidationError) as e:
        print(f"  invalid call {name}({arguments!r}): {e}")
        return False


def chat(port, **fields):
    body = {"model": "tiny", "messages": MESSAGES, "tools": TOOLS, "max_tokens": 400,
            "temperature": 0, **fields}
    status, raw = post(port, "/v1/chat/completions", body)
    return status, json.loads(raw)


def test_chat(port, syntax, jsonschema):
    cases = [({"tool_choice": "required", "parallel_tool_calls": False}, None),
             ({"tool_choice": "required", "parallel_tool_calls": False, "temperature": 1.0,
               "seed": 3}, None),
             ({"tool_choice": "required", "parallel_tool_calls": False, "temperature": 1.2,
               "seed": 8}, None),
             ({"tool_choice": {"type": "function", "function": {"name": "set_alarm"}}},
              "set_alarm"),
             ({"tool_choice": {"type": "function", "function": {"name": "get_weather"}},
               "temperature": 1.0, "seed": 5}, "get_weather")]
    for fields, named in cases:
        what = f"{syntax} chat {json.dumps(fields)}"
        status, r = chat(port, **fields)
        if not check(status == 200, f"{what}: 200 ({status} {r})"):
            continue
        c = r["choices"][0]
        calls = c["message"].get("tool_calls") or []
        check(c["finish_reason"] == "tool_calls", f"{what}: finish_reason tool_calls ({c})")
        check(not c["message"].get("content"), f"{what}: no content ({c['message']})")
        check(len(calls) == 1, f"{what}: one call ({calls})")
        for call in calls:
            fn = call["function"]
            check(fn["name"] in SCHEMAS and (named is None or fn["name"] == named),
                  f"{what}: an allowed function ({fn['name']})")
            check(valid(fn["name"], fn["arguments"], jsonschema), f"{what}: arguments validate")
    # Parallel calls: every call of a reply that ended by itself is whole and valid.
    for seed in range(3):
        status, r = chat(port, tool_choice="required", temperature=1.0, seed=seed, max_tokens=600)
        c = r["choices"][0] if status == 200 else {}
        if c.get("finish_reason") != "tool_calls":
            check(status == 200 and c.get("finish_reason") == "length",
                  f"{syntax} parallel seed {seed}: calls or cut by max_tokens ({status} {c})")
            continue
        calls = c["message"]["tool_calls"]
        check(len(calls) >= 1 and all(valid(x["function"]["name"], x["function"]["arguments"],
                                             jsonschema) for x in calls),
              f"{syntax} parallel seed {seed}: every call valid ({calls})")
    # Streamed = whole.
    _, whole = chat(port, tool_choice="required", parallel_tool_calls=False)
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    c.request("POST", "/v1/chat/completions",
              body=json.dumps({"model": "tiny", "messages": MESSAGES, "tools": TOOLS,
                               "max_tokens": 400, "temperature": 0, "stream": True,
                               "tool_choice": "required", "parallel_tool_calls": False}),
              headers={"Content-Type": "application/json"})
    raw = c.getresponse().read().decode()
    c.close()
    streamed, finish_reason = {}, None
    for line in raw.splitlines():
        if not line.startswith("data: {"):
            continue
        for ch in json.loads(line[6:])["choices"]:
            finish_reason = ch.get("finish_reason") or finish_reason
            for d in ch["delta"].get("tool_calls") or []:
                s = streamed.setdefault(d["index"], {"name": "", "arguments": ""})
                s["name"] += d.get("function", {}).get("name") or ""
                s["arguments"] += d.get("function", {}).get("arguments") or ""
    want = [{"name": x["function"]["name"], "arguments": json.loads(x["function"]["arguments"])}
            for x in whole["choices"][0]["message"]["tool_calls"]]
    got = [{"name": s["name"], "arguments": json.loads(s["arguments"])}
           for _, s in sorted(streamed.items())]
    check(got == want and finish_reason == "tool_calls",
          f"{syntax}: streamed calls = whole ({got} vs {want}, {finish_reason})")


def test_responses_and_messages(port, syntax, jsonschema):
    rtools = [{"type": "function", "name": n, "parameters": s} for n, s in SCHEMAS.items()]
    for choice, named in [("required", None), ({"type": "function", "name": "get_weather"},
                                                "get_weather")]:
        status, raw = post(port, "/v1/responses",
                           {"model": "tiny", "input": MESSAGES[0]["content"], "tools": rtools,
                            "tool_choice": choice, "parallel_tool_calls": False,
                            "max_output_tokens": 400, "temperature": 0, "store": False})
        r = json.loads(raw)
        calls = [o for o in r.get("output", []) if o["type"] == "function_call"]
        check(status == 200 and r.get("status") == "completed" and len(calls) == 1 and
              all(o["type"] != "message" for o in r["output"]),
              f"{syntax} responses {choice}: one function_call item ({status} {raw[:300]!r})")
        for o in calls:
            check((named is None or o["name"] == named) and
                  valid(o["name"], o["arguments"], jsonschema),
                  f"{syntax} responses {choice}: a valid call ({o})")
        check(r.get("tool_choice") == choice, f"{syntax} responses: tool_choice echoed ({r.get('tool_choice')})")
    atools = [{"name": n, "input_schema": s} for n, s in SCHEMAS.items()]
    for choice, named in [({"type": "any", "disable_parallel_tool_use": True}, None),
                          ({"type": "tool", "name": "set_alarm"}, "set_alarm")]:
        status, raw = post(port, "/v1/messages",
                           {"model": "tiny", "max_tokens": 400, "temperature": 0,
                            "messages": MESSAGES, "tools": atools, "tool_choice": choice})
        m = json.loads(raw)
        uses = [b for b in m.get("content", []) if b["type"] == "tool_use"]
        check(status == 200 and m.get("stop_reason") == "tool_use" and len(uses) == 1,
              f"{syntax} messages {choice}: one tool_use ({status} {raw[:300]!r})")
        for b in uses:
            check((named is None or b["name"] == named) and valid(b["name"], b["input"], jsonschema),
                  f"{syntax} messages {choice}: a valid call ({b})")


def test_errors(port):
    def error(**fields):
        status, r = chat(port, **fields)
        return status, (r.get("error") or {}).get("param"), (r.get("error") or {}).get("message", "")

    got = error(tool_choice={"type": "function", "function": {"name": "nope"}})
    check(got[0] == 400 and got[1] == "tool_choice.function.name" and "no tool named" in got[2],
          f"an unknown function: 400 naming it ({got})")
    got = error(tool_choice="required", tools=None)
    check(got[0] == 400 and got[1] == "tool_choice", f"required without tools: 400 ({got})")
    got = error(tool_choice="required", response_format={"type": "json_object"})
    check(got[0] == 400 and got[1] == "tool_choice", f"with response_format: 400 ({got})")
    bad = [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"x": {"type": "integer", "multipleOf": 2}}}}}]
    got = error(tool_choice="required", tools=bad)
    check(got[0] == 400 and got[1] == "tools[0].function.parameters.properties.x.multipleOf",
          f"an unenforceable keyword: 400 naming it ({got})")
    status, r = chat(port, tool_choice="auto", tools=bad, max_tokens=4)
    check(status == 200, f"the same tools with tool_choice auto still serve ({status})")


def main():
    binary, source_dir = sys.argv[1], sys.argv[2]
    try:
        import jsonschema  # noqa: PLC0415 - Debian's python3-jsonschema (deploy/setup.sh)
    except ImportError:
        check(False, "python3-jsonschema is not installed (deploy/setup.sh installs it)")
        return finish()
    model = os.path.join(source_dir, "models", "tiny")
    templates = os.path.join(source_dir, "tests", "data", "chat_templates")
    for syntax, template in [("xml", "qwen3.5.jinja"), ("hermes", "hermes-chatml.jinja")]:
        with Server(binary, model, "--chat_template", os.path.join(templates, template),
                    "--log_stats_interval_s", "0") as srv:
            failed_before = _failed()
            test_chat(srv.http_port, syntax, jsonschema)
            test_responses_and_messages(srv.http_port, syntax, jsonschema)
            if syntax == "xml":
                test_errors(srv.http_port)
            if _failed() > failed_before:
                print(srv.stderr())
    return finish()


def _failed():
    import harness
    return harness._failed


if __name__ == "__main__":
    sys.exit(main())
