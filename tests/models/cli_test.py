#!/usr/bin/env python3
"""Black-box tests of the `linfer` binary on reference fixtures: `logits` prints the reference
logits (both recurrence forms), `generate` (greedy) produces the same ids as greedy decoding with
the independent float64 reference, and bad arguments exit non-zero with a message naming them.
Usage: cli_test.py LINFER_BINARY FIXTURES_DIR"""
import json
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "reference"))
sys.path.insert(0, os.path.join(HERE, "..", "testing"))
import fla_reference  # noqa: E402
from harness import check, finish  # noqa: E402


def run(binary, *args):
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=120)


def main():
    binary, fixtures = sys.argv[1], sys.argv[2]
    for case in ["gdn_default", "deltanet_default", "gla_default", "retnet_default",
                 "linear_attn_hadamard"]:
        d = os.path.join(fixtures, case)
        exp = json.load(open(os.path.join(d, "expected.json")))
        ref = np.fromfile(os.path.join(d, exp["logits_file"]), dtype="<f8")
        ref = ref.reshape(len(exp["tokens"]), exp["vocab_size"])
        ids = ",".join(map(str, exp["tokens"]))
        for mode in ["chunked", "recurrent"]:
            r = run(binary, "logits", "--model", d, "--tokens", ids, "--mode", mode,
                    "--chunk_size", "16")
            check(r.returncode == 0, f"{case} logits {mode}: {r.stderr}")
            if r.returncode != 0:
                continue
            out = json.loads(r.stdout)
            got = np.array(out["logits"], dtype=np.float64)
            check(out["tokens"] == exp["tokens"], f"{case}: tokens echoed")
            err = np.abs(got - ref).max() / max(1.0, np.abs(ref).max())
            check(err < 1e-4, f"{case} {mode}: rel err {err:.2e}")
        # Greedy generation: the reference decodes token by token from its own state.
        model = fla_reference.load_model(d)
        prompt = exp["tokens"][:10]
        logits, state = model.forward(prompt)
        want = []
        for _ in range(12):
            nxt = int(np.argmax(logits[-1]))
            want.append(nxt)
            logits, state = model.forward([nxt], state)
        r = run(binary, "generate", "--model", d, "--tokens", ",".join(map(str, prompt)),
                "--max_tokens", "12")
        check(r.returncode == 0, f"{case} generate: {r.stderr}")
        if r.returncode == 0:
            got = json.loads(r.stdout)["tokens"]
            check(got == want, f"{case} greedy generate: {got} != reference {want}")
    d = os.path.join(fixtures, "gdn_default")
    for args, needle in [
        (["logits", "--model", d, "--tokens", "1,x"], "'x' is not an integer"),
        (["logits", "--model", d, "--tokens", "1,100000"], "outside the vocabulary"),
        (["logits", "--model", d, "--tokens", "1", "--mode", "fast"], "--mode"),
        (["logits", "--model", d, "--tokens", "1", "--chunk_size", "0"], "chunk size"),
        (["logits", "--model", "/nonexistent", "--tokens", "1"], "config.json"),
        (["generate", "--model", d, "--tokens", "1", "--temperature", "-1"], "temperature"),
        (["frobnicate"], "unknown command"),
    ]:
        r = run(binary, *args)
        check(r.returncode != 0 and needle in r.stderr,
              f"{' '.join(args)}: exit {r.returncode}, stderr {r.stderr!r}")
    r = run(binary, "info", "--model", d)
    check(r.returncode == 0 and json.loads(r.stdout)["state_bytes_per_sequence"] > 0,
          f"info: {r.stdout} {r.stderr}")
    # The bundled model: perplexity on a held-out excerpt beats the unigram baseline; it is the
    # default model, and a text prompt streams English text.
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    r = run(binary, "perplexity", "--model", os.path.join(root, "models", "tiny"),
            os.path.join(root, "tests", "data", "heldout_sample.txt"))
    check(r.returncode == 0, f"perplexity: {r.stderr}")
    if r.returncode == 0:
        p = json.loads(r.stdout)
        check(p["bits_per_byte"] < 0.75 * p["unigram_bits_per_byte"], f"perplexity: {p}")
    r = subprocess.run([binary, "generate", "And the LORD said", "--max_tokens", "12"],
                       capture_output=True, text=True, timeout=120, cwd=root)
    check(r.returncode == 0 and len(r.stdout.split()) >= 5, f"default-model text: {r}")
    return finish()


if __name__ == "__main__":
    sys.exit(main())
