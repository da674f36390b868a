"""Byte-level BPE (GPT-2 style): pre-tokenizer, trainer and encoder, and the tokenizer.json writer.

Only the standard library and Debian's python3-regex (for \\p{L} / \\p{N}) are used.  The
encoder applies merges exactly like the Hugging Face tokenizers BPE model: repeatedly merge
the adjacent pair with the lowest merge rank (leftmost first) inside each pre-token.
"""
import heapq
import json
from collections import Counter, defaultdict

import regex

# The GPT-2 split used by tokenizers' ByteLevel pre-tokenizer when use_regex is true.
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
_SPLIT = regex.compile(GPT2_PATTERN)
EOT = "<|endoftext|>"


def bytes_to_unicode():
    """GPT-2's reversible byte -> printable unicode character map."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


BYTE_ENCODER = bytes_to_unicode()
BYTE_DECODER = {c: b for b, c in BYTE_ENCODER.items()}


def pretokenize(text):
    """Split text into pre-tokens and map each to its byte-level unicode string."""
    return ["".join(BYTE_ENCODER[b] for b in piece.encode("utf-8"))
            for piece in _SPLIT.findall(text)]


def train_bpe(text, vocab_size, specials=(EOT,)):
    """Returns (vocab: token string -> id, merges: list of (a, b)).

    Ids: specials first, then the 256 byte characters in byte order, then merged tokens in
    the order they were learnt.  Each step merges the most frequent adjacent pair (ties:
    smallest (id_a, id_b)); counts are updated incrementally.
    """
    vocab = {}
    for s in specials:
        vocab[s] = len(vocab)
    for b in range(256):
        vocab[BYTE_ENCODER[b]] = len(vocab)
    id2tok = {i: t for t, i in vocab.items()}

    word_counts = Counter(pretokenize(text))
    words = [[vocab[c] for c in w] for w in word_counts]
    counts = list(word_counts.values())

    pair_count = defaultdict(int)
    pair_where = defaultdict(set)
    for wi, w in enumerate(words):
        for a, b in zip(w, w[1:]):
            pair_count[(a, b)] += counts[wi]
            pair_where[(a, b)].add(wi)
    heap = [(-c, p) for p, c in pair_count.items()]
    heapq.heapify(heap)

    merges = []
    while len(vocab) < vocab_size and heap:
        negc, pair = heapq.heappop(heap)
        if pair_count.get(pair, 0) != -negc:
            continue  # stale heap entry
        if -negc < 2:
            break
        a, b = pair
        new_tok = id2tok[a] + id2tok[b]
        if new_tok not in vocab:
            vocab[new_tok] = len(vocab)
            id2tok[vocab[new_tok]] = new_tok
        new_id = vocab[new_tok]
        merges.append((id2tok[a], id2tok[b]))
        changed = set()
        for wi in sorted(pair_where.pop(pair)):
            w = words[wi]
            c = counts[wi]
            for p in zip(w, w[1:]):
                pair_count[p] -= c
                changed.add(p)
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and w[i] == a and w[i + 1] == b:
                    out.append(new_id)
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            words[wi] = out
            for p in zip(out, out[1:]):
                pair_count[p] += c
                pair_where[p].add(wi)
                changed.add(p)
        pair_count.pop(pair, None)
        for p in changed:
            if p == pair:
                continue
            c = pair_count.get(p, 0)
            if c > 0:
                heapq.heappush(heap, (-c, p))
            else:
                pair_count.pop(p, None)
    return vocab, merges


class Encoder:
    def __init__(self, vocab, merges, specials=(EOT,)):
        self.vocab = vocab
        self.id2tok = {i: t for t, i in vocab.items()}
        self.ranks = {m: r for r, m in enumerate(merges)}
        self.specials = {s: vocab[s] for s in specials}
        self.cache = {}

    @classmethod
    def from_file(cls, path):
        with open(path, encoding="utf-8") as f:
            tj = json.load(f)
        merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m)
                  for m in tj["model"]["merges"]]
        specials = [t["content"] for t in tj["added_tokens"] if t["special"]]
        return cls(tj["model"]["vocab"], merges, specials)

    def _bpe(self, word):
        syms = list(word)
        while len(syms) > 1:
            best, best_i = None, -1
            for i in range(len(syms) - 1):
                r = self.ranks.get((syms[i], syms[i + 1]))
                if r is not None and (best is None or r < best):
                    best, best_i = r, i
            if best is None:
                break
            a, b = syms[best_i], syms[best_i + 1]
            out, i = [], 0
            while i < len(syms):
                if i + 1 < len(syms) and syms[i] == a and syms[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(syms[i])
                    i += 1
            syms = out
        return [self.vocab[s] for s in syms]

    def encode(self, text, add_bos=False):
        """Plain text only: special-token strings inside `text` are not recognised."""
        ids = [self.specials[EOT]] if add_bos else []
        for w in pretokenize(text):
            r = self.cache.get(w)
            if r is None:
                r = self.cache[w] = self._bpe(w)
            ids.extend(r)
        return ids

    def decode_bytes(self, ids):
        out = bytearray()
        for i in ids:
            t = self.id2tok[i]
            if t in self.specials:
                out += t.encode()
            else:
                out += bytes(BYTE_DECODER[c] for c in t)
        return bytes(out)

    def decode(self, ids):
        return self.decode_bytes(ids).decode("utf-8", errors="replace")


def tokenizer_json(vocab, merges, specials=(EOT,), bos=EOT):
    """A standard Hugging Face tokenizer.json (tokenizers >= 0.14 layout)."""
    bos_id = vocab[bos]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [{"id": vocab[s], "content": s, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True}
                         for s in specials],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                          "use_regex": True},
        # encode(text, add_special_tokens=True) prepends BOS, as in training.
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": bos, "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": bos, "type_id": 0}},
                     {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": bos, "type_id": 1}},
                     {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {bos: {"id": bos, "ids": [bos_id], "tokens": [bos]}},
        },
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": dict(sorted(vocab.items(), key=lambda kv: kv[1])),
                  "merges": [a + " " + b for a, b in merges]},
    }
