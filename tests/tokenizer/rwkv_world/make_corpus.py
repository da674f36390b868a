#!/usr/bin/python3
"""Writes a deterministic mixed-script corpus (about 1.8 MB of text and bytes to encode) for the RWKV World tokenizer test.

Usage: make_corpus.py VOCAB OUT.jsonl
One JSON record per line: {"kind", "text"} for text, {"kind", "hex"} for raw bytes that are not
valid UTF-8, {"kind", "ids"} for id sequences to decode. The vocabulary is read (with the
reference parser) only to build records from its own tokens, where greedy matching is hardest.
"""

import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference  # noqa: E402
import scripts  # noqa: E402


def whitespace_runs(rng):
    pieces = [" ", "\t", "\n", "\r\n", "\u00a0", "\u2003", "\u3000", "\u200b", "\v", "\f"]
    out = []
    for _ in range(rng.randint(3, 12)):
        out.append(rng.choice(pieces) * rng.choice([1, 2, 3, 4, 7, 8, 16, 31, 64, 65, 127, 300]))
        out.append(rng.choice(["x", "word", "", "\u4e2d", "#"]))
    return "".join(out)


def control_chars(rng):
    cps = list(range(0x00, 0x20)) + [0x7F] + list(range(0x80, 0xA0))
    return "".join(chr(rng.choice(cps)) if rng.random() < 0.6 else rng.choice("ab ,.")
                   for _ in range(rng.randint(5, 80)))


def invalid_looking(rng):
    pieces = ["\ufffd", "\ufeff", "\ufffe", "\uffff", "\U0010ffff", "\U000e0001", "\ue000",
              "\U000f0000", "\\xff\\xfe", "%C0%AF", "\u0301", "\u0338\u0301\u0308", "&#xD800;",
              "\\ud83d", "\u202e", "\u2066", "\u00ad", "\u034f", "\U0001d11e", "\u0000"]
    out = [rng.choice(pieces) + rng.choice(["", "a", " ", "\u4e2d"]) for _ in range(20)]
    zalgo = "".join("z" + "".join(chr(rng.randint(0x300, 0x36F)) for _ in range(rng.randint(1, 9)))
                    for _ in range(10))
    return "".join(out) + zalgo


def long_words(rng):
    kind = rng.randrange(8)
    n = rng.choice([100, 129, 500, 1000, 4096, 10000])
    if kind == 0:
        return rng.choice("a=-_*# 0") * n
    if kind == 1:
        return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(n))
    if kind == 2:
        return "".join(rng.choice("0123456789") for _ in range(n))
    if kind == 3:
        return "https://example.com/" + "/".join(rng.choice(scripts.ENGLISH) for _ in range(n // 8))
    if kind == 4:
        return "".join(rng.choice(scripts.HANZI) for _ in range(n // 3))
    if kind == 5:
        return "ab" * (n // 2) + "abc" * (n // 3)
    if kind == 6:
        return "".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")
                       for _ in range(n)) + "=="
    return "Supercalifragilistic" * (n // 20)


def random_code_points(rng):
    out = []
    for _ in range(rng.randint(10, 200)):
        plane = rng.random()
        if plane < 0.4:
            cp = rng.randint(0x20, 0x7FF)
        elif plane < 0.8:
            cp = rng.randint(0x800, 0xFFFF)
        else:
            cp = rng.randint(0x10000, 0x10FFFF)
        if 0xD800 <= cp <= 0xDFFF:
            cp = 0xFFFD
        out.append(chr(cp))
    return "".join(out)


def invalid_bytes(rng):
    """Byte strings that are not valid UTF-8 (encoded through the bytes path)."""
    pieces = [b"\xc0\xaf", b"\xe0\x80\xaf", b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xf4\x90\x80\x80",
              b"\xf5", b"\xff", b"\xfe", b"\x80", b"\xbf", b"\xe4\xb8", b"\xf0\x9f\x98",
              b"\xc3", b"\xe2\x82", "\u4e2d\u6587".encode()[:-1], b"\xf0\x9f"]
    out = bytearray()
    for _ in range(rng.randint(5, 60)):
        r = rng.random()
        if r < 0.4:
            out += rng.choice(pieces)
        elif r < 0.7:
            out += bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        else:
            out += scripts.sentence(rng, rng.choice(scripts.SCRIPT_NAMES)).encode()
    return bytes(out)


def vocab_tokens(rng, tokens):
    """Concatenated vocabulary tokens: greedy matching must not simply re-split at the seams."""
    return b"".join(rng.choice(tokens) for _ in range(rng.randint(2, 40)))


def id_sequence(rng, limit):
    """Ids to decode: ordinary, single-byte (partial UTF-8), 0, unknown and negative ones."""
    out = []
    for _ in range(rng.randint(1, 40)):
        r = rng.random()
        if r < 0.5:
            out.append(rng.randint(1, limit - 1))
        elif r < 0.85:
            out.append(rng.randint(0x80 + 1, 0xFF + 1))  # ids 129..256 are bytes 0x80..0xFF
        elif r < 0.92:
            out.append(0)
        elif r < 0.97:
            out.append(rng.randint(limit, limit + 5000))
        else:
            out.append(-rng.randint(1, 100))
    return out


def main(argv):
    if len(argv) != 3:
        sys.exit(__doc__)
    vocab = reference.WorldVocab(argv[1])
    tokens = sorted(vocab.bytes_to_id)
    limit = max(vocab.id_to_bytes) + 1
    rng = random.Random(20261123)
    records = []

    def text(kind, value):
        records.append({"kind": kind, "text": value})

    for name in scripts.SCRIPT_NAMES:
        for _ in range(200):
            text(name, scripts.paragraph(rng, name))
    for _ in range(150):
        text("code", scripts.code(rng))
    for _ in range(600):
        text("mixed", " ".join(scripts.sentence(rng, rng.choice(scripts.SCRIPT_NAMES))
                               for _ in range(rng.randint(1, 6))))
    for _ in range(100):
        text("whitespace", whitespace_runs(rng))
        text("control", control_chars(rng))
        text("invalid_looking", invalid_looking(rng))
        text("random_code_points", random_code_points(rng))
    for _ in range(40):
        text("long_word", long_words(rng))
    for _ in range(400):
        records.append({"kind": "vocab_tokens", "hex": vocab_tokens(rng, tokens).hex()})
    for _ in range(100):
        records.append({"kind": "invalid_bytes", "hex": invalid_bytes(rng).hex()})
    for _ in range(1000):
        records.append({"kind": "ids", "ids": id_sequence(rng, limit)})
    text("empty", "")
    for token in tokens[:: max(1, len(tokens) // 3000)]:
        records.append({"kind": "single_token", "hex": token.hex()})
        records.append({"kind": "token_plus_byte", "hex": (token + token[-1:]).hex()})
    with open(argv[2], "w", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
    total = sum(len(reference.record_bytes(r)) for r in records if "ids" not in r)
    print(f"corpus: {len(records)} records, {total} bytes to encode")


if __name__ == "__main__":
    main(sys.argv)
