#!/usr/bin/python3
"""Writes the state_blob fuzz seeds: valid version-2 and version-1 blobs of the harness's model
description, and near-misses (bad CRC, truncated, another model, a NaN).

usage: make_state_blob_seeds.py OUT_DIR
"""
import json
import os
import struct
import sys
import zlib

FP = 0x0123456789abcdef
# (name, dtype, shape) in payload order: the harness's Specs(). A blob holds every section in
# f32 (layers.1.recurrent is bf16 in memory: widened on export, rounded back on import).
SECTIONS = [("layers.0.recurrent", "F32", [2, 4, 4]), ("layers.0.conv_q", "F32", [8, 3]),
            ("layers.1.recurrent", "F32", [1, 4, 2]), ("layers.1.normalizer", "F32", [1, 4])]
SIZE = {"F32": 4, "BF16": 2}


def payload(big=False):
    out = b""
    for i, (_, dtype, shape) in enumerate(SECTIONS):
        n = 1
        for d in shape:
            n *= d
        value = 3.4e38 if big and i == 2 else 0.25 * (i + 1)  # 3.4e38 overflows bf16
        out += struct.pack(f"<{n}f", *[value] * n)
    return out


def v2(position=5, pending=7, session=True, state=None):
    table, off = [], 0
    for name, dtype, shape in SECTIONS:
        n = SIZE[dtype]
        for d in shape:
            n *= d
        table.append({"name": name, "dtype": dtype, "shape": shape, "offset": off, "bytes": n})
        off += n
    header = {"model_fingerprint": f"{FP:016x}", "position": position, "pending": pending,
              "sections": table}
    if session:
        header["session"] = {"id": "chat-1", "owner_tag": "5e199fcfe7eb6987", "turns": 3,
                             "created_unix": 1700000000, "last_used_unix": 1700000100}
    h = json.dumps(header).encode()
    out = b"LNFRSTAT" + struct.pack("<II", 2, len(h)) + h
    out += b"\0" * ((8 - len(out) % 8) % 8)
    out += payload() if state is None else state
    return out + struct.pack("<I", zlib.crc32(out) & 0xffffffff)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    good = v2()
    bad_crc = good[:-1] + bytes([good[-1] ^ 1])
    nan = bytearray(payload())
    nan[0:4] = struct.pack("<f", float("nan"))
    seeds = {"v2_session": good, "v2_plain": v2(session=False, pending=-1),
             "v2_bad_crc": bad_crc, "v2_truncated": good[:len(good) // 2],
             "v2_nan": v2(state=bytes(nan)), "v2_big_position": v2(position=2**62),
             "v2_bf16_overflow": v2(state=payload(big=True)),
             "not_a_blob": b"hello world"}
    for name, data in seeds.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
