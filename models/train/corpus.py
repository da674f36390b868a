#!/usr/bin/python3
"""Assemble the public-domain English training corpus for models/tiny.

Sources (Debian bookworm packages, installed by corpus.sh):
  * bible-kjv-text (read through the `bible` program of bible-kjv): the King James Bible,
    one document per chapter ("Genesis 1", blank line, one verse per line, no verse numbers).
  * dict-jargon: The Jargon File 4.4.7, one document per dictd entry.
  * dict-devil: Ambrose Bierce, The Devil's Dictionary, one document per dictd entry.

Documents are UTF-8 text ending in one newline.  Every 20th document of each source
(index % 20 == 19, in source order) goes to the held-out split, the rest to train.  Each split
is written as plain text with documents separated by one blank line ("\n\n" between documents);
the held-out file is what `linfer perplexity` is run on.

Usage: corpus.py OUTDIR      writes OUTDIR/{train.txt,heldout.txt,manifest.json}
"""
import base64
import gzip
import json
import os
import re
import subprocess
import sys

HELDOUT_EVERY = 20
DICTD = "/usr/share/dictd"
B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def b64num(s):
    n = 0
    for ch in s:
        n = n * 64 + B64.index(ch)
    return n


def kjv_documents():
    out = subprocess.run(["bible", "-l100000", "gen1:1-rev22:21"], check=True,
                         capture_output=True).stdout.decode("ascii")
    docs, title, verses = [], None, []
    for line in out.split("\n"):
        m = re.match(r"^  (\d+) (.*)$", line)
        if m:
            verses.append(m.group(2).strip())
        elif line.strip():
            if title is not None:
                docs.append(title + "\n\n" + "\n".join(verses) + "\n")
            title, verses = line.strip(), []
    docs.append(title + "\n\n" + "\n".join(verses) + "\n")
    assert len(docs) == 1189, len(docs)
    return docs


def dictd_documents(name):
    data = gzip.open(os.path.join(DICTD, name + ".dict.dz")).read()
    spans = set()
    with open(os.path.join(DICTD, name + ".index"), encoding="utf-8") as f:
        for line in f:
            head, off, ln = line.rstrip("\n").split("\t")[:3]
            if head.startswith("00-database") or head.startswith("00database"):
                continue
            spans.add((b64num(off), b64num(ln)))
    docs = []
    for off, ln in sorted(spans):  # file order
        text = data[off:off + ln].decode("utf-8")
        # normalise: strip trailing spaces, collapse runs of blank lines, one final newline
        lines = [l.rstrip() for l in text.replace("\r", "").split("\n")]
        text = re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip("\n") + "\n"
        if text.strip():
            docs.append(text)
    return docs


def pkg_version(pkg):
    return subprocess.run(["dpkg-query", "-W", "-f=${Version}", pkg], check=True,
                          capture_output=True, text=True).stdout


def main():
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    sources = [("kjv", "bible-kjv-text", kjv_documents()),
               ("jargon", "dict-jargon", dictd_documents("jargon")),
               ("devil", "dict-devil", dictd_documents("devil"))]
    train, held = [], []
    manifest = {"heldout_every": HELDOUT_EVERY, "sources": []}
    for name, pkg, docs in sources:
        tr = [d for i, d in enumerate(docs) if i % HELDOUT_EVERY != HELDOUT_EVERY - 1]
        he = [d for i, d in enumerate(docs) if i % HELDOUT_EVERY == HELDOUT_EVERY - 1]
        train += tr
        held += he
        manifest["sources"].append({
            "name": name, "package": pkg, "version": pkg_version(pkg),
            "documents": len(docs), "train_documents": len(tr), "heldout_documents": len(he),
            "bytes": sum(len(d.encode()) for d in docs),
            "train_bytes": sum(len(d.encode()) for d in tr),
            "heldout_bytes": sum(len(d.encode()) for d in he)})
    manifest["reader"] = {"package": "bible-kjv", "version": pkg_version("bible-kjv")}
    for fname, docs in (("train.txt", train), ("heldout.txt", held)):
        text = "\n".join(docs)  # each doc ends in "\n" -> one blank line between documents
        with open(os.path.join(outdir, fname), "w", encoding="utf-8", newline="") as f:
            f.write(text)
        manifest[fname] = {"documents": len(docs), "bytes": len(text.encode())}
    with open(os.path.join(outdir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    print(json.dumps(manifest, indent=1))


if __name__ == "__main__":
    main()
