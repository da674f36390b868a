#!/usr/bin/python3
"""Writes a Qwen3.5-0.8B-shaped checkpoint with random bf16 weights (the transformers text layout:
Qwen3_5ForCausalLM, tied embeddings) for benchmarks: 24 layers (18 Gated DeltaNet : 6 gated
attention), hidden 1024, MLP 3584, GDN heads 16/16 × 128, attention heads 8/2 × 256, vocab
248,320 — the published sizes (../shared/design/MODELS.md §17). About 1.5 GB on disk, 3 GB as f32
in linfer's CPU memory. Usage: make_qwen35_bench_model.py OUT_DIR [--vocab N] [--layers N] [--moe] [--fp8]

--moe: the Qwen3.6-35B-A3B shape instead (qwen3_5_moe_text: hidden 2048, 40 layers, GDN heads
16/32 × 128, attention 16/2 × 256, 256 experts of width 512, top 8, a shared expert of 512,
untied): 1.6 GB of bf16 experts a layer, so benchmarks cut it with --layers (4: ≈ 7 GB with
--vocab 32000). The experts of a layer are copies of one random block (fast to write; each still
reads its own memory); the router is random, so tokens spread over the experts as a real one does.

--fp8: the projections (and experts) stored as Qwen publishes its -FP8 models: F8_E4M3 with a BF16
`weight_scale_inv` per 128 × 128 block (quant_method "fp8", weight_block_size [128, 128]); the
embeddings, norms, gates, in_proj_a/b, the router and shared_expert_gate stay bf16.
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models", "reference"))
import make_hybrid_fixtures as mhf  # noqa: E402

QWEN35_08B = dict(hidden_size=1024, intermediate_size=3584, num_hidden_layers=24, layer_types=None,
                  full_attention_interval=4, linear_num_key_heads=16, linear_num_value_heads=16,
                  linear_key_head_dim=128, linear_value_head_dim=128, num_attention_heads=8,
                  num_key_value_heads=2, head_dim=256, vocab_size=248320, tie_word_embeddings=True,
                  eos_token_id=248044, max_position_embeddings=262144,
                  rope_parameters=dict(mrope_interleaved=True, mrope_section=[11, 11, 10],
                                       partial_rotary_factor=0.25, rope_theta=10000000.0,
                                       rope_type="default"))


QWEN36_35B_A3B = dict(QWEN35_08B, model_type="qwen3_5_moe_text", hidden_size=2048, intermediate_size=None,
                      num_hidden_layers=40, linear_num_value_heads=32, num_attention_heads=16,
                      tie_word_embeddings=False, num_experts=256, num_experts_per_tok=8,
                      moe_intermediate_size=512, shared_expert_intermediate_size=512,
                      router_aux_loss_coef=0.001, output_router_logits=False)


def widen_experts(weights, cfg, rng):
    """Replaces the few experts qwen_weights drew with `cfg`'s num_experts: one random block a layer,
    copied (broadcast) to every expert, and a random router over all of them."""
    E, D, I = cfg["num_experts"], cfg["hidden_size"], cfg["moe_intermediate_size"]
    for name in [n for n in weights if n.endswith("mlp.experts.gate_up_proj")]:
        m = name[:-len("experts.gate_up_proj")]
        gu = rng.standard_normal((2 * I, D), dtype=np.float32) / np.float32(np.sqrt(D))
        dn = rng.standard_normal((D, I), dtype=np.float32) / np.float32(np.sqrt(I))
        weights[name] = np.broadcast_to(gu, (E, 2 * I, D))
        weights[m + "experts.down_proj"] = np.broadcast_to(dn, (E, D, I))
        weights[m + "gate.weight"] = rng.standard_normal((E, D), dtype=np.float32) * np.float32(3 / np.sqrt(D))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--vocab", type=int, default=QWEN35_08B["vocab_size"])
    ap.add_argument("--layers", type=int)
    ap.add_argument("--moe", action="store_true", help="the Qwen3.6-35B-A3B shape (see above)")
    ap.add_argument("--fp8", action="store_true", help="fp8 projections in 128 x 128 blocks (see above)")
    a = ap.parse_args()
    shape = QWEN36_35B_A3B if a.moe else QWEN35_08B
    over = dict(shape, vocab_size=a.vocab, num_hidden_layers=a.layers or shape["num_hidden_layers"],
                eos_token_id=min(shape["eos_token_id"], a.vocab - 1))
    cfg, text = mhf.qwen_configs("qwen_text", over, "BF16", {})
    os.makedirs(a.out, exist_ok=True)
    rng = np.random.default_rng(0)
    # MoE: the weights drawn with 2 experts, then widened (drawing 256 in float64 takes minutes).
    drawn = dict(cfg, num_experts=2, num_experts_per_tok=2) if a.moe else cfg
    weights = mhf.qwen_weights(drawn, text, rng)
    weights = {n: w.astype(np.float32) for n, w in weights.items()}
    if a.moe:
        widen_experts(weights, cfg, rng)
    dtypes = {}
    if a.fp8:
        fp8 = dict(block=[128, 128], scale_dtype="BF16")
        cfg["quantization_config"] = mhf.fp8_config(fp8)
        quantized = {}
        for name, w in weights.items():  # a tensor at a time: e4m3_encode works in float64
            one, dts = mhf.fp8_quantize({name: np.ascontiguousarray(w)}, fp8)
            quantized.update(one)
            dtypes.update(dts)
        weights = quantized
    mhf.write_weights(a.out, weights, "BF16", dtypes, sharded=False)
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    n = sum(int(w.size) for w in weights.values())
    print(f"{a.out}: {n / 1e6:.1f} M parameters, {cfg['num_hidden_layers']} layers, vocab {a.vocab}")


if __name__ == "__main__":
    main()
