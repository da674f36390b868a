#!/usr/bin/python3
"""Tests of models/convert/rwkv7.py, with rwkv.cpp's tiny RWKV-7 as the external oracle.

usage: /usr/bin/python3 check_rwkv7_converter.py [--shared DIR]

- oracle: convert ../shared/fixtures/rwkv/tiny-rwkv-7v0-834K-FP32.bin, feed the bytes '"in' one at a
  time from the zero state through rwkv7_reference.py: the 256 logits must match rwkv.cpp's
  expected-logits-7v0-834K.bin by upstream's criterion (tests/test_tiny_rwkv.c +
  logit_difference_validator.inc: |sum(logits - expected)| <= 1.05 * 0.001 for FP32) and within
  1e-5 for every logit; sequence mode (3 tokens at once) must agree too.
- an FP16 rwkv.cpp file written here the way rwkv.cpp's converter writes one (matrices FP16,
  vectors FP32) converts with per-tensor dtypes kept and meets upstream's FP16 bound (0.005766).
- refusals with clear messages: RWKV-5.2 (the shared 5v2 file), truncated files, bad magic,
  unknown version, quantized type, empty file, non-checkpoint; exit status 1 from the CLI.
- BlinkDL .pth input: a .pth written with torch from the same weights converts to the same tensors
  (skipped, with a message, when python3-torch is not installed).
The shared fixtures are ../shared next to the repository root; without them the oracle checks are
skipped with a message (the other checks use synthetic files).
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
CONVERTER = os.path.join(ROOT, "models", "convert", "rwkv7.py")
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(CONVERTER))
import rwkv7 as conv  # noqa: E402
import rwkv7_reference as rw  # noqa: E402
from safetensors_io import load_file  # noqa: E402

TINY7 = os.path.join("fixtures", "rwkv", "tiny-rwkv-7v0-834K-FP32.bin")
TINY5 = os.path.join("fixtures", "rwkv", "tiny-rwkv-5v2-730K-FP32.bin")
EXPECTED7 = os.path.join("fixtures", "rwkv", "expected-logits-7v0-834K.bin")
PROMPT = b'"in'
UPSTREAM_FP32 = 0.001 * 1.05       # test_tiny_rwkv.c expected_difference_sum_full[7v0 FP32] * 1.05
UPSTREAM_FP16 = 0.005766 * 1.05    # ... [7v0 FP16]
KEEP_F32 = (".time_", ".k_k", ".k_a", ".r_k", ".x_rwkvag", ".x_k", ".w0", ".a0", ".v0")

RESULTS = []


def default_shared():
    return os.path.join(ROOT, "..", "shared")


def _check(name, ok, detail=""):
    RESULTS.append(bool(ok))
    print(f"[{'PASS' if ok else 'FAIL'}] {name}" + (f"  ({detail})" if detail else ""))


# --------------------------------------------------------------------------------------
# ggmf helpers for synthetic files
# --------------------------------------------------------------------------------------
def read_records(path):
    data = open(path, "rb").read()
    hdr = struct.unpack_from("<6I", data, 0)
    p, recs = 24, []
    while p < len(data):
        nd, kl, dt = struct.unpack_from("<3I", data, p)
        p += 12
        sizes = struct.unpack_from(f"<{nd}I", data, p)
        p += 4 * nd
        key = data[p:p + kl].decode()
        p += kl
        npdt = np.dtype("<f4") if dt == 0 else np.dtype("<f2")
        n = int(np.prod(sizes))
        arr = np.frombuffer(data, npdt, n, p).reshape(tuple(reversed(sizes)))
        p += n * npdt.itemsize
        recs.append((key, arr, dt))
    return hdr, recs


def write_ggmf(path, hdr, recs):
    with open(path, "wb") as f:
        f.write(struct.pack("<6I", *hdr))
        for key, arr, dt in recs:
            kb = key.encode()
            f.write(struct.pack("<3I", arr.ndim, len(kb), dt))
            f.write(struct.pack(f"<{arr.ndim}I", *reversed(arr.shape)))
            f.write(kb)
            f.write(np.ascontiguousarray(arr.astype("<f4" if dt == 0 else "<f2")).tobytes())


def to_fp16_file(src, dst):
    """As rwkv.cpp's convert_pytorch_to_ggml.py FP16: matrices FP16, vectors and mixes FP32."""
    hdr, recs = read_records(src)
    out = [(k, a, 1 if a.ndim > 1 and not any(s in k for s in KEEP_F32) else 0) for k, a, _ in recs]
    write_ggmf(dst, hdr[:5] + (1,), out)


def run_prompt(model):
    s = None
    for b in PROMPT:
        lg, s = model.forward([b], s)
    seq, _ = model.forward(list(PROMPT))
    return lg[-1], seq[-1]


# --------------------------------------------------------------------------------------
# checks
# --------------------------------------------------------------------------------------
def check_oracle(shared, check=_check, tmp=None):
    src = os.path.join(shared, TINY7)
    if not os.path.isfile(src):
        print(f"[SKIP] rwkv.cpp oracle: {src} not found (the shared fixtures ../shared are absent)")
        return
    own_tmp = tmp is None
    tmp = tmp or tempfile.mkdtemp()
    out = os.path.join(tmp, "rwkvcpp_tiny7")
    conv.convert(src, out, log=lambda *_: None)
    expected = np.fromfile(os.path.join(shared, EXPECTED7), "<f4").astype(np.float64)
    model = rw.load_model(out)
    serial, seq = run_prompt(model)
    d = serial - expected
    check("rwkv.cpp oracle: tiny RWKV-7 FP32 converted, '\"in' one byte at a time == expected logits",
          expected.size == 256 and abs(d.sum()) <= UPSTREAM_FP32 and np.abs(d).max() <= 1e-5,
          f"max |d| {np.abs(d).max():.2e}, sum(d) {d.sum():+.2e} (upstream bound {UPSTREAM_FP32:.2e})")
    check("rwkv.cpp oracle: sequence mode (3 tokens in one call) == serial", np.abs(seq - serial).max() < 1e-12)
    # fla's fused l2 norm (eps 1e-6 inside the sqrt) instead of F.normalize: immaterial here
    cfg = json.load(open(os.path.join(out, "config.json")))
    t, _, _ = load_file(os.path.join(out, "model.safetensors"))
    fused, _ = run_prompt(rw.Model(dict(cfg, fuse_norm=True), t))
    check("rwkv.cpp oracle: also within 1e-5 with fuse_norm=true (fla's l2_norm eps)",
          np.abs(fused - expected).max() <= 1e-5, f"max |d| {np.abs(fused - expected).max():.2e}")
    # FP16 file as rwkv.cpp writes it
    f16 = os.path.join(tmp, "tiny7-FP16.bin")
    to_fp16_file(src, f16)
    out16 = os.path.join(tmp, "rwkvcpp_tiny7_f16")
    conv.convert(f16, out16, log=lambda *_: None)
    _, dts, _ = load_file(os.path.join(out16, "model.safetensors"))
    lg16, _ = run_prompt(rw.load_model(out16))
    d16 = lg16 - expected
    check("rwkv.cpp FP16 file: dtypes kept per tensor (F16 matrices, F32 vectors), upstream FP16 bound",
          dts["lm_head.weight"] == "F16" and dts["model.layers.0.attn.k_k"] == "F32"
          and dts["model.layers.3.attn.w_lora.lora.0.weight"] == "F16" and abs(d16.sum()) <= UPSTREAM_FP16,
          f"sum(d) {d16.sum():+.2e} (bound {UPSTREAM_FP16:.2e}), max |d| {np.abs(d16).max():.2e}")
    if own_tmp:
        import shutil
        shutil.rmtree(tmp, ignore_errors=True)


def synthetic_blinkdl(rng, D=16, H=2, L=3, V=24, I=48, r=8):
    """A random RWKV-7 state dict with BlinkDL's names, shapes and orientation (x @ w1 for LoRA)."""
    N = D // H
    sd = {"emb.weight": rng.normal(size=(V, D)), "blocks.0.ln0.weight": 1 + 0.1 * rng.normal(size=D),
          "blocks.0.ln0.bias": 0.1 * rng.normal(size=D), "ln_out.weight": 1 + 0.1 * rng.normal(size=D),
          "ln_out.bias": 0.1 * rng.normal(size=D), "head.weight": rng.normal(size=(V, D)) / np.sqrt(D)}
    for i in range(L):
        b = f"blocks.{i}."
        for n in ("ln1", "ln2", "att.ln_x"):
            sd[b + n + ".weight"] = 1 + 0.1 * rng.normal(size=D)
            sd[b + n + ".bias"] = 0.1 * rng.normal(size=D)
        for m in ("x_r", "x_w", "x_k", "x_v", "x_a", "x_g"):
            sd[b + "att." + m] = rng.uniform(0, 1, (1, 1, D))
        for g in "wavg":   # BlinkDL keeps v0/v1/v2 in block 0 too (unused)
            sd[b + f"att.{g}1"] = rng.normal(size=(D, r)) / np.sqrt(D)
            sd[b + f"att.{g}2"] = rng.normal(size=(r, D)) / np.sqrt(r)
            if g != "g":
                sd[b + f"att.{g}0"] = rng.normal(size=(1, 1, D)) + (-2.0 if g == "w" else 0.0)
        sd[b + "att.k_k"] = rng.uniform(0.5, 1, (1, 1, D))
        sd[b + "att.k_a"] = rng.uniform(0.5, 1.5, (1, 1, D))
        sd[b + "att.r_k"] = 0.3 * rng.normal(size=(H, N))
        for n in ("receptance", "key", "value", "output"):
            sd[b + f"att.{n}.weight"] = rng.normal(size=(D, D)) / np.sqrt(D)
        sd[b + "ffn.x_k"] = rng.uniform(0, 1, (1, 1, D))
        sd[b + "ffn.key.weight"] = rng.normal(size=(I, D)) / np.sqrt(D)
        sd[b + "ffn.value.weight"] = rng.normal(size=(D, I)) / np.sqrt(I)
    return {k: np.asarray(v, dtype=np.float32) for k, v in sd.items()}


def blinkdl_forward(sd, tokens, H):
    """RWKV-7 one token at a time in BlinkDL's own formulation (RWKV-v7/rwkv_v7_numpy.py:
    V-first state, x @ w1 LoRA orientation, fixed GroupNorm eps 64e-5, F.normalize), float64."""
    sd = {k: v.astype(np.float64) for k, v in sd.items()}
    D = sd["emb.weight"].shape[1]
    N = D // H
    L = sum(1 for k in sd if k.endswith(".ln1.weight"))

    def ln(x, p, eps=1e-5):
        return (x - x.mean()) / np.sqrt(x.var() + eps) * sd[p + ".weight"] + sd[p + ".bias"]
    sig = lambda z: 1 / (1 + np.exp(-z))  # noqa: E731
    last = np.zeros((L, 2, D))
    S = np.zeros((L, H, N, N))
    for tok in tokens:
        x = ln(sd["emb.weight"][tok], "blocks.0.ln0")
        v0 = None
        for i in range(L):
            b = f"blocks.{i}.att."
            xa_ = ln(x, f"blocks.{i}.ln1")
            mix = {m: xa_ + sd[b + "x_" + m].reshape(D) * (last[i, 0] - xa_) for m in "rwkvag"}
            last[i, 0] = xa_
            r = sd[b + "receptance.weight"] @ mix["r"]
            w = np.exp(-sig(np.tanh(mix["w"] @ sd[b + "w1"]) @ sd[b + "w2"] + sd[b + "w0"].reshape(D)) / np.e ** 0.5)
            k = sd[b + "key.weight"] @ mix["k"]
            v = sd[b + "value.weight"] @ mix["v"]
            if v0 is None:
                v0 = v
            else:
                v = v + (v0 - v) * sig(mix["v"] @ sd[b + "v1"] @ sd[b + "v2"] + sd[b + "v0"].reshape(D))
            a = sig(mix["a"] @ sd[b + "a1"] @ sd[b + "a2"] + sd[b + "a0"].reshape(D))
            g = sig(mix["g"] @ sd[b + "g1"]) @ sd[b + "g2"]
            kk = (k * sd[b + "k_k"].reshape(D)).reshape(H, N)
            kk = kk / np.maximum(np.linalg.norm(kk, axis=1, keepdims=True), 1e-12)
            k = k + k * (a - 1) * sd[b + "k_a"].reshape(D)
            rh, wh, kh, vh, ah = (z.reshape(H, N, 1) for z in (r, w, k, v, a))
            kkh = kk.reshape(H, N, 1)
            S[i] = S[i] * wh.transpose(0, 2, 1) - S[i] @ kkh @ (kkh * ah).transpose(0, 2, 1) \
                + vh @ kh.transpose(0, 2, 1)
            y = (S[i] @ rh).reshape(H, N)
            y = ((y - y.mean(1, keepdims=True)) / np.sqrt(y.var(1, keepdims=True) + 64e-5)).reshape(D)
            y = y * sd[b + "ln_x.weight"] + sd[b + "ln_x.bias"]
            y = y + ((rh * kh * sd[b + "r_k"].reshape(H, N, 1)).sum(1, keepdims=True) * vh).reshape(D)
            x = x + sd[b + "output.weight"] @ (y * g)
            xf = ln(x, f"blocks.{i}.ln2")
            kf = sd[f"blocks.{i}.ffn.key.weight"] @ (xf + sd[f"blocks.{i}.ffn.x_k"].reshape(D) * (last[i, 1] - xf))
            last[i, 1] = xf
            x = x + sd[f"blocks.{i}.ffn.value.weight"] @ np.maximum(kf, 0) ** 2
        logits = sd["head.weight"] @ ln(x, "ln_out")
    return logits


def blinkdl_to_ggmf_records(sd):
    """What rwkv.cpp's convert_pytorch_to_ggml.py writes for a v7 state dict (FP32)."""
    recs, mixes = [], {}
    for k, a in sd.items():
        if ".att.x_" in k:
            mixes.setdefault(k.rsplit(".", 1)[0], []).append(a)
            if len(mixes[k.rsplit(".", 1)[0]]) == 6:
                recs.append((k.rsplit(".", 1)[0] + ".x_rwkvag", np.concatenate(mixes[k.rsplit(".", 1)[0]], 0), 0))
            continue
        if k.split(".")[-1] in conv.LORA and ".att." in k:
            a = a.T
        recs.append((k, a, 0))
    return recs


def check_synthetic(tmp, check=_check):
    """Converter + reference vs an independent BlinkDL-style forward, no shared files needed."""
    rng = np.random.default_rng(7)
    H = 2   # head size 64: BlinkDL's fixed GroupNorm eps 64e-5 == fla's head_dim * 1e-5 (NOTES_families.md 5)
    sd = synthetic_blinkdl(rng, D=128, H=H, I=256, r=16)
    D, V = sd["emb.weight"].shape[1], sd["emb.weight"].shape[0]
    binp = os.path.join(tmp, "synthetic7.bin")
    write_ggmf(binp, (conv.GGMF_MAGIC, 101, V, D, 3, 0), blinkdl_to_ggmf_records(sd))
    out = os.path.join(tmp, "synthetic7")
    conv.convert(binp, out, log=lambda *_: None)
    cfg = json.load(open(os.path.join(out, "config.json")))
    tokens = rng.integers(0, V, 40)
    want = blinkdl_forward(sd, tokens, H)
    got, _ = rw.load_model(out).forward(tokens)
    err = float(np.abs(got[-1] - want).max())
    check("synthetic RWKV-7 (2 heads, 3 layers, block-0 v0/v1/v2 dropped): rwkv.cpp layout -> converter -> "
          "reference == BlinkDL-formulation forward", err < 1e-12 and cfg["head_dim"] == 64 and cfg["num_heads"] == 2,
          f"max |d| {err:.1e}")
    try:
        import torch
    except ImportError:
        print("[SKIP] BlinkDL .pth input (synthetic): python3-torch is not installed")
        return
    pth = os.path.join(tmp, "synthetic7.pth")
    torch.save({k: torch.from_numpy(a) for k, a in sd.items()}, pth)
    out2 = os.path.join(tmp, "synthetic7_pth")
    conv.convert(pth, out2, log=lambda *_: None)
    ta, _, _ = load_file(os.path.join(out, "model.safetensors"))
    tb, _, _ = load_file(os.path.join(out2, "model.safetensors"))
    check("synthetic RWKV-7 .pth converts to the same tensors as its rwkv.cpp .bin",
          set(ta) == set(tb) and all(np.array_equal(ta[k], tb[k]) for k in ta))


def expect_error(what, path, needle, check):
    try:
        conv.convert(path, path + ".out", log=lambda *_: None)
        check(f"refuses {what}", False, "no error raised")
    except conv.ConvertError as e:
        check(f"refuses {what}: message names the problem", needle.lower() in str(e).lower(), str(e))


def check_errors(shared, tmp, check=_check):
    src7 = os.path.join(shared, TINY7)
    if os.path.isfile(os.path.join(shared, TINY5)):
        expect_error("an RWKV-5.2 rwkv.cpp file", os.path.join(shared, TINY5), "RWKV-5.2", check)
    else:
        print("[SKIP] RWKV-5.2 refusal: shared 5v2 file absent")
    hdr = (conv.GGMF_MAGIC, 101, 8, 4, 1, 0)
    good = os.path.join(tmp, "mini.bin")
    write_ggmf(good, hdr, [("emb.weight", np.ones((8, 4)), 0), ("blocks.0.ln1.weight", np.ones(4), 0)])
    data = open(good, "rb").read()
    cases = [("a truncated tensor", data[:-5], "truncated"), ("a truncated header", data[:20], "truncated"),
             ("a bad magic", b"XXXX" + data[4:], "unknown format"),
             ("file version 102", data[:4] + struct.pack("<I", 102) + data[8:], "version 102"),
             ("a quantized (Q5_1) file", data[:20] + struct.pack("<I", 8) + data[24:], "Q5_1"),
             ("an empty file", b"", "too short"), ("a text file", b"hello world\n", "unknown format"),
             ("an RWKV-4 layout", None, "RWKV-4"),
             # emb.weight's sizes (after the 24-byte header and its 12-byte record) made 2^31 x 2^31:
             # numpy's int64 product wrapped to 0 and the reshape raised a traceback
             ("a tensor of 2^31 x 2^31", data[:36] + struct.pack("<2I", 2**31, 2**31) + data[44:],
              "truncated")]
    for what, blob, needle in cases:
        p = os.path.join(tmp, what.replace(" ", "_") + ".bin")
        if blob is None:
            write_ggmf(p, hdr, [("emb.weight", np.ones((8, 4)), 0), ("blocks.0.ln1.weight", np.ones(4), 0),
                                ("blocks.0.att.time_decay", np.ones(4), 0)])
        else:
            open(p, "wb").write(blob)
        expect_error(what, p, needle, check)
    if os.path.isfile(src7):   # truncation in the middle of a real file
        p = os.path.join(tmp, "tiny7_cut.bin")
        open(p, "wb").write(open(src7, "rb").read()[:1_000_000])
        expect_error("a real RWKV-7 file cut at 1 MB", p, "truncated", check)
    r = subprocess.run([sys.executable, CONVERTER, os.path.join(tmp, "an_empty_file.bin"), os.path.join(tmp, "o")],
                       capture_output=True, text=True)
    check("CLI: exit status 1 and 'error:' on stderr for a bad file", r.returncode == 1 and "error:" in r.stderr,
          r.stderr.strip())


def check_cli_and_dtypes(shared, tmp, check=_check):
    src = os.path.join(shared, TINY7)
    if not os.path.isfile(src):
        print("[SKIP] CLI conversion: shared fixtures absent")
        return None
    out = os.path.join(tmp, "cli_bf16")
    r = subprocess.run([sys.executable, CONVERTER, src, out, "--dtype", "BF16", "--fuse-norm"],
                       capture_output=True, text=True)
    _, dts, meta = load_file(os.path.join(out, "model.safetensors"))
    cfg = json.load(open(os.path.join(out, "config.json")))
    check("CLI --dtype BF16 --fuse-norm: exit 0, all BF16, fuse_norm true, torch_dtype bfloat16",
          r.returncode == 0 and set(dts.values()) == {"BF16"} and cfg["fuse_norm"] is True
          and cfg["torch_dtype"] == "bfloat16" and meta == {"format": "pt"}, r.stdout.strip())
    m = rw.load_model(out)   # strict: every tensor used, nothing missing
    check("converted checkpoint loads strictly (fla names and shapes)", len(m.layers) == 12)
    return src


def check_pth(shared, tmp, check=_check):
    src = os.path.join(shared, TINY7)
    try:
        import torch
    except ImportError:
        print("[SKIP] BlinkDL .pth input: python3-torch is not installed (apt-get install python3-torch)")
        return
    if not os.path.isfile(src):
        print("[SKIP] BlinkDL .pth input: shared fixtures absent")
        return
    sd = conv.read_ggmf(src)   # back to BlinkDL names, shapes and orientation
    pth = os.path.join(tmp, "tiny7.pth")
    torch.save({k: torch.from_numpy(np.array(a, dtype=np.float32)) for k, (a, _) in sd.items()}, pth)
    a_dir, b_dir = os.path.join(tmp, "from_pth"), os.path.join(tmp, "from_bin")
    conv.convert(pth, a_dir, log=lambda *_: None)
    conv.convert(src, b_dir, log=lambda *_: None)
    ta, _, _ = load_file(os.path.join(a_dir, "model.safetensors"))
    tb, _, _ = load_file(os.path.join(b_dir, "model.safetensors"))
    check(".pth (torch.save of BlinkDL names) converts to the same tensors as the rwkv.cpp .bin",
          set(ta) == set(tb) and all(np.array_equal(ta[k], tb[k]) for k in ta))
    # BlinkDL's released .pth files are bf16: kept as BF16 with --dtype auto
    pbf = os.path.join(tmp, "tiny7_bf16.pth")
    torch.save({k: torch.from_numpy(np.array(a, dtype=np.float32)).to(torch.bfloat16) for k, (a, _) in sd.items()},
               pbf)
    c_dir = os.path.join(tmp, "from_pth_bf16")
    cfg = conv.convert(pbf, c_dir, log=lambda *_: None)
    tc, dtc, _ = load_file(os.path.join(c_dir, "model.safetensors"))
    bf = {k: torch.from_numpy(np.array(tb[k], dtype=np.float32)).to(torch.bfloat16).float().numpy() for k in tb}
    check(".pth with bf16 tensors: stored as BF16, values = bf16(FP32 weights), torch_dtype bfloat16",
          set(dtc.values()) == {"BF16"} and cfg["torch_dtype"] == "bfloat16"
          and all(np.array_equal(tc[k], bf[k]) for k in tc))
    sd2 = {k: torch.from_numpy(np.array(a, dtype=np.float32)) for k, (a, _) in sd.items() if "att.r_k" not in k
           and "att.k_k" not in k}
    sd2["blocks.0.att.time_faaaa"] = torch.zeros(1, 4)
    p2 = os.path.join(tmp, "v5.pth")
    torch.save(sd2, p2)
    expect_error("a .pth without RWKV-7 keys", p2, "only RWKV-7", check)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", default=default_shared())
    args = ap.parse_args()
    t0 = time.time()
    if not os.path.isdir(args.shared):
        print(f"[SKIP] shared fixtures not found at {args.shared}: rwkv.cpp oracle checks skipped")
    with tempfile.TemporaryDirectory() as tmp:
        check_oracle(args.shared, _check, tmp)
        check_synthetic(tmp)
        check_errors(args.shared, tmp)
        check_cli_and_dtypes(args.shared, tmp)
        check_pth(args.shared, tmp)
    n_ok = sum(RESULTS)
    print(f"{n_ok} passed, {len(RESULTS) - n_ok} failed  ({time.time() - t0:.1f}s)")
    sys.exit(0 if n_ok == len(RESULTS) else 1)


if __name__ == "__main__":
    main()
