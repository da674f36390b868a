#!/usr/bin/python3
"""Convert an RWKV-7 checkpoint to an fla-format `rwkv7` checkpoint directory.

usage: /usr/bin/python3 models/convert/rwkv7.py IN OUT_DIR [--dtype auto|F32|F16|BF16] [--fuse-norm]

IN is either
  - a BlinkDL `.pth` (torch state dict, names `emb.weight`, `blocks.N.att.*`, ...); reading it
    needs PyTorch (Debian: `apt-get install python3-torch`), imported only for this case;
  - an rwkv.cpp `.bin` ("ggmf" format, version 100/101, FP32 or FP16 tensors).
OUT_DIR receives `config.json` (model_type rwkv7, RWKV7ForCausalLM) and `model.safetensors` with
fla's tensor names (fla/models/rwkv7, fla/layers/rwkv7.py; the same renaming as fla's
utils/convert_from_rwkv7.py). Other RWKV versions, quantized files and truncated files are refused
with a message.

--dtype auto (default) keeps every tensor's source precision (an rwkv.cpp FP16 file keeps its
FP32 vectors); F32/F16/BF16 store everything in that type.
The config sets "fuse_norm": false unless --fuse-norm: in fla that selects F.normalize (eps 1e-12,
as BlinkDL and rwkv.cpp normalise kk) instead of the fused l2_norm (eps 1e-6 inside the sqrt).
"""
import argparse
import json
import os
import struct
import sys

import numpy as np

GGMF_MAGIC = 0x67676D66
GGMF_VERSIONS = (100, 101)
GGMF_TYPES = {0: ("F32", np.dtype("<f4")), 1: ("F16", np.dtype("<f2"))}
GGMF_TYPE_NAMES = {2: "Q4_0", 3: "Q4_1", 4: "Q4_1_O", 5: "Q4_2", 6: "Q4_3", 7: "Q5_0", 8: "Q5_1",
                   9: "Q8_0", 10: "Q8_1"}
LORA = ("w1", "w2", "a1", "a2", "v1", "v2", "g1", "g2")
MIX = ("x_r", "x_w", "x_k", "x_v", "x_a", "x_g")


class ConvertError(Exception):
    pass


# --------------------------------------------------------------------------------------
# readers: both return {BlinkDL name: (float32 or float16/bf16-as-f32 array, source dtype)}
# with BlinkDL's .pth shapes and orientation
# --------------------------------------------------------------------------------------
def read_ggmf(path):
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 24:
        raise ConvertError(f"{path}: truncated rwkv.cpp file ({len(data)} bytes, header needs 24)")
    magic, version, n_vocab, n_embed, n_layer, dtype = struct.unpack_from("<6I", data, 0)
    if magic != GGMF_MAGIC:
        raise ConvertError(f"{path}: not an rwkv.cpp file (magic {magic:#x})")
    if version not in GGMF_VERSIONS:
        raise ConvertError(f"{path}: unsupported rwkv.cpp file version {version} (known: 100, 101)")
    if dtype not in GGMF_TYPES:
        raise ConvertError(f"{path}: rwkv.cpp data type {GGMF_TYPE_NAMES.get(dtype, dtype)} is not "
                           "supported (only FP32 and FP16 files; quantized files cannot be converted)")
    out, p = {}, 24
    while p < len(data):
        if p + 12 > len(data):
            raise ConvertError(f"{path}: truncated tensor header at byte {p}")
        n_dims, key_len, ttype = struct.unpack_from("<3I", data, p)
        p += 12
        if not 1 <= n_dims <= 3:
            raise ConvertError(f"{path}: tensor at byte {p - 12} has {n_dims} dimensions (1..3 allowed)")
        if p + 4 * n_dims + key_len > len(data):
            raise ConvertError(f"{path}: truncated tensor header at byte {p - 12}")
        sizes = struct.unpack_from(f"<{n_dims}I", data, p)
        p += 4 * n_dims
        try:
            key = data[p:p + key_len].decode("utf-8")
        except UnicodeDecodeError:
            raise ConvertError(f"{path}: tensor name at byte {p} is not UTF-8") from None
        p += key_len
        if ttype not in GGMF_TYPES:
            raise ConvertError(f"{path}: tensor {key} has data type {GGMF_TYPE_NAMES.get(ttype, ttype)} "
                               "(only FP32/FP16 are supported; quantized files cannot be converted)")
        name, npdt = GGMF_TYPES[ttype]
        shape = tuple(reversed(sizes))            # ggml order is innermost first
        nbytes = npdt.itemsize  # Python integers: numpy's int64 product wraps on 2^31 x 2^31
        for n in shape:
            nbytes *= n
        if p + nbytes > len(data):
            raise ConvertError(f"{path}: truncated: tensor {key} needs {nbytes} bytes, "
                               f"only {len(data) - p} left")
        arr = np.frombuffer(data, dtype=npdt, count=nbytes // npdt.itemsize, offset=p).reshape(shape)
        p += nbytes
        if key in out:
            raise ConvertError(f"{path}: tensor {key} appears twice")
        out[key] = (arr, name)
    check_version(out, path)
    emb = out.get("emb.weight")
    if emb is None or emb[0].shape != (n_vocab, n_embed):
        raise ConvertError(f"{path}: emb.weight missing or not [{n_vocab}, {n_embed}] as the header says")
    # undo rwkv.cpp's changes relative to BlinkDL's .pth (python/convert_pytorch_to_ggml.py):
    # LoRA matrices were transposed, the six mix vectors concatenated into att.x_rwkvag.
    sd = {}
    for key, (arr, name) in out.items():
        parts = key.split(".")
        if key.endswith(".att.x_rwkvag"):
            if arr.shape[0] != 6:
                raise ConvertError(f"{path}: {key} has shape {arr.shape}, expected [6, 1, D]")
            for j, m in enumerate(MIX):
                sd[key[:-len("x_rwkvag")] + m] = (arr[j].reshape(1, 1, -1), name)
        elif len(parts) == 4 and parts[2] == "att" and parts[3] in LORA:
            sd[key] = (arr.T, name)
        else:
            sd[key] = (arr, name)
    nl = sum(1 for k in sd if k.endswith(".ln1.weight"))
    if nl != n_layer:
        raise ConvertError(f"{path}: header says {n_layer} layers, file has {nl}")
    return sd


def read_pth(path):
    try:
        import torch  # noqa: PLC0415 -- only .pth needs it
    except ImportError:
        raise ConvertError("reading a .pth checkpoint needs PyTorch (Debian: apt-get install "
                           "python3-torch); rwkv.cpp .bin files convert without it") from None
    try:
        sd = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 -- torch raises many kinds for a broken file
        raise ConvertError(f"{path}: cannot read as a PyTorch checkpoint: {e}") from None
    if isinstance(sd, dict) and "state_dict" in sd and isinstance(sd["state_dict"], dict):
        sd = sd["state_dict"]
    if not isinstance(sd, dict) or not all(hasattr(v, "shape") for v in sd.values()):
        raise ConvertError(f"{path}: not a state dict of tensors")
    names = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16"}
    out = {}
    for k, v in sd.items():
        if v.dtype not in names:
            raise ConvertError(f"{path}: tensor {k} has dtype {v.dtype} (float32/float16/bfloat16 expected)")
        out[k] = (v.detach().to(torch.float32).numpy(), names[v.dtype])
    check_version(out, path)
    return out


def check_version(sd, path):
    """Refuse anything that is not RWKV-7 (same key tests as rwkv.cpp's loader)."""
    if "blocks.0.att.r_k" in sd and "blocks.0.att.k_k" in sd:
        return
    if "blocks.0.att.time_maa_x" in sd:
        ver = "RWKV-6"
    elif "blocks.0.att.ln_x.weight" in sd:
        ver = "RWKV-5.2" if "blocks.0.att.gate.weight" in sd else "RWKV-5.1"
    elif "blocks.0.att.time_first" in sd or "blocks.0.att.time_decay" in sd:
        ver = "RWKV-4"
    elif "emb.weight" in sd:
        ver = "an unknown RWKV version"
    else:
        ver = "not an RWKV checkpoint"
    raise ConvertError(f"{path}: this is {ver}; only RWKV-7 (x070) checkpoints can be converted")


def sniff(path):
    with open(path, "rb") as f:
        head = f.read(8)
    if len(head) >= 4 and struct.unpack("<I", head[:4])[0] == GGMF_MAGIC:
        return "ggmf"
    if head[:4] == b"PK\x03\x04" or head[:1] == b"\x80":   # torch zip archive or legacy pickle
        return "pth"
    if len(head) < 4:
        raise ConvertError(f"{path}: file too short ({len(head)} bytes) to be a checkpoint")
    raise ConvertError(f"{path}: unknown format (neither a BlinkDL .pth nor an rwkv.cpp .bin)")


# --------------------------------------------------------------------------------------
# BlinkDL names -> fla names (fla utils/convert_from_rwkv7.py)
# --------------------------------------------------------------------------------------
def to_fla(sd, fuse_norm=False, path="input"):
    def take(k):
        if k not in sd:
            raise ConvertError(f"{path}: missing tensor {k}")
        return sd.pop(k)

    sd = dict(sd)
    emb, emb_dt = take("emb.weight")
    V, D = emb.shape
    L = 0
    while f"blocks.{L}.ln1.weight" in sd:
        L += 1
    if L == 0:
        raise ConvertError(f"{path}: no blocks.N.ln1.weight tensors")
    r_k = sd["blocks.0.att.r_k"][0]
    H, hd = r_k.reshape(r_k.shape[0], -1).shape
    if H * hd != D:
        raise ConvertError(f"{path}: r_k shape {r_k.shape} does not split hidden size {D} into heads")
    I = sd["blocks.0.ffn.key.weight"][0].shape[0]
    out = {"model.embeddings.weight": (emb, emb_dt)}

    def vec(k):
        a, dt = take(k)
        return a.reshape(-1), dt

    has_ln0 = "blocks.0.ln0.weight" in sd
    if has_ln0:
        out["model.layers.0.pre_norm.weight"] = vec("blocks.0.ln0.weight")
        out["model.layers.0.pre_norm.bias"] = vec("blocks.0.ln0.bias")
    ranks = {}
    value_dim = []
    for i in range(L):
        b, p = f"blocks.{i}.", f"model.layers.{i}."
        out[p + "attn_norm.weight"] = vec(b + "ln1.weight")
        out[p + "attn_norm.bias"] = vec(b + "ln1.bias")
        out[p + "ffn_norm.weight"] = vec(b + "ln2.weight")
        out[p + "ffn_norm.bias"] = vec(b + "ln2.bias")
        for m in MIX:
            a, dt = take(b + "att." + m)
            out[p + "attn." + m] = (a.reshape(1, 1, D), dt)
        for m in ("k_k", "k_a"):
            out[p + "attn." + m] = vec(b + "att." + m)
        a, dt = take(b + "att.r_k")
        out[p + "attn.r_k"] = (a.reshape(H, hd), dt)
        for src, dst in (("receptance", "r_proj"), ("key", "k_proj"), ("value", "v_proj"), ("output", "o_proj")):
            out[p + f"attn.{dst}.weight"] = take(b + f"att.{src}.weight")
        value_dim.append(out[p + "attn.v_proj.weight"][0].shape[0])
        for g in "wavg":
            if g == "v" and i == 0:   # BlinkDL keeps v0/v1/v2 in block 0 too; fla has no v_lora there
                for n in "012":
                    sd.pop(b + "att.v" + n, None)
                continue
            w1, dt1 = take(b + f"att.{g}1")          # [D, r]   (x @ w1)
            w2, dt2 = take(b + f"att.{g}2")          # [r, out]
            ranks.setdefault(g, w1.shape[1])
            if w1.shape[1] != ranks[g]:
                raise ConvertError(f"{path}: {g}1 rank differs between layers")
            out[p + f"attn.{g}_lora.lora.0.weight"] = (np.ascontiguousarray(w1.T), dt1)
            out[p + f"attn.{g}_lora.lora.2.weight"] = (np.ascontiguousarray(w2.T), dt2)
            if g != "g":
                out[p + f"attn.{g}_lora.lora.2.bias"] = vec(b + f"att.{g}0")
        out[p + "attn.g_norm.weight"] = vec(b + "att.ln_x.weight")
        out[p + "attn.g_norm.bias"] = vec(b + "att.ln_x.bias")
        out[p + "ffn.x_k"] = vec(b + "ffn.x_k")
        out[p + "ffn.key.weight"] = take(b + "ffn.key.weight")
        out[p + "ffn.value.weight"] = take(b + "ffn.value.weight")
    out["model.norm.weight"] = vec("ln_out.weight")
    out["model.norm.bias"] = vec("ln_out.bias")
    out["lm_head.weight"] = take("head.weight")
    if sd:
        raise ConvertError(f"{path}: unexpected tensors: {sorted(sd)[:8]}")
    if len(set(value_dim)) != 1:
        raise ConvertError(f"{path}: value dims differ between layers: {value_dim}")
    cfg = {
        "model_type": "rwkv7", "architectures": ["RWKV7ForCausalLM"],
        "vocab_size": int(V), "hidden_size": int(D), "num_hidden_layers": int(L),
        "head_dim": int(hd), "num_heads": int(H), "intermediate_size": int(I),
        "hidden_ratio": I / D, "decay_low_rank_dim": int(ranks["w"]), "a_low_rank_dim": int(ranks["a"]),
        "gate_low_rank_dim": int(ranks["g"]), "v_low_rank_dim": int(ranks.get("v", 32)),
        "value_dim": [int(v) for v in value_dim], "hidden_act": "sqrelu", "norm_first": bool(has_ln0),
        "norm_bias": True, "norm_eps": 1e-5, "fuse_norm": bool(fuse_norm), "attn": None,
        "tie_word_embeddings": False, "bos_token_id": 0, "eos_token_id": 0, "pad_token_id": None,
    }
    warnings = []
    if hd != 64:
        warnings.append(f"head size {hd}: BlinkDL's ln_x uses eps 64e-5 for every head size, fla uses "
                        f"head_dim * norm_eps = {hd * 1e-5:g}; the converted model differs slightly")
    if not has_ln0:
        warnings.append("no blocks.0.ln0: wrote norm_first=false (no pre_norm)")
    return out, cfg, warnings


# --------------------------------------------------------------------------------------
# safetensors writer (self-contained; F32/F16/BF16, BF16 rounded to nearest even)
# --------------------------------------------------------------------------------------
def _bf16_bits(a):
    u = np.ascontiguousarray(np.asarray(a, dtype="<f4")).view("<u4").astype(np.uint64)
    nan = np.isnan(np.asarray(a, dtype=np.float32))
    r = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return np.where(nan, (u >> 16) | 0x40, r).astype("<u2")


def write_safetensors(path, tensors):
    """tensors: name -> (array, 'F32'|'F16'|'BF16')."""
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name in sorted(tensors):
        a, dt = tensors[name]
        a = np.asarray(a)
        if dt == "F32":
            blob = np.ascontiguousarray(a.astype("<f4")).tobytes()
        elif dt == "F16":
            blob = np.ascontiguousarray(a.astype("<f2")).tobytes()
        elif dt == "BF16":
            blob = _bf16_bits(a).tobytes()
        else:
            raise ValueError(dt)
        header[name] = {"dtype": dt, "shape": [int(s) for s in a.shape], "data_offsets": [off, off + len(blob)]}
        blobs.append(blob)
        off += len(blob)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((-(8 + len(h))) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


TORCH_DTYPE = {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}


def convert(src, out_dir, dtype="auto", fuse_norm=False, log=print):
    if not os.path.isfile(src):
        raise ConvertError(f"{src}: no such file")
    kind = sniff(src)
    sd = read_ggmf(src) if kind == "ggmf" else read_pth(src)
    tensors, cfg, warnings = to_fla(sd, fuse_norm=fuse_norm, path=src)
    if dtype != "auto":
        tensors = {k: (a, dtype) for k, (a, _) in tensors.items()}
    dts = {dt for _, dt in tensors.values()}
    cfg["torch_dtype"] = TORCH_DTYPE["BF16" if "BF16" in dts else "F16" if "F16" in dts else "F32"]
    os.makedirs(out_dir, exist_ok=True)
    write_safetensors(os.path.join(out_dir, "model.safetensors"), tensors)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    for w in warnings:
        log(f"warning: {w}")
    log(f"{src} ({'rwkv.cpp' if kind == 'ggmf' else 'BlinkDL .pth'}): RWKV-7, {cfg['num_hidden_layers']} layers, "
        f"hidden {cfg['hidden_size']}, {cfg['num_heads']} heads x {cfg['head_dim']}, vocab {cfg['vocab_size']}, "
        f"{'/'.join(sorted(dts))} -> {out_dir}")
    return cfg


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("input")
    ap.add_argument("out_dir")
    ap.add_argument("--dtype", default="auto", choices=["auto", "F32", "F16", "BF16"])
    ap.add_argument("--fuse-norm", action="store_true",
                    help="write fuse_norm=true (fla's fused l2_norm, eps 1e-6) instead of false")
    args = ap.parse_args(argv)
    try:
        convert(args.input, args.out_dir, args.dtype, args.fuse_norm)
    except ConvertError as e:
        print(f"rwkv7 convert: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
