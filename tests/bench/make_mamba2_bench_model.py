#!/usr/bin/python3
"""Writes a Mamba2-130M-shaped checkpoint with random weights (transformers' Mamba2ForCausalLM
layout, `backbone.*`, tied embeddings as state-spaces/mamba2-130m) for benchmarks: 24 layers,
hidden 768, expand 2 (1,536 inner), head_dim 64 (24 heads), state 128, 1 group, conv 4, vocab
50,288. Weights as make_family_fixtures.py draws them (finite, not meaningful).
Usage: make_mamba2_bench_model.py OUT_DIR [--layers N] [--hidden N] [--vocab N] [--dtype F32|BF16]
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models", "reference"))
import make_family_fixtures as mff  # noqa: E402

MAMBA2_130M = dict(model_type="mamba2", hidden_size=768, num_hidden_layers=24, vocab_size=50288, expand=2,
                   head_dim=64, num_heads=24, state_size=128, n_groups=1, layer_norm_epsilon=1e-5,
                   conv_kernel=4, tie_word_embeddings=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=MAMBA2_130M["num_hidden_layers"])
    ap.add_argument("--hidden", type=int, default=MAMBA2_130M["hidden_size"])
    ap.add_argument("--vocab", type=int, default=MAMBA2_130M["vocab_size"])
    ap.add_argument("--dtype", default="F32", choices=["F32", "BF16"])
    a = ap.parse_args()
    over = dict(num_hidden_layers=a.layers, hidden_size=a.hidden, vocab_size=a.vocab,
                num_heads=2 * a.hidden // MAMBA2_130M["head_dim"])
    cfg = mff.full_config("mamba2_bench", MAMBA2_130M, over, a.dtype)
    weights = mff.mamba2_weights("mamba2_bench", cfg, np.random.default_rng(0))
    os.makedirs(a.out, exist_ok=True)
    mff.save_file({n: np.asarray(w, dtype=np.float32) for n, w in weights.items()},
                  os.path.join(a.out, "model.safetensors"), dtype=a.dtype, metadata={"format": "pt"})
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
    n = sum(int(np.asarray(w).size) for w in weights.values())
    print(f"{a.out}: {n / 1e6:.1f} M parameters, {a.layers} layers, hidden {a.hidden}, vocab {a.vocab}")


if __name__ == "__main__":
    main()
