"""vLLM's extra parameters on the real server: add_special_tokens, truncate_prompt_tokens,
documents, refusals by name; min_tokens (the engine's: EOS and stop tokens banned within it, stop
strings across its end) and the penalties' context (n > 1 forks); regex outputs."""
import json

from harness import check
from openai_http import KEY, completion, curl, post


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
    for extra, field in [({"logits_processors": ["m.P"]}, "logits_processors"),
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


def sse_events(raw):
    """The JSON payloads of an SSE body's data events ([DONE] left out)."""
    return [json.loads(e[6:]) for e in raw.decode().split("\n\n") if e.startswith("data: {")]


def test_return_token_ids(port):
    """vLLM's return_token_ids: a prompt's ids are those /tokenize gives it, a choice's ids are
    the tokens its logprobs name (as many as usage counts, a stop token included), and a stream
    sends the same ids in pieces, the prompt's once."""
    prompt = "the king of Babylon"
    _, _, raw = post(port, "/tokenize", {"prompt": prompt})
    want_prompt = json.loads(raw)["tokens"]
    body = {"prompt": prompt, "max_tokens": 5, "temperature": 0.8, "seed": 7, "logprobs": 0,
            "n": 2, "ignore_eos": True, "return_tokens_as_token_ids": True,
            "return_token_ids": True}
    st, _, raw = post(port, "/v1/completions", body)
    out = json.loads(raw) if st == 200 else {}
    choices = out.get("choices", [])
    ids = [c.get("token_ids") for c in choices]
    check(st == 200 and len(choices) == 2 and
          all(c.get("prompt_token_ids") == want_prompt for c in choices) and
          all(c["token_ids"] == [int(t.split(":")[1]) for t in c["logprobs"]["tokens"]]
              for c in choices) and
          sum(len(i) for i in ids) == out["usage"]["completion_tokens"] == 10,
          f"completions: prompt_token_ids = /tokenize's, token_ids = the logprobs' tokens "
          f"({st} {want_prompt} {raw[:400]!r})")
    _, raw = curl(port, "/v1/completions", {**body, "stream": True})
    events = sse_events(raw)
    streamed = {0: [], 1: []}
    prompts = {0: [], 1: []}
    for e in events:
        for c in e["choices"]:
            streamed[c["index"]] += c.get("token_ids", ["missing"])
            if "prompt_token_ids" in c:
                prompts[c["index"]].append(c["prompt_token_ids"])
    check([streamed[0], streamed[1]] == ids and prompts == {0: [want_prompt], 1: [want_prompt]},
          f"completions stream: each choice's ids in pieces, its prompt's once ({streamed} "
          f"{prompts} vs {ids})")
    # The stop token is among the ids (its text is not): EOS forced first.
    st, _, raw = post(port, "/v1/completions", {"prompt": prompt, "max_tokens": 3,
                                                "logit_bias": {"0": 100}, "return_token_ids": True})
    c = json.loads(raw)["choices"][0] if st == 200 else {}
    check(c.get("token_ids") == [0] and c.get("text") == "" and c.get("finish_reason") == "stop",
          f"a stop token is in token_ids ({st} {raw[:300]!r})")
    # Without the field, neither key.
    _, _, raw = post(port, "/v1/completions", {"prompt": prompt, "max_tokens": 2})
    c = json.loads(raw)["choices"][0]
    check("token_ids" not in c and "prompt_token_ids" not in c, f"no ids unasked ({c})")
    # Chat: the rendered prompt's ids at the top level.
    msgs = [{"role": "user", "content": "hi"}]
    _, _, raw = post(port, "/tokenize", {"messages": msgs, "add_generation_prompt": True,
                                         "chat_template_kwargs": {"enable_thinking": False}})
    want_chat = json.loads(raw)["tokens"]
    chat = {"messages": msgs, "max_tokens": 4, "temperature": 0, "logprobs": True,
            "chat_template_kwargs": {"enable_thinking": False}, "return_tokens_as_token_ids": True,
            "return_token_ids": True}
    st, _, raw = post(port, "/v1/chat/completions", chat)
    out = json.loads(raw) if st == 200 else {}
    c = out.get("choices", [{}])[0]
    lp_ids = [int(t["token"].split(":")[1]) for t in c.get("logprobs", {}).get("content", [])]
    check(st == 200 and out.get("prompt_token_ids") == want_chat and len(lp_ids) == 4 and
          c.get("token_ids") == lp_ids and "prompt_token_ids" not in c,
          f"chat: prompt_token_ids = /tokenize's render, token_ids = the logprobs' tokens "
          f"({want_chat} {raw[:400]!r})")
    _, raw = curl(port, "/v1/chat/completions", {**chat, "stream": True})
    events = sse_events(raw)
    with_prompt = [i for i, e in enumerate(events) if "prompt_token_ids" in e]
    streamed = [t for e in events for ch in e["choices"] for t in ch.get("token_ids", ["missing"])]
    check(with_prompt == [0] and events[0]["prompt_token_ids"] == want_chat and
          streamed == lp_ids,
          f"chat stream: the prompt's ids on the first chunk only, the tokens in pieces "
          f"({with_prompt} {streamed} vs {lp_ids})")


def test_cache_salt(port):
    """vLLM's cache_salt: a resend finds the prefix cache's entries of its own salt only (the
    unsalted ones are another salt's); an empty or long salt is a 400 naming it."""
    prompt = "And the earth was without form, and void; and darkness was upon the deep. " * 4

    def cached(salt, text):
        body = {"prompt": text, "max_tokens": 4, "temperature": 0}
        if salt is not None:
            body["cache_salt"] = salt
        st, _, raw = post(port, "/v1/completions", body)
        out = json.loads(raw) if st == 200 else {}
        check(st == 200, f"cache_salt {salt!r}: 200 ({st} {raw[:200]!r})")
        return (out.get("usage", {}).get("prompt_tokens_details", {}).get("cached_tokens"),
                out.get("choices", [{}])[0].get("text", ""))

    first, reply = cached("tenant-a", prompt)
    resend = prompt + reply + " And"
    got = [cached(salt, resend)[0] for salt in ["tenant-b", None, "tenant-a"]]
    check(first == 0 and got[0] == 0 and got[1] == 0 and got[2] > 0,
          f"cache_salt: only tenant-a's resend resumes ({first} then {got})")
    for salt in ["", "x" * 1025, 7]:
        st, _, raw = post(port, "/v1/completions", {"prompt": "a", "cache_salt": salt})
        err = json.loads(raw).get("error", {}) if st == 400 else {}
        check(st == 400 and "cache_salt" in (err.get("param") or "") + err.get("message", ""),
              f"cache_salt {str(salt)[:10]!r}: 400 naming it ({st} {raw[:160]!r})")
    # The Responses and Messages APIs read it too (a client asking for isolation gets it).
    for path, body in [("/v1/responses", {"input": "hi", "max_output_tokens": 2}),
                       ("/v1/messages", {"model": "tiny", "max_tokens": 2,
                                         "messages": [{"role": "user", "content": "hi"}]})]:
        st, _, raw = post(port, path, {**body, "cache_salt": ""})
        check(st == 400 and b"cache_salt" in raw, f"{path} reads cache_salt ({st} {raw[:160]!r})")


def test_thinking_token_budget(port):
    """vLLM's thinking_token_budget (chat and completions) and Anthropic's thinking.budget_tokens:
    the reasoning block holds that many tokens — the "\n" the template wrote after "<think>"
    among them, as vLLM counts — those of the same request without a budget, then "</think>" is
    forced (whatever bad_words or a stop token say) and the reply goes on."""
    _, _, raw = post(port, "/tokenize", {"prompt": "</think>", "add_special_tokens": False})
    close = json.loads(raw)["tokens"]
    _, _, raw = post(port, "/tokenize", {"prompt": "\n", "add_special_tokens": False})
    k = 3 - len(json.loads(raw)["tokens"])  # the model's own tokens within a budget of 3
    msgs = [{"role": "user", "content": "hi"}]
    base = {"messages": msgs, "max_tokens": 12, "temperature": 0, "return_token_ids": True,
            "ignore_eos": True, "chat_template_kwargs": {"enable_thinking": True}}
    _, _, raw = post(port, "/v1/chat/completions", base)
    free = json.loads(raw)["choices"][0]
    check(free["message"].get("reasoning_content") and not free["message"].get("content"),
          f"without a budget the tiny model's reply is all reasoning ({free})")
    st, _, raw = post(port, "/v1/chat/completions", {**base, "thinking_token_budget": 3})
    cut = json.loads(raw)["choices"][0] if st == 200 else {}
    ids = cut.get("token_ids", [])
    _, _, raw = post(port, "/detokenize", {"tokens": free["token_ids"][:k]})
    first3 = json.loads(raw)["prompt"]
    check(ids[:k] == free["token_ids"][:k] and ids[k:k + len(close)] == close and
          len(ids) == 12 and cut["message"]["reasoning_content"].strip() == first3.strip(),
          f"chat: {k} reasoning tokens, then the close ({st} {ids} vs {free['token_ids']}, "
          f"{cut.get('message')})")
    # The forced close passes the request's own restrictions; a stop token in it ends the reply.
    st, _, raw = post(port, "/v1/chat/completions", {**base, "thinking_token_budget": 3,
                                                     "bad_words": [">"]})
    c = json.loads(raw)["choices"][0] if st == 200 else {}
    check(c.get("token_ids", [])[k:k + len(close)] == close,
          f"the close whatever bad_words say ({st} {raw[:300]!r})")
    st, _, raw = post(port, "/v1/chat/completions", {**base, "thinking_token_budget": 3,
                                                     "stop_token_ids": [close[-1]]})
    c = json.loads(raw)["choices"][0] if st == 200 else {}
    check(c.get("token_ids") == ids[:k + len(close)] and c.get("finish_reason") == "stop",
          f"a stop token in the close ends the reply ({st} {raw[:300]!r})")
    # A budget of 0 closes the block at once; completions read the prompt's own <think>.
    st, _, raw = post(port, "/v1/chat/completions", {**base, "thinking_token_budget": 0})
    zero = json.loads(raw)["choices"][0] if st == 200 else {}
    check(zero.get("token_ids", [])[:len(close)] == close and
          not zero["message"].get("reasoning_content"),
          f"budget 0: the close first ({st} {raw[:300]!r})")
    st, _, raw = post(port, "/v1/completions", {"prompt": "Q: hi\n<think>\n", "max_tokens": 8,
                                                "temperature": 0, "return_token_ids": True,
                                                "thinking_token_budget": 2})
    c = json.loads(raw)["choices"][0] if st == 200 else {}
    k2 = 2 - len(json.loads(post(port, "/tokenize", {"prompt": "\n", "add_special_tokens":
                                                     False})[2])["tokens"])
    check(c.get("token_ids", [])[k2:k2 + len(close)] == close,
          f"completions: the close after {k2} tokens ({st} {raw[:300]!r})")
    # Completions hold a response_format from the first token: no budget for a <think> there.
    st, _, raw = post(port, "/v1/completions", {"prompt": "Q: hi\n<think>\n", "max_tokens": 8,
                                                "response_format": {"type": "json_object"},
                                                "thinking_token_budget": 2})
    check(st == 400 and b"thinking_token_budget: not with response_format" in raw,
          f"completions: a budget with a format and an open <think> is refused ({st} {raw!r})")
    # What truncate_prompt_tokens keeps decides: the render's start opens no block. (Salted: the
    # state saved for those 6 tokens, the start of every chat prompt, is no one else's hit.)
    st, _, raw = post(port, "/v1/chat/completions", {
        **base, "thinking_token_budget": 2, "truncate_prompt_tokens": 6,
        "truncation_side": "right", "return_prompt_text": True, "cache_salt": "truncated"})
    c = json.loads(raw) if st == 200 else {}
    choice = c.get("choices", [{}])[0]
    check(st == 200 and "<think>" not in c.get("prompt_text", "<think>") and
          choice.get("message", {}).get("content") and
          choice["token_ids"][:len(close)] != close,
          f"a truncated render without <think>: no reasoning, no close ({st} {raw[:300]!r})")
    # Anthropic's Messages API: an enabled thinking block's budget_tokens.
    st, _, raw = post(port, "/v1/messages", {
        "model": "tiny", "max_tokens": 12, "temperature": 0, "messages": msgs,
        "thinking": {"type": "enabled", "budget_tokens": 3}})
    blocks = json.loads(raw).get("content", []) if st == 200 else []
    thinking = [b.get("thinking", "") for b in blocks if b.get("type") == "thinking"]
    check(thinking and thinking[0].strip() == first3.strip(),
          f"messages: budget_tokens 3 ({st} {raw[:300]!r} vs {first3!r})")


def test_allowed_token_ids_and_bad_words(port, address):
    """vLLM's allowed_token_ids (only those tokens, EOS too: the reply runs to max_tokens) and
    bad_words (neither spelling of the word ever comes whole: greedy goes elsewhere where it would
    have), over HTTP and gRPC."""
    body = {"prompt": "the king of Babylon", "max_tokens": 8, "temperature": 1.0, "seed": 1,
            "return_token_ids": True}
    allowed = [30, 40, 50, 60]
    st, _, raw = post(port, "/v1/completions", {**body, "allowed_token_ids": allowed})
    c = json.loads(raw)["choices"][0] if st == 200 else {}
    check(len(c.get("token_ids", [])) == 8 and set(c["token_ids"]) <= set(allowed) and
          c["finish_reason"] == "length",
          f"allowed_token_ids: only those, to max_tokens ({st} {raw[:300]!r})")
    greedy = {"prompt": "the king of Babylon", "max_tokens": 8, "temperature": 0,
              "ignore_eos": True, "return_token_ids": True}
    _, _, raw = post(port, "/v1/completions", greedy)
    free = json.loads(raw)["choices"][0]
    word = free["text"].split()[0]
    spellings = []
    for text in [word, " " + word]:
        _, _, raw = post(port, "/tokenize", {"prompt": text, "add_special_tokens": False})
        spellings.append(json.loads(raw)["tokens"])
    st, _, raw = post(port, "/v1/completions", {**greedy, "bad_words": [word]})
    cut = json.loads(raw)["choices"][0] if st == 200 else {}
    ids = cut.get("token_ids", [])

    def holds(seq):
        return any(ids[i:i + len(seq)] == seq for i in range(len(ids)))

    check(st == 200 and ids and ids != free["token_ids"] and not any(holds(s) for s in spellings),
          f"bad_words {word!r}: never spelled {spellings} ({free['token_ids']} -> {ids})")
    import grpc
    from linfer.v1 import generation_pb2 as g, generation_pb2_grpc
    stub = generation_pb2_grpc.GenerationStub(grpc.insecure_channel(address))
    md = [("authorization", f"Bearer {KEY}")]
    req = g.GenerateRequest(text="the king of Babylon",
                            sampling=g.SamplingParams(temperature=1.0, seed=2,
                                                      allowed_token_ids=allowed))
    req.stop.max_tokens = 6
    got = [t for m in stub.Generate(req, metadata=md, timeout=60) for t in m.token_ids]
    check(len(got) == 6 and set(got) <= set(allowed), f"gRPC allowed_token_ids ({got})")
    req = g.GenerateRequest(text="the king of Babylon",
                            sampling=g.SamplingParams(temperature=0, bad_words=[word]))
    req.stop.max_tokens = 8
    req.stop.ignore_eos = True
    got = [t for m in stub.Generate(req, metadata=md, timeout=60) for t in m.token_ids]
    check(got == ids, f"gRPC bad_words: as over HTTP ({got} vs {ids})")
    try:
        list(stub.Generate(g.GenerateRequest(text="x", sampling=g.SamplingParams(
            allowed_token_ids=[10 ** 9])), metadata=md, timeout=60))
        check(False, "gRPC: an allowed id outside the vocabulary is refused")
    except grpc.RpcError as e:
        check(e.code() == grpc.StatusCode.INVALID_ARGUMENT and
              "allowed_token_ids[0]" in (e.details() or ""),
              f"gRPC: INVALID_ARGUMENT naming allowed_token_ids ({e.details()})")


def test_request_id_prompt_text_and_truncation_side(port):
    """vLLM's request_id (the X-Request-Id header wins) names the response; return_prompt_text
    gives chat's rendered prompt (a stream's first chunk only); truncation_side "right" keeps a
    cut prompt's first tokens."""
    st, _, raw = post(port, "/v1/completions", {"prompt": "a", "max_tokens": 1,
                                                "request_id": "trace-7"})
    check(st == 200 and json.loads(raw)["id"] == "cmpl-trace-7",
          f"request_id names the response ({st} {raw[:120]!r})")
    msgs = [{"role": "user", "content": "hi there"}]
    chat = {"messages": msgs, "max_tokens": 2, "request_id": "body-id", "return_prompt_text": True,
            "chat_template_kwargs": {"enable_thinking": False}}
    head, raw = curl(port, "/v1/chat/completions", {**chat, "stream": True},
                     extra=["-H", "X-Request-Id: hdr-1"])
    events = sse_events(raw)
    check(events and all(e["id"] == "chatcmpl-hdr-1" for e in events),
          f"the X-Request-Id header wins ({[e.get('id') for e in events]})")
    texts = [e.get("prompt_text") for e in events]
    _, _, raw = post(port, "/v1/chat/completions", chat)
    out = json.loads(raw)
    text = out.get("prompt_text") or ""
    check(out.get("id") == "chatcmpl-body-id" and "hi there" in text and
          text.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n") and
          texts[0] == text and not any(texts[1:]),
          f"return_prompt_text: the render, a stream's first chunk only ({text!r} {texts})")
    _, _, raw = post(port, "/tokenize", {"prompt": "the king of Babylon"})
    ids = json.loads(raw)["tokens"]
    for side, want in [("right", ids[:2]), ("left", ids[-2:]), (None, ids[-2:])]:
        body = {"prompt": "the king of Babylon", "max_tokens": 1, "truncate_prompt_tokens": 2,
                "return_token_ids": True}
        if side:
            body["truncation_side"] = side
        st, _, raw = post(port, "/v1/completions", body)
        got = json.loads(raw)["choices"][0].get("prompt_token_ids") if st == 200 else None
        check(got == want, f"truncation_side {side}: {got} vs {want}")
    for field, value in [("truncation_side", "middle"), ("request_id", ""),
                         ("request_id", "a\nb"), ("return_prompt_text", 1)]:
        st, _, raw = post(port, "/v1/chat/completions", {**chat, field: value})
        err = json.loads(raw).get("error", {}) if st == 400 else {}
        check(st == 400 and field in (err.get("param") or "") + err.get("message", ""),
              f"{field}={value!r}: 400 naming it ({st} {raw[:160]!r})")


def test_logprob_token_ids(port):
    """vLLM's logprob_token_ids: each token's top logprobs are those ids', in the order given,
    with the logprobs a plain request's top_logprobs give them; they need logprobs."""
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "temperature": 0,
            "logprobs": True, "top_logprobs": 5, "return_tokens_as_token_ids": True,
            "chat_template_kwargs": {"enable_thinking": False}}
    _, _, raw = post(port, "/v1/chat/completions", chat)
    plain = json.loads(raw)["choices"][0]["logprobs"]["content"]
    top = [(int(t["token"].split(":")[1]), t["logprob"]) for t in plain[0]["top_logprobs"]]
    labels = [top[2][0], top[0][0], top[4][0]]
    st, _, raw = post(port, "/v1/chat/completions", {**chat, "top_logprobs": 0,
                                                     "logprob_token_ids": labels})
    content = json.loads(raw)["choices"][0]["logprobs"]["content"] if st == 200 else []
    got = [[int(t["token"].split(":")[1]) for t in c["top_logprobs"]] for c in content]
    first = {int(t["token"].split(":")[1]): t["logprob"] for t in content[0]["top_logprobs"]} \
        if content else {}
    check(len(content) == 3 and all(g == labels for g in got) and
          [c["token"] for c in content] == [c["token"] for c in plain] and
          all(abs(first[i] - dict(top)[i]) < 1e-5 for i in labels),
          f"chat logprob_token_ids {labels}: those, in order ({st} {got} {first} vs {top})")
    st, _, raw = post(port, "/v1/completions", {"prompt": "a b", "max_tokens": 2, "logprobs": 0,
                                                "logprob_token_ids": [7, 8],
                                                "return_tokens_as_token_ids": True})
    tops = json.loads(raw)["choices"][0]["logprobs"]["top_logprobs"] if st == 200 else []
    check(len(tops) == 2 and all({"token_id:7", "token_id:8"} <= set(t) for t in tops),
          f"completions logprob_token_ids ({st} {raw[:300]!r})")
    st, _, raw = post(port, "/v1/chat/completions", {"messages": chat["messages"],
                                                     "logprob_token_ids": [1]})
    check(st == 400 and b"logprob_token_ids: needs" in raw, f"without logprobs: 400 ({st} {raw!r})")
