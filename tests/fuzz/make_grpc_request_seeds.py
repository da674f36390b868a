#!/usr/bin/python3
"""Writes the grpc_request fuzz seeds (serialized linfer.v1.GenerateRequest messages) into OUT:
token-id and text prompts, sessions (existing, unknown, malformed), every sampling and stop field,
and values the conversion must refuse. Needs protoc (stubs are generated into a temp directory).

usage: make_grpc_request_seeds.py OUT
"""
import math
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "testing"))
from harness import make_stubs  # noqa: E402


def seeds(g):
    req = g.GenerateRequest
    out = {}
    r = req(token_ids=g.TokenIds(ids=[1, 2, 3]))
    r.sampling.temperature = 0.0
    r.stop.max_tokens = 8
    out["ids_greedy"] = r
    r = req(token_ids=g.TokenIds(ids=[5, 6]), priority=-3, model="tiny")
    s = r.sampling
    s.temperature, s.top_k, s.top_p, s.min_p = 0.8, 40, 0.9, 0.05
    s.repetition_penalty, s.presence_penalty, s.frequency_penalty = 1.1, 0.5, -0.5
    s.logit_bias[3] = 2.5
    s.logit_bias[200] = -1.0
    s.seed, s.logprobs = 1234, 5
    r.stop.stop.extend(["ab", "\n"])
    r.stop.stop_token_ids.extend([4, 9])
    r.stop.max_tokens = 32
    r.stop.include_stop_str_in_output = True
    out["ids_all_fields"] = r
    r = req(text="Hello, world!")
    out["text"] = r
    r = req(text="continue", session_id="s1", add_special_tokens=True)
    r.stop.ignore_eos = True
    out["text_session"] = r
    out["session_only"] = req(session_id="s1")
    out["session_unknown"] = req(session_id="nope", text="x")
    out["session_malformed"] = req(session_id="bad id!/..", text="x")
    out["session_long"] = req(session_id="s" * 200, token_ids=g.TokenIds(ids=[1]))
    out["other_model"] = req(model="another-model", text="hi")
    out["ids_out_of_range"] = req(token_ids=g.TokenIds(ids=[1, 128, -1, 2147483647]))
    out["no_prompt"] = req()
    out["empty_ids"] = req(token_ids=g.TokenIds(ids=[]))
    r = req(text="nan")
    r.sampling.temperature = math.nan
    r.sampling.top_p = math.inf
    r.sampling.top_k = -5
    r.stop.max_tokens = -1
    out["bad_values"] = r
    r = req(text="big")
    r.stop.max_tokens = 2147483647
    r.sampling.logprobs = 1000
    out["huge_values"] = r
    return out


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        make_stubs(os.path.join(HERE, "..", ".."), tmp)
        from linfer.v1 import generation_pb2 as g
        for name, msg in sorted(seeds(g).items()):
            with open(os.path.join(out_dir, name), "wb") as f:
                f.write(msg.SerializeToString())


if __name__ == "__main__":
    main()
