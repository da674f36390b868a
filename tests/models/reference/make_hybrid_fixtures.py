#!/usr/bin/python3
"""Write tiny random hybrid checkpoints (Qwen3.5 in transformers' layouts, fla with `attn` layers)
and their expected logits, in the fixture format of make_fixtures.py.

usage: /usr/bin/python3 make_hybrid_fixtures.py --out DIR [--only CASE ...]

DIR/cases.txt                   case names, one per line
DIR/<case>/config.json          as transformers / fla write it
DIR/<case>/model.safetensors    or model.safetensors.index.json + model-0000{1,2}-of-00002.safetensors
DIR/<case>/expected.json        {"tokens", "vocab_size", "weights_dtype", "logits_file", ...} (see README.md)
DIR/<case>/expected_logits.f64  raw little-endian float64 [T, vocab], computed by the reference from
                                the weights AS STORED (read back from the files)
"""
import argparse
import json
import os
import re
import sys
import time
import zlib

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fla_reference as fla  # noqa: E402
import make_fixtures  # noqa: E402
import qwen3_5_reference as qwen  # noqa: E402
from safetensors_io import e4m3_decode, e4m3_encode, round_to_dtype, save_file  # noqa: E402

T_TOKENS = 70          # > 64: crosses the 64-token chunk boundary of the GDN kernels
SPLITS = (37, 64)      # the self-check (and the C++ test) prefill 37, then 27, then 6 single tokens
TRANSFORMERS_VERSION = "5.23.0"
DTYPE_NAME = {"F32": "float32", "BF16": "bfloat16", "F16": "float16"}

# ---- Qwen3.5 text config, spelled out as a published checkpoint's text_config (tiny sizes) -------
QWEN_TEXT = dict(
    attention_bias=False, attention_dropout=0.0, attn_output_gate=True, bos_token_id=None, eos_token_id=90,
    full_attention_interval=4, head_dim=32, hidden_act="silu", hidden_size=64, initializer_range=0.02,
    intermediate_size=96, layer_types=["linear_attention", "linear_attention", "full_attention", "linear_attention"],
    linear_conv_kernel_dim=4, linear_key_head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4,
    linear_value_head_dim=16, mamba_ssm_dtype="float32", max_position_embeddings=4096, mlp_only_layers=[],
    model_type="qwen3_5_text", mtp_num_hidden_layers=1, mtp_use_dedicated_embeddings=False,
    num_attention_heads=4, num_hidden_layers=4, num_key_value_heads=2, pad_token_id=None, rms_norm_eps=1e-6,
    rope_parameters=dict(mrope_interleaved=True, mrope_section=[2, 1, 1], partial_rotary_factor=0.25,
                         rope_theta=10000000.0, rope_type="default"),
    tie_word_embeddings=False, use_cache=True, vocab_size=96)
QWEN_VISION = dict(deepstack_visual_indexes=[], depth=1, hidden_act="gelu_pytorch_tanh", hidden_size=16,
                   in_channels=3, initializer_range=0.02, intermediate_size=32, model_type="qwen3_5_vision",
                   num_heads=2, num_position_embeddings=16, out_hidden_size=64, patch_size=2,
                   spatial_merge_size=2, temporal_patch_size=2)
# the minimal config: everything at transformers' defaults except the sizes
QWEN_MINIMAL = dict(model_type="qwen3_5_text", architectures=["Qwen3_5ForCausalLM"], hidden_size=48,
                    intermediate_size=80, num_hidden_layers=4, num_attention_heads=2, num_key_value_heads=2,
                    head_dim=24, vocab_size=80, linear_key_head_dim=12, linear_value_head_dim=12,
                    linear_num_key_heads=2, linear_num_value_heads=2)

# what a Qwen3.5 MoE text config has instead of intermediate_size (tiny sizes)
QWEN_MOE = dict(intermediate_size=None, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=24,
                shared_expert_intermediate_size=32, router_aux_loss_coef=0.001, output_router_logits=False)

# Qwen3-Next (tiny): the Qwen3.5 text fields plus its MoE and dense-MLP fields
QWEN_NEXT = dict(QWEN_MOE, model_type="qwen3_next", intermediate_size=40, decoder_sparse_step=1,
                 norm_topk_prob=True, mlp_only_layers=[])

FLA_GDN = dict(model_type="gated_deltanet", hidden_size=64, num_hidden_layers=3, vocab_size=96, head_dim=16,
               num_heads=2, expand_v=2.0)

# fp8 checkpoints: the projections in F8_E4M3 with scales, the rest in the case's dtype. FP8
# options: block (weight_block_size; not dividing the tiny sizes, so that edge blocks are partial),
# or strategy "channel" / "tensor"; scale dtype; static activation scales; method "fp8" (the
# default: transformers' FineGrainedFP8 with blocks, vLLM's per-tensor format without) or
# "compressed-tensors" (llm-compressor's float-quantized).
FP8_NOT_CONVERTED = ["lm_head", "model.embed_tokens", "linear_attn.in_proj_a", "linear_attn.in_proj_b",
                     "linear_attn.in_proj_ba", "mlp.gate", "mlp.shared_expert_gate"]

# name -> (kind, overrides, storage dtype, options)
#   kind: qwen_text | qwen_vlm | qwen_minimal | fla
#   options: top_tie (VLM top-level tie_word_embeddings), sharded, mixed (F32 A_log + norms),
#            per_expert, fp8 (dict: block, scale_dtype, static), fp8_on_load (also the logits of the
#            weights quantized on load as linfer's --quantization fp8 does: FP8_ON_LOAD)
CASES = [
    ("qwen35_text_f32", "qwen_text", {}, "F32", dict(fp8_on_load=True)),
    ("qwen35_text_bf16_tied", "qwen_text", dict(tie_word_embeddings=True), "BF16", {}),
    ("qwen35_text_gva1_tied", "qwen_text", dict(linear_num_value_heads=2, tie_word_embeddings=True,
                                                layer_types=["full_attention", "linear_attention",
                                                             "linear_attention", "full_attention"]), "F32", {}),
    ("qwen35_text_dkdv", "qwen_text", dict(linear_key_head_dim=8, linear_value_head_dim=20, linear_num_key_heads=3,
                                           linear_num_value_heads=6, linear_conv_kernel_dim=3,
                                           num_attention_heads=2, num_key_value_heads=1, head_dim=40,
                                           rope_parameters=dict(mrope_interleaved=True, mrope_section=[4, 3, 3],
                                                                partial_rotary_factor=0.5, rope_theta=10000.0,
                                                                rope_type="default")), "F32", {}),
    ("qwen35_text_attn_bias", "qwen_text", dict(attention_bias=True, rms_norm_eps=1e-5), "F32", {}),
    ("qwen35_text_interval2", "qwen_text", dict(layer_types=None, full_attention_interval=2), "F32", {}),
    ("qwen35_text_minimal", "qwen_minimal", {}, "F32", {}),
    ("qwen35_vlm_f32", "qwen_vlm", {}, "F32", dict(top_tie=False)),
    ("qwen35_vlm_bf16_tied", "qwen_vlm", dict(tie_word_embeddings=True), "BF16", dict(top_tie=True)),
    ("qwen35_vlm_toplevel_untied", "qwen_vlm", dict(tie_word_embeddings=True), "F32", dict(top_tie=False)),
    ("qwen35_vlm_sharded", "qwen_vlm", {}, "BF16", dict(top_tie=False, sharded=True)),
    ("qwen35_vlm_mixed_dtypes", "qwen_vlm", dict(tie_word_embeddings=True), "BF16", dict(top_tie=True, mixed=True)),
    # mixture of experts (Qwen3.5/3.6 MoE): fused experts in F32; per-expert tensors, multimodal, BF16
    ("qwen35moe_text_fused", "qwen_text", dict(QWEN_MOE, model_type="qwen3_5_moe_text"), "F32", {}),
    # the same shape for --quantization fp8's fused 3-D experts (its own seed: the quantized model's
    # routing must be clear too)
    ("qwen35moe_text_fused_q8", "qwen_text", dict(QWEN_MOE, model_type="qwen3_5_moe_text"), "F32",
     dict(fp8_on_load=True)),
    ("qwen35moe_vlm_bf16_per_expert", "qwen_vlm",
     dict(QWEN_MOE, model_type="qwen3_5_moe_text", num_experts=6, num_experts_per_tok=3,
          shared_expert_intermediate_size=16, tie_word_embeddings=True),
     "BF16", dict(top_tie=True, per_expert=True, fp8_on_load=True)),
    # Qwen3-Next: fused per-key-head GDN projections; a dense MLP where mlp_only_layers / the sparse
    # step say; norm_topk_prob both ways; per-expert tensors as its checkpoints have them
    ("qwen3next_f32", "qwen_next", dict(QWEN_NEXT, mlp_only_layers=[1]), "F32", dict(fp8_on_load=True)),
    ("qwen3next_bf16_step2_unnormed", "qwen_next",
     dict(QWEN_NEXT, decoder_sparse_step=2, norm_topk_prob=False, linear_num_value_heads=6, linear_num_key_heads=2,
          num_experts=5, num_experts_per_tok=2), "BF16", dict(per_expert=True)),
    # block-wise fp8: dense text (blocks 24 x 40, F32 scales); MoE multimodal with fused experts
    # (transformers' `gate_up_proj_scale_inv`), BF16 scales and transformers' static activation scales;
    # Qwen3-Next per expert with BF16 scales (as Qwen's official -FP8 MoE checkpoints), sharded, its
    # fused in_proj_qkvz picked apart after dequantization
    ("qwen35_text_fp8", "qwen_text", {}, "BF16", dict(fp8=dict(block=[24, 40], scale_dtype="F32"))),
    ("qwen35moe_vlm_fp8_fused", "qwen_vlm", dict(QWEN_MOE, model_type="qwen3_5_moe_text"), "BF16",
     dict(top_tie=False, fp8=dict(block=[16, 16], scale_dtype="BF16", static=True))),
    ("qwen3next_fp8_per_expert", "qwen_next", dict(QWEN_NEXT, mlp_only_layers=[2]), "BF16",
     dict(per_expert=True, sharded=True, fp8=dict(block=[32, 24], scale_dtype="BF16"))),
    # compressed-tensors per output channel (scales [R, 1] in BF16, static input scales);
    # quant_method fp8 without blocks: one F32 scale a tensor, stored as shape []
    ("qwen35_text_fp8_ct_channel", "qwen_text", dict(tie_word_embeddings=True), "BF16",
     dict(fp8=dict(method="compressed-tensors", strategy="channel", scale_dtype="BF16", static=True))),
    ("qwen35moe_text_fp8_tensor", "qwen_text", dict(QWEN_MOE, model_type="qwen3_5_moe_text", num_experts=4),
     "BF16", dict(per_expert=True, fp8=dict(strategy="tensor", scale_dtype="F32"))),
    ("gdn_hybrid_full", "fla", dict(attn=dict(layers=[1], num_heads=4, num_kv_heads=2)), "F32", {}),
    ("gdn_hybrid_window", "fla", dict(attn=dict(layers=[0, 2], num_heads=4, window_size=16, qkv_bias=True,
                                                rope_theta=500000.0)), "F32", {}),
    ("gdn_hybrid_list_bf16", "fla", dict(num_hidden_layers=4, attn=[dict(layers=[1], num_heads=2, window_size=8),
                                                                    dict(layers=[3], num_heads=4, num_kv_heads=1)]),
     "BF16", {}),
]


# --------------------------------------------------------------------------------------
# configs
# --------------------------------------------------------------------------------------
def qwen_configs(kind, over, dtype, opts):
    """-> (config.json dict, text config dict used for the weights)."""
    if kind == "qwen_minimal":
        cfg = dict(QWEN_MINIMAL, **over)
        return cfg, cfg
    text = dict(QWEN_TEXT, **over)
    for k in ("layer_types", "intermediate_size"):
        if k in text and text[k] is None:
            del text[k]
    moe = text["model_type"] == "qwen3_5_moe_text"
    if kind == "qwen_next":
        for k in ("mtp_num_hidden_layers", "mtp_use_dedicated_embeddings", "attn_output_gate"):
            text.pop(k, None)
        cfg = dict(text, architectures=["Qwen3NextForCausalLM"], dtype=DTYPE_NAME[dtype],
                   transformers_version=TRANSFORMERS_VERSION)
        return cfg, text
    if kind == "qwen_text":
        cfg = dict(text, architectures=["Qwen3_5MoeForCausalLM" if moe else "Qwen3_5ForCausalLM"],
                   dtype=DTYPE_NAME[dtype],
                   transformers_version=TRANSFORMERS_VERSION)
        return cfg, text
    text["dtype"] = DTYPE_NAME[dtype]
    V = text["vocab_size"]
    cfg = dict(architectures=["Qwen3_5MoeForConditionalGeneration" if moe else "Qwen3_5ForConditionalGeneration"],
               image_token_id=V - 4, model_type="qwen3_5_moe" if moe else "qwen3_5",
               text_config=text, tie_word_embeddings=opts.get("top_tie", False),
               transformers_version=TRANSFORMERS_VERSION, video_token_id=V - 3,
               vision_config=dict(QWEN_VISION, out_hidden_size=text["hidden_size"]),
               vision_end_token_id=V - 1, vision_start_token_id=V - 2)
    return cfg, text


# --------------------------------------------------------------------------------------
# random weights, enumerated independently of qwen3_5_reference's loader (cross-checked by strict load)
# --------------------------------------------------------------------------------------
def moe_weights(g, rng, c, m, per_expert):
    """A Qwen3.5 MoE block's MLP under prefix m (`...mlp.`): router (large logits, so that the top k
    stand clear of the rest), shared expert and gate, experts fused or one tensor each."""
    D, E, EI, SI = c["hidden_size"], c["num_experts"], c["moe_intermediate_size"], c["shared_expert_intermediate_size"]
    g.lin(m + "gate", E, D, gain=6.0)
    g.lin(m + "shared_expert_gate", 1, D)
    g.lin(m + "shared_expert.gate_proj", SI, D)
    g.lin(m + "shared_expert.up_proj", SI, D)
    g.lin(m + "shared_expert.down_proj", D, SI)
    gate_up = rng.normal(0.0, 1.0 / np.sqrt(D), (E, 2 * EI, D))
    down = rng.normal(0.0, 1.0 / np.sqrt(EI), (E, D, EI))
    if not per_expert:
        g.w[m + "experts.gate_up_proj"], g.w[m + "experts.down_proj"] = gate_up, down
        return
    for e in range(E):
        g.w[f"{m}experts.{e}.gate_proj.weight"] = gate_up[e, :EI]
        g.w[f"{m}experts.{e}.up_proj.weight"] = gate_up[e, EI:]
        g.w[f"{m}experts.{e}.down_proj.weight"] = down[e]


def qwen_weights(cfg, text, rng, per_expert=False):
    c = qwen.parse_config(cfg)
    g = make_fixtures.Gen(rng)
    w = g.w
    D, V, I = c["hidden_size"], c["vocab_size"], c.get("intermediate_size")
    vlm = cfg["model_type"] in ("qwen3_5", "qwen3_5_moe")
    P = "model.language_model." if vlm else "model."

    def zc_norm(name, n):  # zero-centred RMSNorm weights (applied as 1 + w)
        w[name] = 0.15 * rng.normal(size=n)

    w[P + "embed_tokens.weight"] = rng.normal(size=(V, D))
    zc_norm(P + "norm.weight", D)
    if not c["tie_word_embeddings"]:
        g.lin("lm_head", V, D)
    Hk, HV, dk, dv, W = (c["linear_num_key_heads"], c["linear_num_value_heads"], c["linear_key_head_dim"],
                         c["linear_value_head_dim"], c["linear_conv_kernel_dim"])
    H, KVH, hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    for i, t in enumerate(c["layer_types"]):
        p = f"{P}layers.{i}."
        zc_norm(p + "input_layernorm.weight", D)
        zc_norm(p + "post_attention_layernorm.weight", D)
        if c["moe"] and i not in c["mlp_only_layers"] and (i + 1) % c["decoder_sparse_step"] == 0:
            moe_weights(g, rng, c, p + "mlp.", per_expert)
        else:
            g.lin(p + "mlp.gate_proj", I, D)
            g.lin(p + "mlp.up_proj", I, D)
            g.lin(p + "mlp.down_proj", D, I)
        if t == "linear_attention":
            a = p + "linear_attn."
            if c["next"]:  # fused per key head: [q_g | k_g | v_g (r heads) | z_g] and [b_g | a_g]
                r = HV // Hk
                g.lin(a + "in_proj_qkvz", Hk * (2 * dk + 2 * r * dv), D)
                g.lin(a + "in_proj_ba", 2 * HV, D)
                w[a + "in_proj_ba.weight"].reshape(Hk, 2 * r, D)[:, r:] *= 0.5  # the a rows, as in_proj_a's gain
            else:
                g.lin(a + "in_proj_qkv", 2 * Hk * dk + HV * dv, D)
                g.lin(a + "in_proj_z", HV * dv, D)
                g.lin(a + "in_proj_b", HV, D)
                g.lin(a + "in_proj_a", HV, D, gain=0.5)
            g.conv(a + "conv1d.weight", 2 * Hk * dk + HV * dv, W)
            dt = np.exp(rng.uniform(np.log(1e-3), np.log(1e-1), HV))
            w[a + "dt_bias"] = dt + np.log(-np.expm1(-dt))  # inverse softplus
            w[a + "A_log"] = np.log(rng.uniform(1.0, 16.0, HV))
            g.norm(a + "norm.weight", dv)  # plain weight (Qwen3_5RMSNormGated), around 1
            g.lin(a + "out_proj", D, HV * dv)
        else:
            a = p + "self_attn."
            bias = c["attention_bias"]
            g.lin(a + "q_proj", 2 * H * hd, D, bias=bias)
            g.lin(a + "k_proj", KVH * hd, D, bias=bias)
            g.lin(a + "v_proj", KVH * hd, D, bias=bias)
            g.lin(a + "o_proj", D, H * hd, bias=bias)
            zc_norm(a + "q_norm.weight", hd)
            zc_norm(a + "k_norm.weight", hd)
    if vlm:  # dummies the text model must ignore: one vision block + merger, one MTP layer
        vc = cfg["vision_config"]
        vh, vi, ps, tp, m = (vc["hidden_size"], vc["intermediate_size"], vc["patch_size"],
                             vc["temporal_patch_size"], vc["spatial_merge_size"])
        v = "model.visual."
        w[v + "patch_embed.proj.weight"] = rng.normal(size=(vh, vc["in_channels"], tp, ps, ps))
        w[v + "patch_embed.proj.bias"] = rng.normal(size=vh)
        w[v + "pos_embed.weight"] = rng.normal(size=(vc["num_position_embeddings"], vh))
        b = v + "blocks.0."
        for n in ("norm1", "norm2"):
            w[b + n + ".weight"], w[b + n + ".bias"] = np.ones(vh), np.zeros(vh)
        g.lin(b + "attn.qkv", 3 * vh, vh, bias=True)
        g.lin(b + "attn.proj", vh, vh, bias=True)
        g.lin(b + "mlp.linear_fc1", vi, vh, bias=True)
        g.lin(b + "mlp.linear_fc2", vh, vi, bias=True)
        w[v + "merger.norm.weight"], w[v + "merger.norm.bias"] = np.ones(vh), np.zeros(vh)
        g.lin(v + "merger.linear_fc1", vh * m * m, vh * m * m, bias=True)
        g.lin(v + "merger.linear_fc2", vc["out_hidden_size"], vh * m * m, bias=True)
        g.lin("mtp.fc", D, 2 * D)
        for n in ("mtp.norm.weight", "mtp.pre_fc_norm_embedding.weight", "mtp.pre_fc_norm_hidden.weight",
                  "mtp.layers.0.input_layernorm.weight", "mtp.layers.0.post_attention_layernorm.weight"):
            zc_norm(n, D)
        a = "mtp.layers.0.self_attn."
        g.lin(a + "q_proj", 2 * H * hd, D)
        g.lin(a + "k_proj", KVH * hd, D)
        g.lin(a + "v_proj", KVH * hd, D)
        g.lin(a + "o_proj", D, H * hd)
        zc_norm(a + "q_norm.weight", hd)
        zc_norm(a + "k_norm.weight", hd)
        if c["moe"]:
            moe_weights(g, rng, c, "mtp.layers.0.mlp.", per_expert)
        else:
            for n, shp in (("gate_proj", (I, D)), ("up_proj", (I, D)), ("down_proj", (D, I))):
                g.lin("mtp.layers.0.mlp." + n, *shp)
    return w


def fla_weights(cfg, rng):
    """make_fixtures' GDN weights for every layer, then fla Attention weights at the attn layers."""
    c = fla.parse_config(cfg)
    w = make_fixtures.make_weights(dict(cfg, attn=None), rng)
    g = make_fixtures.Gen(rng)
    D = c["hidden_size"]
    for i, spec in fla.normalize_attn(c["attn"], c["num_hidden_layers"]).items():
        a = f"model.layers.{i}.attn."
        for k in [k for k in w if k.startswith(a)]:
            del w[k]
        kv = spec["num_kv_heads"] * (D // spec["num_heads"])
        g.lin(a + "q_proj", D, D, bias=spec["qkv_bias"])
        g.lin(a + "k_proj", kv, D, bias=spec["qkv_bias"])
        g.lin(a + "v_proj", kv, D, bias=spec["qkv_bias"])
        g.lin(a + "o_proj", D, D)
    w.update(g.w)
    return w


# --------------------------------------------------------------------------------------
# writing
# --------------------------------------------------------------------------------------
def fp8_quantized(name, w):
    """Which tensors an fp8 checkpoint stores in F8_E4M3: the projections (and fused experts)."""
    if name.endswith(".experts.gate_up_proj") or name.endswith(".experts.down_proj"):
        return True
    return (w.ndim == 2 and re.search(r"proj\w*\.weight$", name) is not None
            and not any(name.endswith(m + ".weight") for m in FP8_NOT_CONVERTED))


def fp8_quantize(weights, fp8):
    """-> (weights with F8_E4M3 bit patterns and scales, per-name dtypes of both). Each scale is the
    max |w| / 448 of its block (row, tensor) rounded to the scale dtype; the fp8 values are
    w / scale rounded."""
    strategy = "block" if "block" in fp8 else fp8["strategy"]
    suffix = "_scale_inv" if strategy == "block" and fp8.get("method", "fp8") == "fp8" else "_scale"
    out, dts = {}, {}
    for name, w in weights.items():
        if not fp8_quantized(name, w):
            out[name] = w
            continue
        R, C = w.shape[-2:]
        br, bc = fp8["block"] if strategy == "block" else (1, C) if strategy == "channel" else (R, C)
        nr, nc = -(-R // br), -(-C // bc)
        padded = np.zeros(w.shape[:-2] + (nr * br, nc * bc))
        padded[..., :R, :C] = w
        amax = np.abs(padded.reshape(w.shape[:-2] + (nr, br, nc, bc))).max(axis=(-3, -1))
        scale = round_to_dtype(np.where(amax > 0, amax / 448.0, 1.0), fp8["scale_dtype"])
        scale = np.where(scale > 0, scale, 1.0)  # a block so small that its scale rounds to 0
        full = np.repeat(np.repeat(scale, br, axis=-2), bc, axis=-1)[..., :R, :C]
        out[name], dts[name] = e4m3_encode(w / full), "F8_E4M3"
        if strategy == "tensor" and w.ndim == 2:
            scale = scale.reshape(())  # as vLLM's per-tensor checkpoints store it
        sname = name + ("_scales_inv" if w.ndim == 3 and fp8.get("plural") else suffix)
        out[sname], dts[sname] = scale, fp8["scale_dtype"]
        if fp8.get("static"):  # compressed-tensors' / vLLM's `input_scale`, transformers' names
            act = (name[:-len("weight")] + "input_scale" if fp8.get("method") == "compressed-tensors"
                   else name[:-len("weight")] + "activation_scale" if w.ndim == 2 else name + "_activation_scale")
            out[act], dts[act] = np.float64(0.05), "F32"
    return out, dts


# linfer's `--quantization fp8` (models/fp8.h QuantizeFp8): the tensors an fp8 checkpoint would
# quantize, in 128 x 128 blocks with F32 scales; here quantized by fp8_quantize and dequantized again
# (each value Q * S rounded to f32, as linfer's products read it).
FP8_ON_LOAD = dict(block=[128, 128], scale_dtype="F32")


def fp8_round_trip(stored):
    """-> (stored with every fp8_quantized tensor replaced by its FP8_ON_LOAD quantize-dequantize,
    the names replaced)."""
    out, names = dict(stored), []
    br, bc = FP8_ON_LOAD["block"]
    for name, w in stored.items():
        if not fp8_quantized(name, w):
            continue
        q, _ = fp8_quantize({name: w}, FP8_ON_LOAD)
        R, C = w.shape[-2:]
        scale = q[name + "_scale_inv"]
        full = np.repeat(np.repeat(scale, br, axis=-2), bc, axis=-1)[..., :R, :C]
        out[name] = round_to_dtype(e4m3_decode(q[name]) * full, "F32")
        names.append(name)
    return out, sorted(names)


def fp8_quantize_oracle(out):
    """A matrix for linfer's QuantizeFp8 to match bit for bit: `w` (F32 [300, 260]: rows of very
    different magnitudes, an all-zero block, values down in e4m3's subnormals, exact ties between two
    e4m3 values) and what fp8_quantize makes of it with FP8_ON_LOAD: `q` (F8_E4M3) and `s` (F32
    [3, 3])."""
    rng = np.random.default_rng(20261129)
    w = rng.standard_normal((300, 260)) * np.exp2(rng.integers(-20, 8, size=(300, 1)))
    w[:128, 128:256] = 0.0
    w[200, :] = np.where(np.arange(260) % 2, 1e-30, -3e-9)
    w = round_to_dtype(w, "F32")
    # The corner block (rows 256-299, columns 256-259): amax 28 makes its scale 2^-4 exactly, and
    # its other quotients w / s lie exactly halfway between two e4m3 values (ties to the even byte),
    # in the normal range and among the subnormals.
    ties = np.array([1.0625, 1.1875, 2.125, 2.375, -17.0, 3.0 / 1024, 9.0 / 1024, 0.5 / 512, -232.0, 416.0])
    corner = np.resize(ties, (44, 4)) * 2.0 ** -4
    corner[0, 0] = 28.0
    w[256:, 256:] = corner
    # Block (1, 2): values so small (f32 subnormals) that amax / 448 rounds to 0 in f32: scale 1.
    w[128:256, 256:] = np.where(np.arange(4) % 2, 1e-44, -3e-45)
    name = "oracle.q_proj.weight"  # a name fp8_quantized takes
    q, _ = fp8_quantize({name: w}, FP8_ON_LOAD)
    d = os.path.join(out, "fp8_quantize_oracle")
    os.makedirs(d, exist_ok=True)
    save_file({"w": w, "q": q[name], "s": q[name + "_scale_inv"]}, os.path.join(d, "oracle.safetensors"),
              dtype="F32", metadata={"format": "pt"}, dtypes={"q": "F8_E4M3", "s": "F32"})


def fp8_config(fp8):
    static = bool(fp8.get("static"))
    if fp8.get("method", "fp8") == "compressed-tensors":
        weights = {"type": "float", "num_bits": 8, "symmetric": True, "dynamic": False,
                   "strategy": "block" if "block" in fp8 else fp8["strategy"], "group_size": None,
                   "block_structure": list(fp8["block"]) if "block" in fp8 else None}
        acts = {"type": "float", "num_bits": 8, "symmetric": True, "dynamic": not static,
                "strategy": "tensor" if static else "token"}
        return {"quant_method": "compressed-tensors", "format": "float-quantized", "quantization_status": "compressed",
                "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights, "input_activations": acts}},
                "ignore": FP8_NOT_CONVERTED, "kv_cache_scheme": None, "sparsity_config": {}}
    cfg = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "static" if static else "dynamic",
           "modules_to_not_convert": FP8_NOT_CONVERTED}
    if "block" in fp8:
        cfg["weight_block_size"] = list(fp8["block"])
    return cfg


def storage_dtypes(weights, dtype, mixed):
    """Per-tensor dtypes. mixed: A_log and every RMSNorm weight in F32, the rest in `dtype`."""
    if not mixed:
        return {}
    return {n: "F32" for n in weights if n.endswith("A_log") or n.endswith("norm.weight")}


def write_weights(d, weights, dtype, dtypes, sharded):
    for fn in os.listdir(d):
        if fn.endswith(".safetensors") or fn.endswith(".index.json"):
            os.remove(os.path.join(d, fn))
    meta = {"format": "pt"}
    if not sharded:
        save_file(weights, os.path.join(d, "model.safetensors"), dtype=dtype, metadata=meta, dtypes=dtypes)
        return ["model.safetensors"]
    names = sorted(weights)
    sizes = np.cumsum([weights[n].size for n in names])
    cut = int(np.searchsorted(sizes, sizes[-1] / 2)) + 1
    files = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    wmap, total, nparams = {}, 0, 0
    for fn, part in zip(files, (names[:cut], names[cut:])):
        save_file({n: weights[n] for n in part}, os.path.join(d, fn), dtype=dtype, metadata=meta, dtypes=dtypes)
        for n in part:
            wmap[n] = fn
            nparams += int(weights[n].size)
            total += int(weights[n].size) * {"F32": 4, "F8_E4M3": 1}.get(dtypes.get(n, dtype), 2)
    index = {"metadata": {"total_parameters": nparams, "total_size": total}, "weight_map": wmap}
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f, indent=2, sort_keys=True)
    return files


def build_case(out, name, kind, over, dtype, opts):
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    if kind == "fla":
        cfg = dict(FLA_GDN, **over)
        cfg["architectures"] = [fla.ARCHITECTURES[cfg["model_type"]]]
        cfg["torch_dtype"] = DTYPE_NAME[dtype]
        text = cfg
    else:
        cfg, text = qwen_configs(kind, over, dtype, opts)
    if opts.get("fp8"):
        cfg["quantization_config"] = fp8_config(opts["fp8"])
    V = text["vocab_size"]
    seed0 = zlib.crc32(name.encode())
    for attempt in range(50):
        rng = np.random.default_rng(seed0 + 7919 * attempt)
        weights = fla_weights(cfg, rng) if kind == "fla" else qwen_weights(cfg, text, rng, opts.get("per_expert"))
        tokens = rng.integers(0, V, T_TOKENS)
        dtypes = storage_dtypes(weights, dtype, opts.get("mixed"))
        written = weights
        if opts.get("fp8"):
            written, fp8_dtypes = fp8_quantize(weights, opts["fp8"])
            dtypes.update(fp8_dtypes)
        files = write_weights(d, written, dtype, dtypes, opts.get("sharded"))
        stored, dts, files_read = qwen.load_tensors(d, cfg)
        assert files_read == files and set(stored) == set(weights)
        if kind == "fla":
            model = fla.Model(cfg, stored, strict=True)
        else:
            model = qwen.Model(cfg, stored, strict=True)
        logits, _ = model.forward(tokens)
        t2 = tokens.copy()
        t2[0] = (t2[0] + 1) % V
        memory = float(np.abs(model.forward(t2)[0][-1] - logits[-1]).max())
        # MoE: every routing decision clear by a logit gap an f32 engine cannot close (with the
        # weights quantized on load too, where the case has them)
        routed = kind == "fla" or not model.cfg["moe"] or model.route_margin > 1e-2
        qlogits, qnames = None, None
        if opts.get("fp8_on_load") and routed:
            qstored, qnames = fp8_round_trip(stored)
            qmodel = qwen.Model(cfg, qstored, strict=True)
            qlogits, _ = qmodel.forward(tokens)
            routed = bool(np.all(np.isfinite(qlogits)) and
                          (not qmodel.cfg["moe"] or qmodel.route_margin > 1e-2))
        if np.all(np.isfinite(logits)) and memory > 1e-3 and routed:
            break
    else:
        raise RuntimeError(f"{name}: could not find usable weights")
    std = float(logits.std())
    assert std > 0.3, f"{name}: logits std {std} too small"
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
    np.ascontiguousarray(logits, dtype="<f8").tofile(os.path.join(d, "expected_logits.f64"))
    present = sorted(set(dts.values()))
    exp = {"tokens": [int(t) for t in tokens], "vocab_size": int(V), "weights_dtype": dtype,
           "weights_dtypes": present, "weights_files": files, "logits_file": "expected_logits.f64",
           "model_type": cfg["model_type"], "architectures": cfg["architectures"],
           "num_tokens": len(tokens), "logits_shape": [len(tokens), int(V)], "logits_std": std,
           "split_points": list(SPLITS)}
    if kind == "fla":
        exp["layout"] = "fla"
        exp["attn_layers"] = sorted(model.attn_specs)
    else:
        exp["layout"] = model.cfg["layout"]
        exp["layer_types"] = model.layer_types
        exp["tied"] = bool(model.cfg["tie_word_embeddings"])
        exp["ignored_tensors"] = len(model.ignored)
        if opts.get("fp8"):
            exp["fp8"] = {"method": cfg["quantization_config"]["quant_method"],
                          "block": list(opts["fp8"]["block"]) if "block" in opts["fp8"] else None,
                          "strategy": "block" if "block" in opts["fp8"] else opts["fp8"]["strategy"],
                          "tensors": sorted(n for n, t in dts.items() if t == "F8_E4M3")}
        if model.cfg["moe"]:
            exp["moe"] = {"experts": model.E, "top_k": model.topk, "route_margin": float(model.route_margin)}
        if opts.get("fp8_on_load"):
            np.ascontiguousarray(qlogits, dtype="<f8").tofile(os.path.join(d, "expected_logits_fp8q.f64"))
            exp["fp8_on_load"] = {"logits_file": "expected_logits_fp8q.f64", "block": FP8_ON_LOAD["block"],
                                  "tensors": qnames}
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
    for name, kind, over, dtype, opts in CASES:
        if args.only and name not in args.only:
            continue
        t1 = time.time()
        std, attempt = build_case(args.out, name, kind, over, dtype, opts)
        names.append(name)
        print(f"{name:30s} {dtype:5s} logits std {std:7.3f}  seed-try {attempt}  {time.time() - t1:5.2f}s")
    with open(os.path.join(args.out, "cases.txt"), "w") as f:
        f.write("".join(n + "\n" for n in names))
    fp8_quantize_oracle(args.out)
    print(f"{len(names)} cases written to {args.out} in {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
