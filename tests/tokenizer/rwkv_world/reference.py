#!/usr/bin/python3
"""Independent reference for the RWKV "World" tokenizer, written from the published algorithm.

The algorithm (BlinkDL's rwkv_tokenizer.py, the `rwkv` pip package's TRIE_TOKENIZER, rwkv.cpp's
world tokenizer): every vocabulary line is `<id> <Python str or bytes literal> <byte length>`;
str literals stand for their UTF-8 bytes. Encoding is greedy: at each position take the longest
vocabulary token that matches the next bytes (two ids with the same bytes: the later line wins,
as a dict filled in file order does). Decoding concatenates the tokens' bytes.

This file deliberately does not use a trie (the C++ code does): it keeps a dict from bytes to id
and, for each two-byte prefix, the lengths of the tokens that start with it, and tries those
lengths from the longest down. Choices that the published code leaves open, made here exactly as
the C++ code makes them (rwkv_world.h): ids with no token (0 = <|endoftext|>, unknown) decode to
nothing; text decodes with one U+FFFD per maximal invalid UTF-8 subpart ("replace").

Usage: reference.py VOCAB CORPUS.jsonl EXPECTED.jsonl
       reference.py --bench VOCAB CORPUS.jsonl PASSES   (prints {"mbps": best-of-PASSES encode MB/s})
  CORPUS records: {"kind": ..., "text": str} | {"kind": ..., "hex": bytes} | {"kind": ..., "ids": [...]}
  EXPECTED records, one per corpus record: {"ids": [...], "text": decoded text} ("ids" only for
  records with text or bytes; "text" is the lossy decode of the ids, or of the given ids).
"""

import ast
import json
import sys
import time
import warnings


class WorldVocab:
    """The vocabulary of one rwkv_vocab_*.txt file."""

    def __init__(self, path):
        self.id_to_bytes = {}
        self.bytes_to_id = {}
        with open(path, "r", encoding="utf-8") as f:
            lines = f.read().split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        for number, line in enumerate(lines, start=1):
            self._add(line.rstrip("\r"), f"{path}:{number}")
        # Two-byte prefix -> lengths (>= 2) of the tokens that start with it, longest first.
        lengths = {}
        for token in self.bytes_to_id:
            if len(token) >= 2:
                lengths.setdefault(token[:2], set()).add(len(token))
        self.lengths = {k: sorted(v, reverse=True) for k, v in lengths.items()}

    def _add(self, line, where):
        first, last = line.find(" "), line.rfind(" ")
        if first < 0 or first == last:
            raise ValueError(f"{where}: expected `<id> <literal> <byte length>`")
        token_id = int(line[:first])
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # invalid escapes are errors, not warnings
            value = ast.literal_eval(line[first + 1:last].strip())
        if isinstance(value, str):
            value = value.encode("utf-8")
        if not isinstance(value, bytes):
            raise ValueError(f"{where}: not a str or bytes literal")
        if len(value) != int(line[last + 1:]):
            raise ValueError(f"{where}: byte length mismatch")
        if token_id in self.id_to_bytes:
            raise ValueError(f"{where}: duplicate id {token_id}")
        self.id_to_bytes[token_id] = value
        self.bytes_to_id[value] = token_id  # a later line with the same bytes wins

    def encode_bytes(self, src):
        ids, pos, n = [], 0, len(src)
        lookup = self.bytes_to_id.get
        while pos < n:
            match = None
            for length in self.lengths.get(src[pos:pos + 2], ()):
                if pos + length <= n:
                    match = lookup(src[pos:pos + length])
                    if match is not None:
                        pos += length
                        break
            if match is None:
                match = lookup(src[pos:pos + 1])
                if match is None:
                    raise ValueError(f"no token starts with byte {src[pos]:#04x} at offset {pos}")
                pos += 1
            ids.append(match)
        return ids

    def encode(self, text):
        return self.encode_bytes(text.encode("utf-8"))

    def decode_bytes(self, ids):
        return b"".join(self.id_to_bytes.get(i, b"") for i in ids)

    def decode(self, ids):
        return self.decode_bytes(ids).decode("utf-8", errors="replace")


def record_bytes(record):
    if "text" in record:
        return record["text"].encode("utf-8")
    return bytes.fromhex(record["hex"])


def bench(vocab_path, corpus_path, passes):
    """Encode throughput over the corpus' text and byte records, best of `passes`."""
    vocab = WorldVocab(vocab_path)
    with open(corpus_path, "r", encoding="utf-8") as f:
        docs = [record_bytes(r) for r in map(json.loads, f) if "ids" not in r]
    total, best = sum(len(d) for d in docs), float("inf")
    for _ in range(passes):
        start = time.perf_counter()
        for doc in docs:
            vocab.encode_bytes(doc)
        best = min(best, time.perf_counter() - start)
    print(json.dumps({"mbps": total / 1e6 / best, "bytes": total}))


def main(argv):
    if len(argv) == 5 and argv[1] == "--bench":
        return bench(argv[2], argv[3], int(argv[4]))
    if len(argv) != 4:
        sys.exit(__doc__)
    vocab = WorldVocab(argv[1])
    with open(argv[2], "r", encoding="utf-8") as f:
        records = [json.loads(line) for line in f]
    start, encoded_bytes = time.perf_counter(), 0
    with open(argv[3], "w", encoding="utf-8") as out:
        for record in records:
            if "ids" in record:
                expected = {"text": vocab.decode(record["ids"])}
            else:
                src = record_bytes(record)
                ids = vocab.encode_bytes(src)
                encoded_bytes += len(src)
                expected = {"ids": ids, "text": vocab.decode(ids)}
            out.write(json.dumps(expected, ensure_ascii=False) + "\n")
    seconds = time.perf_counter() - start
    print(f"reference: {len(records)} records, {encoded_bytes} bytes encoded in {seconds:.2f} s")


if __name__ == "__main__":
    main(sys.argv)
