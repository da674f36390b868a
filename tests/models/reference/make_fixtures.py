#!/usr/bin/python3
"""Write tiny random fla-format checkpoints and their expected logits.

usage: /usr/bin/python3 make_fixtures.py --out DIR [--only CASE ...]

DIR/cases.txt                      case names, one per line
DIR/<case>/config.json             fla config (model_type, architectures, the fields set below)
DIR/<case>/model.safetensors       weights (F32, BF16 or F16; fla tensor names)
DIR/<case>/expected.json           {"tokens", "vocab_size", "weights_dtype", "logits_file", ...}
DIR/<case>/expected_logits.f64     raw little-endian float64 [T, vocab] row-major, computed by
                                   fla_reference.py from the weights AS STORED (read back from file)
"""
import argparse
import json
import os
import sys
import time
import zlib

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fla_reference as ref  # noqa: E402
from safetensors_io import load_file, save_file  # noqa: E402

T_TOKENS = 70  # crosses fla's 64-token chunk boundary (and its <=64 recurrent-kernel switch)
TORCH_DTYPE = {"F32": "float32", "BF16": "bfloat16", "F16": "float16"}

GDN = dict(model_type="gated_deltanet", hidden_size=64, num_hidden_layers=2, vocab_size=96,
           head_dim=16, num_heads=2, expand_v=2.0)
DN = dict(model_type="delta_net", hidden_size=48, num_hidden_layers=2, vocab_size=80, num_heads=3)
GLA = dict(model_type="gla", hidden_size=64, num_hidden_layers=2, vocab_size=72, num_heads=2)
RET = dict(model_type="retnet", hidden_size=48, num_hidden_layers=2, vocab_size=64, num_heads=3)
LA = dict(model_type="linear_attn", hidden_size=32, num_hidden_layers=2, vocab_size=64, num_heads=2)

# name -> (base, overrides, storage dtype)
CASES = [
    ("gdn_default", GDN, {}, "F32"),
    ("gdn_nogate", GDN, dict(use_gate=False), "F32"),
    ("gdn_noconv", GDN, dict(use_short_conv=False), "F32"),
    ("gdn_negeig", GDN, dict(allow_neg_eigval=True), "F32"),
    ("gdn_gva", GDN, dict(num_v_heads=4, expand_v=1.5), "F32"),
    # Tied, with a stray lm_head.weight in the file (STRAY_HEAD): HF re-ties it to the embeddings.
    ("gdn_tied", GDN, dict(tie_word_embeddings=True), "F32"),
    ("gdn_bf16", GDN, {}, "BF16"),
    ("gdn_f16", GDN, {}, "F16"),
    ("gdn_intermediate", GDN, dict(intermediate_size=96, hidden_ratio=3), "F32"),
    ("gdn_hidden_ratio", GDN, dict(hidden_ratio=13), "F32"),  # I = int(64*13*2/3)=554 -> 768
    ("gdn_conv2", GDN, dict(conv_size=2, norm_eps=1e-5), "F32"),
    ("gdn_hfconfig", GDN, {}, "F32"),  # config.json spelled out in full, HF style
    ("deltanet_default", DN, {}, "F32"),
    ("deltanet_relu_sum", DN, dict(qk_activation="relu", qk_norm="sum"), "F32"),
    ("deltanet_elu", DN, dict(qk_activation="elu"), "F32"),
    ("deltanet_elu_sum", DN, dict(qk_activation="elu", qk_norm="sum"), "F32"),
    ("deltanet_identity", DN, dict(qk_activation="identity"), "F32"),
    ("deltanet_gate", DN, dict(use_gate=True), "F32"),
    ("deltanet_nobeta", DN, dict(use_beta=False), "F32"),
    ("deltanet_noconv", DN, dict(use_short_conv=False), "F32"),
    ("deltanet_noconv_elu", DN, dict(use_short_conv=False, qk_activation="elu"), "F32"),
    ("deltanet_negeig", DN, dict(allow_neg_eigval=True), "F32"),
    ("deltanet_expand", DN, dict(expand_k=0.5, expand_v=1.5), "F32"),
    ("deltanet_bf16", DN, {}, "BF16"),
    ("gla_default", GLA, {}, "F32"),
    ("gla_conv", GLA, dict(use_short_conv=True), "F32"),
    ("gla_kvgroups", GLA, dict(num_heads=4, num_kv_heads=2), "F32"),
    ("gla_featuremap_relu_clamp", GLA, dict(feature_map="relu", clamp_min=-0.05), "F32"),
    ("gla_nogate", GLA, dict(use_output_gate=False), "F32"),
    ("gla_nonfused", GLA, dict(fuse_norm=False), "F32"),
    ("gla_noaffine", GLA, dict(elementwise_affine=False), "F32"),
    ("gla_tied_bf16", GLA, dict(tie_word_embeddings=True), "BF16"),
    ("retnet_default", RET, {}, "F32"),
    ("retnet_kvgroups", RET, dict(hidden_size=64, num_heads=4, num_kv_heads=2), "F32"),
    ("retnet_nogate", RET, dict(use_output_gate=False), "F32"),
    ("retnet_nonfused", RET, dict(fuse_norm=False), "F32"),
    ("retnet_featuremap", RET, dict(feature_map="swish"), "F32"),
    ("linear_attn_hadamard", LA, dict(feature_map="elementwise_product"), "F32"),
    ("linear_attn_hedgehog", LA, dict(feature_map="hedgehog"), "F32"),
    ("linear_attn_t2r", LA, dict(feature_map="t2r"), "F32"),
    ("linear_attn_dpfp", LA, dict(feature_map="dpfp"), "F32"),
    ("linear_attn_elu", LA, dict(feature_map="elu"), "F32"),
    ("linear_attn_relu", LA, dict(feature_map="relu"), "F32"),
    ("linear_attn_identity", LA, dict(feature_map="identity"), "F32"),
    ("linear_attn_default", LA, {}, "F32"),  # feature_map omitted -> elementwise_product
    ("linear_attn_normqk", LA, dict(feature_map="elu", norm_q=True, norm_k=True), "F32"),
    ("linear_attn_normfm", LA, dict(feature_map="identity", norm_feature_map=True), "F32"),
    ("linear_attn_normfm_hedgehog", LA, dict(feature_map="hedgehog", norm_feature_map=True), "F32"),
    ("linear_attn_tied", LA, dict(feature_map="hedgehog", tie_feature_map_qk=True), "F32"),
    ("linear_attn_kvgroups", LA, dict(hidden_size=64, num_heads=4, num_kv_heads=2, feature_map="t2r"), "F32"),
    ("linear_attn_noaffine", LA, dict(feature_map="elu", elementwise_affine=False), "F32"),
]


# --------------------------------------------------------------------------------------
# random weights, enumerated independently of fla_reference's loader (cross-checked by strict load)
# --------------------------------------------------------------------------------------
class Gen:
    def __init__(self, rng):
        self.rng, self.w = rng, {}

    def lin(self, name, out, inp, gain=1.0, bias=False):
        self.w[name + ".weight"] = self.rng.normal(0.0, gain / np.sqrt(inp), (out, inp))
        if bias:
            self.w[name + ".bias"] = self.rng.normal(0.0, 0.5, (out,))

    def norm(self, name, n):
        self.w[name] = 1.0 + 0.1 * self.rng.normal(size=n)

    def conv(self, name, C, W):
        self.w[name] = self.rng.normal(0.0, 1.0 / np.sqrt(W), (C, 1, W))


STRAY_HEAD = {"gdn_tied"}


def make_weights(cfg, rng, stray_head=False):
    c = ref.parse_config(cfg)
    mt, D, V, I = c["model_type"], c["hidden_size"], c["vocab_size"], ref.intermediate_size(c)
    g = Gen(rng)
    g.w["model.embeddings.weight"] = rng.normal(size=(V, D))
    g.norm("model.norm.weight", D)
    if not c["tie_word_embeddings"] or stray_head:
        g.lin("lm_head", V, D)
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        a = p + "attn."
        g.norm(p + "attn_norm.weight", D)
        g.norm(p + "mlp_norm.weight", D)
        g.lin(p + "mlp.gate_proj", I, D)
        g.lin(p + "mlp.up_proj", I, D)
        g.lin(p + "mlp.down_proj", D, I)
        W = c.get("conv_size", 4)
        if mt == "gated_deltanet":
            H = c["num_heads"]
            HV = c["num_v_heads"] or H
            dk = c["head_dim"]
            dv = int(dk * c["expand_v"])
            kd, vd = H * dk, HV * dv
            g.lin(a + "q_proj", kd, D)
            g.lin(a + "k_proj", kd, D)
            g.lin(a + "v_proj", vd, D)
            g.lin(a + "a_proj", HV, D, gain=0.5)
            g.lin(a + "b_proj", HV, D)
            g.w[a + "A_log"] = np.log(rng.uniform(1.0, 16.0, HV))
            dt = np.exp(rng.uniform(np.log(1e-3), np.log(1e-1), HV))
            g.w[a + "dt_bias"] = dt + np.log(-np.expm1(-dt))  # inverse softplus
            if c["use_short_conv"]:
                for n, C in (("q", kd), ("k", kd), ("v", vd)):
                    g.conv(a + f"{n}_conv1d.weight", C, W)
            if c["use_gate"]:
                g.lin(a + "g_proj", vd, D)
            g.norm(a + "o_norm.weight", dv)
            g.lin(a + "o_proj", D, vd)
        elif mt == "delta_net":
            H = c["num_heads"]
            kd, vd = int(D * c["expand_k"]), int(D * c["expand_v"])
            g.lin(a + "q_proj", kd, D)
            g.lin(a + "k_proj", kd, D)
            g.lin(a + "v_proj", vd, D)
            if c["use_beta"]:
                g.lin(a + "b_proj", H, D)
            if c["use_short_conv"]:
                for n, C in (("q", kd), ("k", kd), ("v", vd)):
                    g.conv(a + f"{n}_conv1d.weight", C, W)
            if c["use_gate"]:
                g.lin(a + "g_proj", vd, D)
            g.norm(a + "o_norm.weight", vd // H)
            g.lin(a + "o_proj", D, vd)
        else:  # gla / retnet / linear_attn
            H = c["num_heads"]
            Gk = H // (c["num_kv_heads"] or H)
            kd, vd = int(D * c["expand_k"]), int(D * c["expand_v"])
            dk, dv = kd // H, vd // H
            g.lin(a + "q_proj", kd, D)
            g.lin(a + "k_proj", kd // Gk, D)
            g.lin(a + "v_proj", vd // Gk, D)
            g.lin(a + "o_proj", D, vd)
            if mt == "gla" and c["use_short_conv"]:
                for n, C in (("q", kd), ("k", kd // Gk), ("v", vd // Gk)):
                    g.conv(a + f"{n}_conv1d.weight", C, W)
            if mt == "gla":
                g.lin(a + "gk_proj.0", 16, D)
                g.lin(a + "gk_proj.1", kd // Gk, 16, gain=1.5)
                g.w[a + "gk_proj.1.bias"] = rng.uniform(-2.0, 5.0, kd // Gk)
            if mt in ("gla", "retnet"):
                if c["use_output_gate"]:
                    g.lin(a + "g_proj", vd, D)
                fused = c["fuse_norm"] and c["use_output_gate"] and c["hidden_act"] == "swish"
                if c["elementwise_affine"]:
                    g.norm(a + ("g_norm_swish_gate.weight" if fused else "g_norm.weight"), dv)
            if mt == "linear_attn":
                if c["elementwise_affine"]:
                    g.norm(a + "norm.weight", dv)
                fm = c["feature_map"]
                sides = ["q", "k"]
                for side in sides:
                    n = a + f"feature_map_{side}."
                    if fm == "elementwise_product":
                        g.lin(n + "layer1", dk, dk, bias=True)
                        g.lin(n + "layer2", dk, dk, bias=True)
                    elif fm == "hedgehog":
                        g.lin(n + "layer", dk, dk, bias=True)
                    elif fm == "t2r":
                        g.lin(n + "layer", dk, dk)
                if c["tie_feature_map_qk"] and fm in ("hedgehog", "t2r", "elementwise_product"):
                    # one shared module: torch's state_dict lists it under both names (equal values)
                    for k in [k for k in g.w if k.startswith(a + "feature_map_k.")]:
                        g.w[k] = g.w[k.replace("feature_map_k.", "feature_map_q.")]
    return g.w


# sensitive denominators must stay clear of zero so fp32 engines agree on signs
MIN_MARGIN = {"delta_sum_q": 0.02, "delta_sum_k": 0.02, "la_norm_q": 0.02, "la_norm_k": 0.02,
              "la_norm_feature_map": 2e-3}


def margins_ok(model):
    for name, vals in model.diag.items():
        for mn, med in vals:
            if not (mn > MIN_MARGIN.get(name, 0.0) * med):
                return False
    return True


def build_case(out, name, base, over, dtype):
    cfg = dict(base, **over)
    cfg["architectures"] = [ref.ARCHITECTURES[cfg["model_type"]]]
    cfg["torch_dtype"] = TORCH_DTYPE[dtype]
    if name == "gdn_hfconfig":  # everything spelled out (explicit nulls), as save_pretrained writes
        cfg = dict(ref.DEFAULTS[cfg["model_type"]], **cfg)
        cfg.update(use_cache=True, initializer_range=0.02, fuse_cross_entropy=True,
                   fuse_linear_cross_entropy=False, use_l2warp=False, max_position_embeddings=2048,
                   transformers_version="4.56.0")
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    seed0 = zlib.crc32(name.encode())
    for attempt in range(50):
        rng = np.random.default_rng(seed0 + 7919 * attempt)
        weights = make_weights(cfg, rng, stray_head=name in STRAY_HEAD)
        tokens = rng.integers(0, cfg["vocab_size"], T_TOKENS)
        save_file(weights, os.path.join(d, "model.safetensors"), dtype=dtype, metadata={"format": "pt"})
        stored, dts, _ = load_file(os.path.join(d, "model.safetensors"))
        assert set(dts.values()) == {dtype}
        model = ref.Model(cfg, stored, strict=True)
        logits, _ = model.forward(tokens)
        # the last logits must still depend on token 0 (state carried across the 64-token chunk)
        t2 = tokens.copy()
        t2[0] = (t2[0] + 1) % cfg["vocab_size"]
        memory = float(np.abs(model.forward(t2)[0][-1] - logits[-1]).max())
        if margins_ok(model) and np.all(np.isfinite(logits)) and memory > 1e-3:
            break
    else:
        raise RuntimeError(f"{name}: could not find weights with safe margins")
    std = float(logits.std())
    assert std > 0.3, f"{name}: logits std {std} too small"
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
    np.ascontiguousarray(logits, dtype="<f8").tofile(os.path.join(d, "expected_logits.f64"))
    exp = {"tokens": [int(t) for t in tokens], "vocab_size": int(cfg["vocab_size"]),
           "weights_dtype": dtype, "logits_file": "expected_logits.f64",
           "model_type": cfg["model_type"], "num_tokens": len(tokens),
           "logits_shape": [len(tokens), int(cfg["vocab_size"])], "logits_std": std}
    with open(os.path.join(d, "expected.json"), "w") as f:
        json.dump(exp, f)
    return std, attempt


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", nargs="*")
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
    with open(os.path.join(args.out, "cases.txt"), "w") as f:
        f.write("".join(n + "\n" for n in names))
    print(f"{len(names)} cases written to {args.out} in {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
