#!/usr/bin/python3
"""Train the byte-level BPE tokenizer on the training split and write tokenizer.json.

Usage: train_tokenizer.py CORPUS_DIR OUT_TOKENIZER_JSON [--vocab 4096]

Prints vocabulary statistics and bytes/token on the held-out split.
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("corpus")
    ap.add_argument("out")
    ap.add_argument("--vocab", type=int, default=4096)
    args = ap.parse_args()
    with open(os.path.join(args.corpus, "train.txt"), encoding="utf-8") as f:
        train = f.read()
    t0 = time.time()
    vocab, merges = bpe.train_bpe(train, args.vocab)
    print(f"trained: {len(vocab)} tokens, {len(merges)} merges in {time.time() - t0:.1f}s")
    tj = bpe.tokenizer_json(vocab, merges)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(tj, f, ensure_ascii=False, indent=1)
    enc = bpe.Encoder.from_file(args.out)
    with open(os.path.join(args.corpus, "heldout.txt"), encoding="utf-8") as f:
        held = f.read()
    ids = enc.encode(held)
    assert enc.decode_bytes(ids) == held.encode("utf-8")
    print(f"held-out: {len(held.encode())} bytes -> {len(ids)} tokens "
          f"({len(held.encode()) / len(ids):.3f} bytes/token); round trip ok")


if __name__ == "__main__":
    main()
