"""vLLM's extra parameters on the real server: add_special_tokens, truncate_prompt_tokens,
documents, refusals by name; min_tokens (the engine's: EOS and stop tokens banned within it, stop
strings across its end) and the penalties' context (n > 1 forks); regex outputs."""
import json

from harness import check
from openai_http import KEY, completion, post


def test_vllm_prompt_params(port):
    """vLLM's add_special_tokens and truncate_prompt_tokens change the prompt the model sees;
    documents reach the template; parameters this server lacks are refused, not ignored."""
    _, _, usage = completion(port, max_tokens=2)
    _, _, plain = completion(port, max_tokens=2, add_special_tokens=False)
    check(plain.get("prompt_tokens") == usage.get("prompt_tokens", 0) - 1,
          f"add_special_tokens false: no BOS ({usage} vs {plain})")
    _, _, cut = completion(port, max_tokens=2, truncate_prompt_tokens=2)
    check(cut.get("prompt_tokens") == 2, f"truncate_prompt_tokens 2: {cut}")
    # min_tokens keeps EOS and stop tokens from being sampled at all before it (vLLM's logits
    # processor), not only from ending the output: EOS forced by a bias comes 4th.
    for extra in [{"logit_bias": {"0": 100}}, {"logit_bias": {"271": 100}, "stop_token_ids": [271]}]:
        st, _, raw = post(port, "/v1/completions",
                          {"prompt": "the king of Babylon", "min_tokens": 3, "max_tokens": 6,
                           "logprobs": 0, "temperature": 0, **extra})
        out = json.loads(raw) if st == 200 else {}
        ids = [t for t in out.get("choices", [{}])[0].get("logprobs", {}).get("tokens", [])]
        check(st == 200 and len(ids) == 4 and "<|endoftext|>" not in ids[:3] and
              out["choices"][0]["finish_reason"] == "stop",
              f"min_tokens 3 with {extra}: 3 other tokens, then the stop ({st} {ids})")
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    st, _, raw = post(port, "/v1/chat/completions",
                      {**chat, "documents": [{"title": "t", "text": "x"}]})
    check(st == 200, f"documents: 200 ({st} {raw[:160]!r})")
    for extra, field in [({"allowed_token_ids": [5]}, "allowed_token_ids"),
                         ({"use_beam_search": True}, "use_beam_search"),
                         ({"skip_special_tokens": False}, "skip_special_tokens"),
                         ({"chat_template": "{{ 'X' }}"}, "chat_template"),
                         ({"echo": True}, "echo")]:
        st, _, raw = post(port, "/v1/chat/completions", {**chat, **extra})
        err = json.loads(raw).get("error", {}) if st == 400 else {}
        check(st == 400 and err.get("param") == field, f"{extra}: 400 naming {field} ({st} {raw!r})")
    # return_tokens_as_token_ids: the logprobs' token strings are "token_id:N" (vLLM's): the same
    # tokens as without it (each id detokenizes to the token's text there).
    body = {"prompt": "the king of Babylon", "max_tokens": 4, "temperature": 0, "logprobs": 2,
            "ignore_eos": True}
    _, _, raw = post(port, "/v1/completions", body)
    text_lp = json.loads(raw)["choices"][0]["logprobs"]
    _, _, raw = post(port, "/v1/completions", {**body, "return_tokens_as_token_ids": True})
    ids_lp = json.loads(raw)["choices"][0]["logprobs"]
    texts = []
    for t in ids_lp["tokens"]:
        _, _, raw = post(port, "/detokenize", {"tokens": [int(t.split(":")[1])]})
        texts.append(json.loads(raw).get("prompt"))
    def close(a, b):
        return len(a) == len(b) and all((x is None and y is None) or
                                        (x is not None and y is not None and abs(x - y) < 1e-5)
                                        for x, y in zip(a, b))
    check(all(t.startswith("token_id:") for t in ids_lp["tokens"]) and
          texts == text_lp["tokens"] and close(ids_lp["token_logprobs"], text_lp["token_logprobs"])
          and all(t and all(k.startswith("token_id:") for k in t) for t in ids_lp["top_logprobs"]),
          f"return_tokens_as_token_ids on completions ({ids_lp} vs {text_lp})")
    # With the prompt echoed, its tokens as ids too, and the offsets still index the text; vLLM's
    # prompt_logprobs keep their decoded text.
    echo = {**body, "echo": True}
    _, _, raw = post(port, "/v1/completions", echo)
    text_lp = json.loads(raw)["choices"][0]["logprobs"]
    _, _, raw = post(port, "/v1/completions", {**echo, "return_tokens_as_token_ids": True})
    ids_lp = json.loads(raw)["choices"][0]["logprobs"]
    check(len(ids_lp["tokens"]) == len(text_lp["tokens"]) > 4 and
          all(t.startswith("token_id:") for t in ids_lp["tokens"]) and
          ids_lp["text_offset"] == text_lp["text_offset"] and
          close(ids_lp["token_logprobs"], text_lp["token_logprobs"]),
          f"return_tokens_as_token_ids with echo ({ids_lp} vs {text_lp})")
    plp = {"prompt": "the king of Babylon", "max_tokens": 1, "prompt_logprobs": 1}
    _, _, raw = post(port, "/v1/completions", plp)
    plain = json.loads(raw)["choices"][0]["prompt_logprobs"]
    _, _, raw = post(port, "/v1/completions", {**plp, "return_tokens_as_token_ids": True})
    as_ids = json.loads(raw)["choices"][0]["prompt_logprobs"]
    decoded = [sorted(v["decoded_token"] for v in e.values()) if e else None for e in as_ids]
    check(decoded == [sorted(v["decoded_token"] for v in e.values()) if e else None
                      for e in plain] and any(decoded),
          f"prompt_logprobs keep their text ({as_ids} vs {plain})")
    _, _, raw = post(port, "/v1/chat/completions",
                     {**chat, "logprobs": True, "top_logprobs": 1, "temperature": 0,
                      "return_tokens_as_token_ids": True})
    content = json.loads(raw)["choices"][0]["logprobs"]["content"]
    check(content and all(c["token"].startswith("token_id:") and
                          c["bytes"] == list(c["token"].encode()) and
                          c["top_logprobs"][0]["token"].startswith("token_id:") for c in content),
          f"return_tokens_as_token_ids on chat ({content})")


def test_min_tokens_and_penalty_context(port):
    """Penalties see the whole context whatever the request's shape: min_tokens does not change
    a greedy output that has no stop in it, nor does n (each fork feeds only the prompt's last
    token), though repetition_penalty counts the prompt and frequency/presence the output. A stop
    string that begins inside min_tokens and ends after it ends the output (vLLM)."""
    base = {"prompt": "the king of Babylon and the king of", "max_tokens": 14, "temperature": 0,
            "repetition_penalty": 1.6, "frequency_penalty": 0.7, "presence_penalty": 0.4,
            "ignore_eos": True, "logprobs": 0}

    def run(**fields):
        st, _, raw = post(port, "/v1/completions", {**base, **fields})
        out = json.loads(raw) if st == 200 else {}
        check(st == 200, f"{fields}: 200 ({st} {raw[:200]!r})")
        return out.get("choices", [])

    plain = run()
    text = plain[0]["text"] if plain else None
    tokens = plain[0]["logprobs"]["tokens"] if plain else []
    for k in [1, 5, 13]:
        got = run(min_tokens=k)
        check(got and got[0]["text"] == text,
              f"min_tokens {k} leaves a stop-free greedy output as it was: {got and got[0]['text']!r} "
              f"vs {text!r}")
    both = run(n=2)
    check(len(both) == 2 and all(c["text"] == text for c in both),
          f"n 2: each fork sees the whole prompt: {[c['text'] for c in both]!r} vs {text!r}")
    # Structured output within min_tokens: a complete document that cannot go on ends there, with
    # what the stop checker held back (the start of "ue!" after "tr").
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 12, "temperature": 0,
            "stop": ["ue!"], "response_format": {"type": "json_schema", "json_schema": {
                "name": "s", "schema": {"type": "boolean"}}}}
    texts = []
    for extra in [{}, {"min_tokens": 8}]:
        st, _, raw = post(port, "/v1/chat/completions", {**chat, **extra})
        c = json.loads(raw)["choices"][0] if st == 200 else {}
        texts.append((c.get("message", {}).get("content"), c.get("finish_reason")))
    check(texts[0] == texts[1] and texts[0][0] in ("true", "false"),
          f"structured output with min_tokens past its end keeps its text: {texts}")
    # vLLM's rules: min_tokens above a default max_tokens is refused; prompt logprobs take it.
    st, _, raw = post(port, "/v1/completions", {"prompt": "a", "min_tokens": 1000})
    check(st == 400 and b"min_tokens (1000) must be at most max_tokens (200, its default" in raw,
          f"min_tokens above the default max_tokens: 400 ({st} {raw[:200]!r})")
    st, _, raw = post(port, "/v1/completions", {"prompt": "a b c", "min_tokens": 2,
                                                "max_tokens": 3, "prompt_logprobs": 1})
    check(st == 200, f"prompt_logprobs with min_tokens: 200 ({st} {raw[:200]!r})")
    # A two-character stop across the boundary between token k and k + 1.
    plain_ascii = [t for t in tokens if t.isascii()] == tokens and len(tokens) == 14
    spans = [k for k in range(2, 12) if plain_ascii and tokens[k - 1] and tokens[k]]
    check(bool(spans), f"a boundary to put a stop string across ({tokens!r})")
    for k in spans[:3]:
        at = len("".join(tokens[:k]))
        stop = text[at - 1:at + 1]
        got = run(min_tokens=k, stop=[stop])
        check(got and got[0]["text"] == text[:at - 1] and got[0]["finish_reason"] == "stop",
              f"stop {stop!r} from inside min_tokens {k} to after it cuts at {at - 1}: "
              f"{got and (got[0]['text'], got[0]['finish_reason'])!r} (whole: {text!r})")
        # Inside min_tokens alone it ends nothing.
        inside = text[at - 2:at] if at >= 2 else None
        if inside and text.find(inside, at - 1) < 0:
            got = run(min_tokens=k, stop=[inside])
            check(got and got[0]["text"] == text and got[0]["finish_reason"] == "length",
                  f"stop {inside!r} only inside min_tokens {k}: no stop "
                  f"({got and got[0]['finish_reason']})")


def test_regex_outputs(port, address):
    """vLLM's structured_outputs.regex / guided_regex and gRPC's regex: every finished output
    matches the pattern whole (Python's re.fullmatch, an independent matcher), greedy and
    sampled, streamed and not; patterns it cannot compile are 400s naming the field."""
    import re
    pattern = r"(yes|no), because [a-z ]{3,20}\.( Score: \d{1,2}/10)?"
    outputs = []
    for i, extra in enumerate([{"structured_outputs": {"regex": pattern}, "temperature": 0},
                               {"structured_outputs": {"regex": pattern}, "temperature": 1.0},
                               {"guided_regex": pattern, "temperature": 1.2, "n": 2},
                               {"guided_regex": pattern, "temperature": 0.8, "stream": True}]):
        body = {"prompt": "Is it so?", "max_tokens": 80, "seed": i, **extra}
        st, _, raw = post(port, "/v1/completions", body)
        check(st == 200, f"regex output {i}: 200 ({st} {raw[:200]!r})")
        if st != 200:
            continue
        if extra.get("stream"):
            text, finish = "", None
            for line in raw.decode().splitlines():
                if line.startswith("data: {"):
                    c = json.loads(line[6:])["choices"][0]
                    text += c.get("text") or ""
                    finish = c.get("finish_reason") or finish
            outputs.append((finish, text))
        else:
            outputs += [(c["finish_reason"], c["text"]) for c in json.loads(raw)["choices"]]
    for finish, text in outputs:
        check(finish == "stop" and re.fullmatch(pattern, text) is not None,
              f"a regex output ends by itself and matches whole ({finish} {text!r})")
    import grpc
    from linfer.v1 import generation_pb2 as g, generation_pb2_grpc
    stub = generation_pb2_grpc.GenerationStub(grpc.insecure_channel(address))
    md = [("authorization", f"Bearer {KEY}")]
    req = g.GenerateRequest(text="Is it so?", regex=pattern,
                            sampling=g.SamplingParams(temperature=1.0, seed=5))
    req.stop.max_tokens = 80
    msgs = list(stub.Generate(req, metadata=md, timeout=60))
    text = "".join(m.text for m in msgs)
    check(msgs and msgs[-1].finish_reason == "stop" and re.fullmatch(pattern, text) is not None,
          f"gRPC regex: the streamed text matches whole ({text!r})")
    try:
        list(stub.Generate(g.GenerateRequest(text="x", regex="a(?=b)"), metadata=md, timeout=60))
        check(False, "gRPC: a lookaround is refused")
    except grpc.RpcError as e:
        check(e.code() == grpc.StatusCode.INVALID_ARGUMENT and
              "regex: a lookaround at offset 2" in (e.details() or ""),
              f"gRPC: INVALID_ARGUMENT naming the regex ({e.details()})")
    for field, body in [("guided_regex", {"guided_regex": "(a"}),
                        ("structured_outputs.regex", {"structured_outputs": {"regex": r"\1"}}),
                        ("guided_grammar", {"guided_grammar": "root ::= 'a'"})]:
        st, _, raw = post(port, "/v1/completions", {"prompt": "x", **body})
        err = json.loads(raw).get("error", {}) if st == 400 else {}
        check(st == 400 and err.get("param") == field, f"{body}: 400 naming {field} ({st} {raw!r})")
