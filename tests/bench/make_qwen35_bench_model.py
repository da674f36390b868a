#!/usr/bin/python3
"""Writes a Qwen3.5-0.8B-shaped checkpoint with random bf16 weights (the transformers text layout:
Qwen3_5ForCausalLM, tied embeddings) for benchmarks: 24 layers (18 Gated DeltaNet : 6 gated
attention), hidden 1024, MLP 3584, GDN heads 16/16 × 128, attention heads 8/2 × 256, vocab
248,320 — the published sizes (../shared/design/MODELS.md §17). About 1.5 GB on disk, 3 GB as f32
in linfer's CPU memory. Usage: make_qwen35_bench_model.py OUT_DIR [--vocab N] [--layers N]
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--vocab", type=int, default=QWEN35_08B["vocab_size"])
    ap.add_argument("--layers", type=int, default=QWEN35_08B["num_hidden_layers"])
    a = ap.parse_args()
    over = dict(QWEN35_08B, vocab_size=a.vocab, num_hidden_layers=a.layers,
                eos_token_id=min(QWEN35_08B["eos_token_id"], a.vocab - 1))
    cfg, text = mhf.qwen_configs("qwen_text", over, "BF16", {})
    os.makedirs(a.out, exist_ok=True)
    rng = np.random.default_rng(0)
    weights = mhf.qwen_weights(cfg, text, rng)
    weights = {n: w.astype(np.float32) for n, w in weights.items()}
    mhf.write_weights(a.out, weights, "BF16", {}, sharded=False)
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    n = sum(int(w.size) for w in weights.values())
    print(f"{a.out}: {n / 1e6:.1f} M parameters, {cfg['num_hidden_layers']} layers, vocab {a.vocab}")


if __name__ == "__main__":
    main()
