#!/usr/bin/python3
"""Tiny random RWKV-7 / Mamba2 / Based / ReBased checkpoints and their float64 expected logits.

usage: /usr/bin/python3 make_family_fixtures.py --out DIR [--only CASE ...] [--shared DIR]

Same format as make_fixtures.py (README.md "Fixture format"): DIR/cases.txt and per case
config.json, model.safetensors, expected.json, expected_logits.f64 ([70, vocab] float64, one full
forward of the reference on the weights as stored). Families: rwkv7 (rwkv7_reference.py), mamba2 in
the transformers ("hf") and fla config flavours (mamba2_reference.py), linear_attn with the
taylor_exp / rebased feature maps (based_reference.py).

With the shared fixtures present (default ../shared next to the repository root, or --shared), the
rwkv.cpp tiny RWKV-7 model converted by models/convert/rwkv7.py is one more case
(rwkv7_rwkvcpp_tiny, byte-level tokens of a fixed English text).
"""
import argparse
import json
import os
import sys
import time
import zlib

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "models", "convert"))
import based_reference  # noqa: E402
import mamba2_reference  # noqa: E402
import rwkv7_reference  # noqa: E402
from safetensors_io import load_file, save_file  # noqa: E402

T_TOKENS = 70  # crosses fla's 64-token chunk / recurrent-kernel boundary
TORCH_DTYPE = {"F32": "float32", "BF16": "bfloat16", "F16": "float16"}
RWKVCPP_TINY = os.path.join("fixtures", "rwkv", "tiny-rwkv-7v0-834K-FP32.bin")
TINY_TEXT = b'"in the beginning was the word, and the word was with the model; tests ran.'[:T_TOKENS]

RW = dict(model_type="rwkv7", hidden_size=64, num_hidden_layers=3, vocab_size=96, head_dim=16,
          decay_low_rank_dim=8, a_low_rank_dim=8, v_low_rank_dim=4, gate_low_rank_dim=16, hidden_ratio=2)
M2HF = dict(model_type="mamba2", hidden_size=32, num_hidden_layers=2, vocab_size=72, expand=2, head_dim=16,
            num_heads=4, state_size=8, n_groups=1, layer_norm_epsilon=1e-5, conv_kernel=4)
M2FLA = dict(model_type="mamba2", hidden_size=32, num_hidden_layers=2, vocab_size=72, expand=2, head_dim=16,
             state_size=8, n_groups=1, norm_eps=1e-5, conv_kernel=4)
LA = dict(model_type="linear_attn", hidden_size=32, num_hidden_layers=2, vocab_size=64, num_heads=2)

# name -> (base, overrides, storage dtype)
CASES = [
    ("rwkv7_default", RW, {}, "F32"),
    ("rwkv7_bf16", RW, {}, "BF16"),
    ("rwkv7_f16", RW, {}, "F16"),
    ("rwkv7_head32", RW, dict(head_dim=32), "F32"),
    ("rwkv7_head64", RW, dict(hidden_size=128, head_dim=64, num_hidden_layers=2), "F32"),
    ("rwkv7_num_heads", RW, dict(head_dim=None, num_heads=8), "F32"),
    ("rwkv7_value_dim", RW, dict(value_dim=128), "F32"),
    ("rwkv7_no_ln0", RW, dict(norm_first=False), "F32"),
    ("rwkv7_no_norm_bias", RW, dict(norm_bias=False), "F32"),
    ("rwkv7_unfused_norm", RW, dict(fuse_norm=False), "F32"),
    ("rwkv7_tied", RW, dict(tie_word_embeddings=True), "F32"),
    ("rwkv7_lora_auto", RW, dict(decay_low_rank_dim=None, a_low_rank_dim=None, v_low_rank_dim=None,
                                 gate_low_rank_dim=None, intermediate_size=160), "F32"),
    ("rwkv7_legacy_x_x", RW, {}, "F32"),      # fla version-1 layout: attn.x_x [6, D]
    ("mamba2_hf_default", M2HF, {}, "F32"),    # config.json spelled out as save_pretrained writes it
    ("mamba2_hf_groups2", M2HF, dict(n_groups=2), "F32"),
    ("mamba2_hf_groups4_bf16", M2HF, dict(hidden_size=64, head_dim=16, num_heads=8, n_groups=4), "BF16"),
    ("mamba2_hf_tied", M2HF, dict(tie_word_embeddings=True), "F32"),
    ("mamba2_hf_dt_limit", M2HF, dict(time_step_limit=[0.02, 0.06]), "F32"),
    ("mamba2_hf_bias", M2HF, dict(use_bias=True, use_conv_bias=False, conv_kernel=2), "F32"),
    ("mamba2_hf_f16", M2HF, {}, "F16"),
    ("mamba2_fla_default", M2FLA, {}, "F32"),
    ("mamba2_fla_groups2", M2FLA, dict(n_groups=2), "F32"),
    ("mamba2_fla_norm_before_gate", M2FLA, dict(norm_before_gate=True, n_groups=2), "F32"),
    ("mamba2_fla_no_rmsnorm", M2FLA, dict(rmsnorm=False), "F32"),
    ("mamba2_fla_D_has_hdim", M2FLA, dict(D_has_hdim=True, dt_limit=[0.0, 0.05]), "F32"),
    ("mamba2_fla_tied_bf16", M2FLA, dict(tie_word_embeddings=True), "BF16"),
    ("linear_attn_taylor", LA, dict(feature_map="taylor_exp", expand_k=0.5, norm_feature_map=True), "F32"),
    ("linear_attn_taylor_plain", LA, dict(feature_map="taylor_exp", expand_k=0.25), "F32"),
    ("linear_attn_taylor_kvgroups", LA, dict(feature_map="taylor_exp", hidden_size=64, num_heads=4, num_kv_heads=2,
                                             expand_k=0.25, norm_feature_map=True), "F32"),
    ("linear_attn_rebased", LA, dict(feature_map="rebased", expand_k=0.5, norm_feature_map=True), "F32"),
    ("linear_attn_rebased_plain", LA, dict(feature_map="rebased", expand_k=0.5), "F32"),
    ("linear_attn_rebased_nobeta", LA, dict(feature_map="rebased", expand_k=0.5, norm_feature_map=True,
                                            use_beta=False), "F32"),
    ("linear_attn_rebased_nonorm", LA, dict(feature_map="rebased", expand_k=0.5, norm_feature_map=True,
                                            normalize=False), "F32"),
    ("linear_attn_rebased_bf16", LA, dict(feature_map="rebased", expand_k=0.5, norm_feature_map=True), "BF16"),
]
ARCH = {"rwkv7": "RWKV7ForCausalLM", "mamba2": "Mamba2ForCausalLM", "linear_attn": "LinearAttentionForCausalLM"}


class Gen:
    def __init__(self, rng):
        self.rng, self.w = rng, {}

    def lin(self, name, out, inp, gain=1.0):
        self.w[name] = self.rng.normal(0.0, gain / np.sqrt(inp), (out, inp))

    def norm(self, name, n, bias=None):
        self.w[name] = 1.0 + 0.1 * self.rng.normal(size=n)
        if bias:
            self.w[bias] = 0.1 * self.rng.normal(size=n)


# --------------------------------------------------------------------------------------
# random weights, enumerated independently of the references' loaders (checked by strict loads)
# --------------------------------------------------------------------------------------
def rwkv7_weights(name, c, rng):
    cfg = rwkv7_reference.parse_config(c)
    D, L, V = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
    hd = cfg["head_dim"] if cfg["head_dim"] is not None else D // cfg["num_heads"]
    H = D // hd
    Dv = cfg["value_dim"] if cfg["value_dim"] is not None else D
    I = cfg["intermediate_size"] or 32 * ((int(D * (cfg["hidden_ratio"] or 4)) + 31) // 32)
    ranks = {n: rwkv7_reference.lora_rank(cfg, n, D, hd) for n in
             ("decay_low_rank_dim", "a_low_rank_dim", "v_low_rank_dim", "gate_low_rank_dim")}
    g = Gen(rng)
    nb = cfg["norm_bias"]

    def ln(prefix):
        g.norm(prefix + ".weight", D, prefix + ".bias" if nb else None)
    g.w["model.embeddings.weight"] = rng.normal(size=(V, D))
    ln("model.norm")
    if not cfg["tie_word_embeddings"]:
        g.lin("lm_head.weight", V, D)
    for i in range(L):
        p = f"model.layers.{i}."
        a = p + "attn."
        if i == 0 and cfg["norm_first"]:
            ln(p + "pre_norm")
        ln(p + "attn_norm")
        ln(p + "ffn_norm")
        mixes = rng.uniform(0.0, 1.0, (6, D))
        if name == "rwkv7_legacy_x_x":
            g.w[a + "x_x"] = mixes
        else:
            for j, n in enumerate("rwkvag"):
                g.w[a + f"x_{n}"] = mixes[j].reshape(1, 1, D)
        g.w[a + "k_k"] = rng.uniform(0.5, 1.0, D)
        g.w[a + "k_a"] = rng.uniform(0.5, 1.5, D)
        g.w[a + "r_k"] = rng.normal(0.0, 0.3, (H, hd))
        g.lin(a + "r_proj.weight", D, D)
        g.lin(a + "k_proj.weight", D, D)
        g.lin(a + "v_proj.weight", Dv, D)
        g.lin(a + "o_proj.weight", D, Dv)
        rw, ra, rv, rg = (ranks[n] for n in ("decay_low_rank_dim", "a_low_rank_dim", "v_low_rank_dim",
                                             "gate_low_rank_dim"))
        g.lin(a + "w_lora.lora.0.weight", rw, D, gain=2.0)
        g.lin(a + "w_lora.lora.2.weight", D, rw)
        g.w[a + "w_lora.lora.2.bias"] = rng.uniform(-5.0, 2.0, D)     # decays from ~1 to e^-0.53
        g.lin(a + "a_lora.lora.0.weight", ra, D)
        g.lin(a + "a_lora.lora.2.weight", D, ra)
        g.w[a + "a_lora.lora.2.bias"] = rng.normal(0.0, 1.0, D)
        if i != 0:
            g.lin(a + "v_lora.lora.0.weight", rv, D)
            g.lin(a + "v_lora.lora.2.weight", Dv, rv)
            g.w[a + "v_lora.lora.2.bias"] = rng.normal(0.0, 1.0, Dv)
        g.lin(a + "g_lora.lora.0.weight", rg, D, gain=2.0)
        g.lin(a + "g_lora.lora.2.weight", Dv, rg)
        g.w[a + "g_norm.weight"] = 1.0 + 0.1 * rng.normal(size=Dv)
        g.w[a + "g_norm.bias"] = 0.1 * rng.normal(size=Dv)
        g.w[p + "ffn.x_k"] = rng.uniform(0.0, 1.0, D)
        g.lin(p + "ffn.key.weight", I, D)
        g.lin(p + "ffn.value.weight", D, I, gain=0.5)
    return g.w


def mamba2_weights(name, c, rng):
    cfg = mamba2_reference.parse_config(c)
    hf = cfg["_flavour"] == "hf"
    D, L, V = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
    Din = int(cfg["expand"] * D)
    H, G, N, K = Din // cfg["head_dim"], cfg["n_groups"], cfg["state_size"], cfg["conv_kernel"]
    cd = Din + 2 * G * N
    g = Gen(rng)
    g.w["backbone.embeddings.weight"] = rng.normal(size=(V, D))
    g.norm("backbone.norm_f.weight", D)
    if not cfg["tie_word_embeddings"]:
        g.lin("lm_head.weight", V, D)
    for i in range(L):
        p = f"backbone.layers.{i}."
        m = p + "mixer."
        g.norm(p + "norm.weight", D)
        w = rng.normal(0.0, 1.0 / np.sqrt(D), (2 * Din + 2 * G * N + H, D))
        w[-H:] *= 0.5                                          # dt rows
        g.w[m + "in_proj.weight"] = w
        g.w[m + "conv1d.weight"] = rng.normal(0.0, 1.0 / np.sqrt(K), (cd, 1, K))
        if cfg["use_conv_bias"]:
            g.w[m + "conv1d.bias"] = 0.1 * rng.normal(size=cd)
        if cfg["use_bias"]:
            g.w[m + "in_proj.bias"] = 0.1 * rng.normal(size=w.shape[0])
            g.w[m + "out_proj.bias"] = 0.1 * rng.normal(size=D)
        dt = np.exp(rng.uniform(np.log(1e-3), np.log(1e-1), H))
        g.w[m + "dt_bias"] = dt + np.log(-np.expm1(-dt))        # inverse softplus
        g.w[m + "A_log"] = np.log(rng.uniform(1.0, 16.0, H))
        g.w[m + "D"] = rng.normal(1.0, 0.3, Din if (not hf and cfg["D_has_hdim"]) else H)
        if hf or cfg["rmsnorm"]:
            g.norm(m + "norm.weight", Din)
        g.lin(m + "out_proj.weight", D, Din)
    return g.w


def linear_attn_weights(name, c, rng):
    cfg = based_reference.ref.parse_config(dict(c, feature_map="identity"))
    fm = c["feature_map"]
    D, L, V = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
    I = based_reference.ref.intermediate_size(cfg)
    H = cfg["num_heads"]
    Gk = H // (cfg["num_kv_heads"] or H)
    kd, vd = int(D * cfg["expand_k"]), int(D * cfg["expand_v"])
    dk, dv = kd // H, vd // H
    g = Gen(rng)
    g.w["model.embeddings.weight"] = rng.normal(size=(V, D))
    g.norm("model.norm.weight", D)
    if not cfg["tie_word_embeddings"]:
        g.lin("lm_head.weight", V, D)
    for i in range(L):
        p = f"model.layers.{i}."
        a = p + "attn."
        g.norm(p + "attn_norm.weight", D)
        g.norm(p + "mlp_norm.weight", D)
        g.lin(p + "mlp.gate_proj.weight", I, D)
        g.lin(p + "mlp.up_proj.weight", I, D)
        g.lin(p + "mlp.down_proj.weight", D, I)
        g.lin(a + "q_proj.weight", kd, D, gain=1.5)
        g.lin(a + "k_proj.weight", kd // Gk, D, gain=1.5)
        g.lin(a + "v_proj.weight", vd // Gk, D)
        g.lin(a + "o_proj.weight", D, vd)
        if cfg["elementwise_affine"]:
            g.norm(a + "norm.weight", dv)
        if fm == "rebased":
            if c.get("use_gamma", True):
                g.w[a + "feature_map.gamma"] = 1.0 + 0.2 * rng.normal(size=dk)
            if c.get("use_beta", True):
                g.w[a + "feature_map.beta"] = 0.3 * rng.normal(size=dk)
    return g.w


FAMILY = {"rwkv7": (rwkv7_weights, rwkv7_reference.Model), "mamba2": (mamba2_weights, mamba2_reference.Model),
          "linear_attn": (linear_attn_weights, based_reference.Model)}
MIN_MARGIN = {"la_norm_q": 0.02, "la_norm_k": 0.02, "la_norm_feature_map": 2e-3}


def margins_ok(model):
    for name, vals in getattr(model, "diag", {}).items():
        for mn, med in vals:
            if not (mn > MIN_MARGIN.get(name, 0.0) * med):
                return False
    return True


def full_config(name, base, over, dtype):
    cfg = dict(base, **over)
    cfg["architectures"] = [ARCH[cfg["model_type"]]]
    cfg["torch_dtype"] = TORCH_DTYPE[dtype]
    if name == "mamba2_hf_default":   # every field, as transformers' save_pretrained writes it
        d = dict(mamba2_reference.HF_DEFAULTS)
        d.update(cfg)
        d.update(bos_token_id=0, eos_token_id=2, pad_token_id=1, initializer_range=0.1, time_step_rank=2,
                 time_step_min=0.001, time_step_max=0.1, time_step_floor=1e-4, rescale_prenorm_residual=False,
                 use_cache=True, transformers_version="4.57.1")
        cfg = d
    return cfg


def write_case(d, name, cfg, weights, dtype, tokens, model_cls):
    os.makedirs(d, exist_ok=True)
    save_file(weights, os.path.join(d, "model.safetensors"), dtype=dtype, metadata={"format": "pt"})
    stored, dts, _ = load_file(os.path.join(d, "model.safetensors"))
    assert set(dts.values()) == {dtype}
    model = model_cls(cfg, stored, strict=True)
    logits, _ = model.forward(tokens)
    return model, logits


def finish_case(d, cfg, dtype, tokens, logits):
    std = float(logits.std())
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)   # float('inf') is written as Infinity (as HF does)
    np.ascontiguousarray(logits, dtype="<f8").tofile(os.path.join(d, "expected_logits.f64"))
    exp = {"tokens": [int(t) for t in tokens], "vocab_size": int(cfg["vocab_size"]), "weights_dtype": dtype,
           "logits_file": "expected_logits.f64", "model_type": cfg["model_type"], "num_tokens": len(tokens),
           "logits_shape": [len(tokens), int(cfg["vocab_size"])], "logits_std": std}
    with open(os.path.join(d, "expected.json"), "w") as f:
        json.dump(exp, f)
    return std


def build_case(out, name, base, over, dtype):
    cfg = full_config(name, base, over, dtype)
    make_w, model_cls = FAMILY[cfg["model_type"]]
    d = os.path.join(out, name)
    seed0 = zlib.crc32(name.encode())
    for attempt in range(50):
        rng = np.random.default_rng(seed0 + 7919 * attempt)
        weights = make_w(name, cfg, rng)
        tokens = rng.integers(0, cfg["vocab_size"], T_TOKENS)
        model, logits = write_case(d, name, cfg, weights, dtype, tokens, model_cls)
        t2 = tokens.copy()
        t2[0] = (t2[0] + 1) % cfg["vocab_size"]
        memory = float(np.abs(model.forward(t2)[0][-1] - logits[-1]).max())
        if margins_ok(model) and np.all(np.isfinite(logits)) and memory > 1e-3 and logits.std() > 0.3:
            break
    else:
        raise RuntimeError(f"{name}: no weights with safe margins / memory / spread")
    return finish_case(d, cfg, dtype, tokens, logits), attempt


def build_rwkvcpp_case(out, shared):
    """rwkv.cpp's tiny RWKV-7, converted by models/convert/rwkv7.py."""
    import rwkv7 as convert   # models/convert/rwkv7.py
    src = os.path.join(shared, RWKVCPP_TINY)
    d = os.path.join(out, "rwkv7_rwkvcpp_tiny")
    cfg = convert.convert(src, d, log=lambda *_: None)
    tokens = np.frombuffer(TINY_TEXT, dtype=np.uint8).astype(np.int64)
    logits, _ = rwkv7_reference.load_model(d).forward(tokens)
    return finish_case(d, cfg, "F32", tokens, logits)


def default_shared():
    return os.path.join(ROOT, "..", "shared")


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--shared", default=default_shared())
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()
    names = []
    for name, base, over, dtype in CASES:
        if args.only and name not in args.only:
            continue
        t1 = time.time()
        std, attempt = build_case(args.out, name, base, over, dtype)
        names.append(name)
        print(f"{name:32s} {dtype:5s} logits std {std:7.3f}  seed-try {attempt}  {time.time() - t1:5.2f}s")
    if not args.only or "rwkv7_rwkvcpp_tiny" in args.only:
        if os.path.isfile(os.path.join(args.shared, RWKVCPP_TINY)):
            t1 = time.time()
            std = build_rwkvcpp_case(args.out, args.shared)
            names.append("rwkv7_rwkvcpp_tiny")
            print(f"{'rwkv7_rwkvcpp_tiny':32s} F32   logits std {std:7.3f}  (rwkv.cpp tiny, converted)  "
                  f"{time.time() - t1:5.2f}s")
        else:
            print(f"skip rwkv7_rwkvcpp_tiny: {os.path.join(args.shared, RWKVCPP_TINY)} not found "
                  "(the shared fixtures are absent)")
    with open(os.path.join(args.out, "cases.txt"), "w") as f:
        f.write("".join(n + "\n" for n in names))
    print(f"{len(names)} cases written to {args.out} in {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
