#!/usr/bin/python3
"""Check that the Hugging Face tokenizers library agrees with our encoder (bpe.py).

Usage: check_tokenizer.py TOKENIZER_JSON HELDOUT_TXT [NODE_MODULES_PARENT]
Needs `npm install @anush008/tokenizers` in NODE_MODULES_PARENT (default /tmp/tokcheck).
Cases: every held-out document, the whole held-out file, and some awkward strings.
"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bpe  # noqa: E402

EXTRA = ["", " ", "  leading spaces", "trailing   ", "tabs\tand\nnewlines\n\n\n  x",
         "Numbers 12345 and 3.14159, 1st 2nd", "It's they're we've I'm you'll he'd",
         "café naïve — “quotes” ‘single’ … ½ ©", "日本語のテキスト", "emoji 😀👍🏽 and ZWJ 👨‍👩‍👧",
         "ALL CAPS LORD GOD", "a" * 300, "x = foo(bar[1]) + {baz}; // code",
         "Ångström Ωmega ΣΊΣΥΦΟΣ", "\u00a0non-breaking\u2009thin space"]


def main():
    tok, held = sys.argv[1], sys.argv[2]
    nm = sys.argv[3] if len(sys.argv) > 3 else "/tmp/tokcheck"
    enc = bpe.Encoder.from_file(tok)
    with open(held, encoding="utf-8") as f:
        text = f.read()
    docs = text.split("\n\n")  # approximate documents (paragraphs); fine for a check
    cases = [{"text": t, "ids": enc.encode(t), "ids_bos": enc.encode(t, add_bos=True)}
             for t in docs + [text] + EXTRA]
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump({"cases": cases}, f)
    env = dict(os.environ, NODE_PATH=os.path.join(nm, "node_modules"))
    r = subprocess.run(["node", os.path.join(HERE, "check_tokenizer.js"), tok, f.name], env=env)
    os.unlink(f.name)
    sys.exit(r.returncode)


if __name__ == "__main__":
    main()
