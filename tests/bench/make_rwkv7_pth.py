#!/usr/bin/python3
"""Write a random-weight RWKV-7 (x070) checkpoint in BlinkDL's .pth layout, for benchmarks.

usage: /usr/bin/python3 make_rwkv7_pth.py OUT.pth [--shape 0.1b|0.4b|1.5b|2.9b]
       [--n_layer L --n_embd C --vocab V --head_size N --lora W,A,V,G] [--dtype f32|bf16|f16]
       [--seed S]

Tensor names, shapes and orientation are those of BlinkDL's released RWKV-7 "Goose" .pth files
(the ones models/convert/rwkv7.py and rwkv.cpp's python/convert_pytorch_to_ggml.py read): per
block ln1/ln2 (+ ln0 in block 0), att.x_{r,w,k,v,a,g} (1,1,C), att.w0/a0/v0 (1,1,C), LoRA
att.w1 (C,W) / w2 (W,C), a1/a2, v1/v2 (blocks >= 1 only, like v0), g1/g2, att.k_k, att.k_a
(1,1,C), att.r_k (H,N), att.{receptance,key,value,output}.weight (C,C), att.ln_x (C),
ffn.x_k (1,1,C), ffn.key.weight (4C,C), ffn.value.weight (C,4C); emb.weight (V,C), ln_out,
head.weight (V,C). The dict keeps BlinkDL's key order (rwkv.cpp concatenates x_r..x_g in the
order it meets them).

The numbers are random (not a language model) but scaled so the forward stays finite and
roughly unit-scale: matrices ~ N(0, 0.02^2) (LoRA second factors and output projections
smaller), mixes in [0, 1), w0 in [-6, -1] (decays well inside (0, 1)), layer norms ~ 1.
LoRA dims default to BlinkDL's for each size (0.1B: 64/64/32/128, 1.5B: 96/96/64/256).
"""
import argparse
import sys

import numpy as np

SHAPES = {  # n_layer, n_embd, (decay, a, v, gate) LoRA dims as in BlinkDL's x070 models
    "0.1b": (12, 768, (64, 64, 32, 128)),
    "0.4b": (24, 1024, (64, 64, 32, 128)),
    "1.5b": (24, 2048, (96, 96, 64, 256)),
    "2.9b": (32, 2560, (128, 128, 96, 320)),
}


def make_state_dict(n_layer, C, V, N, lora, seed=0):
    D_W, D_A, D_V, D_G = lora
    H = C // N
    rng = np.random.default_rng(seed)

    def normal(*shape, std=0.02):
        return (rng.standard_normal(shape, dtype=np.float32) * np.float32(std)).astype(np.float32)

    def uniform(*shape, lo=0.0, hi=1.0):
        return rng.uniform(lo, hi, shape).astype(np.float32)

    def ln(prefix, sd):
        sd[prefix + ".weight"] = 1.0 + normal(C, std=0.05)
        sd[prefix + ".bias"] = normal(C, std=0.01)

    sd = {"emb.weight": normal(V, C, std=0.1)}
    for i in range(n_layer):
        b = f"blocks.{i}."
        ln(b + "ln1", sd)
        ln(b + "ln2", sd)
        if i == 0:
            ln(b + "ln0", sd)
        for m in "rwkvag":
            sd[b + f"att.x_{m}"] = uniform(1, 1, C)
        sd[b + "att.w0"] = uniform(1, 1, C, lo=-6.0, hi=-1.0)
        sd[b + "att.w1"] = normal(C, D_W)
        sd[b + "att.w2"] = normal(D_W, C, std=0.1)
        sd[b + "att.a0"] = normal(1, 1, C, std=0.1)
        sd[b + "att.a1"] = normal(C, D_A)
        sd[b + "att.a2"] = normal(D_A, C, std=0.1)
        if i > 0:
            sd[b + "att.v0"] = 1.0 + normal(1, 1, C, std=0.1)
            sd[b + "att.v1"] = normal(C, D_V)
            sd[b + "att.v2"] = normal(D_V, C, std=0.1)
        sd[b + "att.g1"] = normal(C, D_G)
        sd[b + "att.g2"] = normal(D_G, C, std=0.1)
        sd[b + "att.k_k"] = uniform(1, 1, C, lo=0.7, hi=1.0)
        sd[b + "att.k_a"] = uniform(1, 1, C, lo=0.9, hi=1.1)
        sd[b + "att.r_k"] = normal(H, N, std=0.1)
        sd[b + "att.receptance.weight"] = normal(C, C)
        sd[b + "att.key.weight"] = normal(C, C)
        sd[b + "att.value.weight"] = normal(C, C)
        sd[b + "att.output.weight"] = normal(C, C, std=0.01)
        sd[b + "att.ln_x.weight"] = uniform(C, lo=0.1, hi=0.5)
        sd[b + "att.ln_x.bias"] = normal(C, std=0.01)
        sd[b + "ffn.x_k"] = uniform(1, 1, C)
        sd[b + "ffn.key.weight"] = normal(4 * C, C)
        sd[b + "ffn.value.weight"] = normal(C, 4 * C, std=0.01)
    ln("ln_out", sd)
    sd["head.weight"] = normal(V, C, std=0.05)
    return sd


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out")
    p.add_argument("--shape", choices=sorted(SHAPES), default="0.1b")
    p.add_argument("--n_layer", type=int)
    p.add_argument("--n_embd", type=int)
    p.add_argument("--vocab", type=int, default=65536)
    p.add_argument("--head_size", type=int, default=64)
    p.add_argument("--lora", help="decay,a,v,gate LoRA dims")
    p.add_argument("--dtype", choices=["f32", "bf16", "f16"], default="f32")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    n_layer, C, lora = SHAPES[a.shape]
    n_layer = a.n_layer or n_layer
    C = a.n_embd or C
    if a.lora:
        lora = tuple(int(x) for x in a.lora.split(","))
    if C % a.head_size:
        sys.exit(f"n_embd {C} is not a multiple of head size {a.head_size}")
    import torch  # Debian: apt-get install python3-torch

    sd = make_state_dict(n_layer, C, a.vocab, a.head_size, lora, a.seed)
    dt = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[a.dtype]
    n = sum(v.size for v in sd.values())
    torch.save({k: torch.from_numpy(v).to(dt) for k, v in sd.items()}, a.out)
    print(f"{a.out}: RWKV-7 x070, {n_layer} layers, n_embd {C}, vocab {a.vocab}, head size "
          f"{a.head_size}, LoRA {lora}, {n / 1e6:.1f}M parameters, {a.dtype}")


if __name__ == "__main__":
    main()
