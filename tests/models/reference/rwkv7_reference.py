"""Independent float64 reference of fla's `rwkv7` causal LM (RWKV-7 "Goose").

Written from fla's source at commit bc3b101d (fla/models/rwkv7/*, fla/layers/rwkv7.py,
fla/layers/rwkv6.py LoRA, fla/ops/rwkv7/*) and cross-checked against BlinkDL's RWKV-v7 reference
(RWKV-LM 524481d5, RWKV-v7/rwkv_v7_demo.py, rwkv_v7_numpy.py) and rwkv.cpp (4358e709,
rwkv_graph.inc rwkv_att_v7). NOTES_families.md lists every rule with file:line.
numpy only; the generalized delta rule runs token by token.

    model = load_model(checkpoint_dir)              # config.json + model.safetensors
    logits, state = model.forward(tokens)           # logits: [T, vocab] float64
    logits2, state = model.forward(more, state)     # continue from a state

State (list, one dict per layer), as fla's cache:
    "S"     [H, head_dim, head_v_dim]  recurrent state, K-first (fla `recurrent_state [N,H,K,V]`)
    "shift" [D]   last attn_norm output (fla `conv_state`, the time-mix token shift)
    "ffn"   [D]   last ffn_norm output (fla `ffn_state`, the channel-mix token shift)
v_first is not state: layer 0 recomputes it for every token.
"""
import copy
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from safetensors_io import load_file  # noqa: E402

# fla/models/rwkv7/configuration_rwkv7.py defaults
DEFAULTS = dict(attn_mode="chunk", hidden_size=2048, hidden_ratio=4, intermediate_size=None,
                num_hidden_layers=24, head_dim=64, num_heads=None, decay_low_rank_dim=64,
                gate_low_rank_dim=128, a_low_rank_dim=64, v_low_rank_dim=16, hidden_act="sqrelu",
                norm_first=True, norm_bias=True, norm_eps=1e-5, attn=None, tie_word_embeddings=False,
                fuse_norm=True, vocab_size=32000, value_dim=None, pad_token_id=None,
                bos_token_id=1, eos_token_id=2)
ARCHITECTURE = "RWKV7ForCausalLM"
DECAY_SCALE = math.exp(-0.5)   # fla/layers/rwkv7.py: w = -0.6065306597126334 * sigmoid(w_lora(xw))
L2_EPS_FUSED = 1e-6            # fla l2_norm: x / sqrt(sum x^2 + 1e-6)
L2_EPS_TORCH = 1e-12           # F.normalize: x / max(||x||, 1e-12)


def sigmoid(x):
    return np.exp(-np.logaddexp(0.0, -x))


ACT = {"sqrelu": lambda x: np.maximum(x, 0.0) ** 2, "relu": lambda x: np.maximum(x, 0.0),
       "silu": lambda x: x * sigmoid(x), "swish": lambda x: x * sigmoid(x)}


def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    xc = x - mu
    y = xc / np.sqrt((xc * xc).mean(-1, keepdims=True) + eps)
    y = y * w
    return y if b is None else y + b


def l2_normalize(x, fused):
    n2 = np.sum(x * x, axis=-1, keepdims=True)
    if fused:
        return x / np.sqrt(n2 + L2_EPS_FUSED)
    return x / np.maximum(np.sqrt(n2), L2_EPS_TORCH)


def lora_rank(cfg, name, D, hd):
    """fla/layers/rwkv7.py: explicit rank, or (when null) the formula scaled by head_dim/64."""
    r = cfg.get(name)
    if r is not None:
        return int(r)
    factor = hd / 64
    mult = {"decay_low_rank_dim": 2.5 * factor, "a_low_rank_dim": 2.5 * factor,
            "v_low_rank_dim": 1.7 * factor, "gate_low_rank_dim": 5.0}[name]
    return max(32, int(round((mult * D ** 0.5) / 32) * 32))


def parse_config(raw):
    if raw.get("model_type") != "rwkv7":
        raise ValueError(f"model_type {raw.get('model_type')!r} is not 'rwkv7'")
    cfg = dict(DEFAULTS)
    cfg.update(raw)
    if cfg.get("attn") is not None:
        raise NotImplementedError("hybrid softmax-attention layers (config.attn) are not modelled")
    if cfg["hidden_act"] not in ACT:
        raise NotImplementedError(f"hidden_act {cfg['hidden_act']!r}")
    return cfg


class Model:
    def __init__(self, config, weights, strict=True):
        self.cfg = c = parse_config(config)
        self.D = D = int(c["hidden_size"])
        self.L = int(c["num_hidden_layers"])
        self.V = int(c["vocab_size"])
        self.eps = float(c["norm_eps"])
        # head_dim wins over num_heads in the layer (fla/layers/rwkv7.py)
        if c["head_dim"] is not None:
            self.hd = int(c["head_dim"])
        elif c["num_heads"] is not None:
            self.hd = D // int(c["num_heads"])
        else:
            raise ValueError("either head_dim or num_heads must be set")
        if D % self.hd:
            raise ValueError(f"hidden_size {D} is not a multiple of head_dim {self.hd}")
        self.H = D // self.hd
        vd = c["value_dim"]
        self.Dv = [D] * self.L if vd is None else ([int(vd)] * self.L if isinstance(vd, int) else list(vd))
        if len(self.Dv) != self.L or any(v % self.H or v < D or v % D for v in self.Dv):
            raise ValueError(f"bad value_dim {vd}")
        if len(set(self.Dv)) != 1 and self.L > 1:
            raise ValueError("per-layer value_dim must all be equal (v is lerped towards layer 0's v_first)")
        hr = c["hidden_ratio"] if c["hidden_ratio"] is not None else 4
        if c["intermediate_size"] is not None:
            self.I = int(c["intermediate_size"])
        else:
            self.I = 32 * ((int(D * hr) + 31) // 32)
        self.ranks = {n: lora_rank(c, n, D, self.hd) for n in
                      ("decay_low_rank_dim", "a_low_rank_dim", "v_low_rank_dim", "gate_low_rank_dim")}
        self.act = ACT[c["hidden_act"]]
        self.fused_l2 = bool(c["fuse_norm"])
        self._w, self._used = weights, set()
        self.emb = self.get("model.embeddings.weight", (self.V, D))
        self.norm_w = self.get("model.norm.weight", (D,))
        self.norm_b = self.get("model.norm.bias", (D,)) if c["norm_bias"] else None
        if c["tie_word_embeddings"]:
            self._used.add("lm_head.weight")
            self.lm_head = self.emb
        else:
            self.lm_head = self.get("lm_head.weight", (self.V, D))
        self.layers = [self._load_layer(i) for i in range(self.L)]
        extra = sorted(set(weights) - self._used)
        if strict and extra:
            raise ValueError(f"unexpected tensors: {extra}")

    def get(self, name, shape):
        if name not in self._w:
            raise KeyError(f"missing tensor {name}")
        a = np.asarray(self._w[name], dtype=np.float64)
        if tuple(a.shape) != tuple(shape):
            raise ValueError(f"{name}: shape {a.shape} != expected {tuple(shape)}")
        self._used.add(name)
        return a

    def _norm(self, prefix):
        D = self.D
        return (self.get(prefix + ".weight", (D,)),
                self.get(prefix + ".bias", (D,)) if self.cfg["norm_bias"] else None)

    def _load_layer(self, i):
        D, H, hd, Dv, I = self.D, self.H, self.hd, self.Dv[i], self.I
        p = f"model.layers.{i}."
        a = p + "attn."
        rw, ra, rv, rg = (self.ranks[n] for n in
                          ("decay_low_rank_dim", "a_low_rank_dim", "v_low_rank_dim", "gate_low_rank_dim"))
        L = {"Dv": Dv}
        if i == 0 and self.cfg["norm_first"]:
            L["pre_norm"] = self._norm(p + "pre_norm")
        L["attn_norm"] = self._norm(p + "attn_norm")
        L["ffn_norm"] = self._norm(p + "ffn_norm")
        if a + "x_x" in self._w:   # fla's version-1 layout: one [6, D] tensor, order r, w, k, v, a, g
            xx = self.get(a + "x_x", (6, D))
            L["mix"] = {n: xx[j] for j, n in enumerate("rwkvag")}
        else:
            L["mix"] = {n: self.get(a + f"x_{n}", (1, 1, D)).reshape(D) for n in "rwkvag"}
        L["k_k"] = self.get(a + "k_k", (D,))
        L["k_a"] = self.get(a + "k_a", (D,))
        L["r_k"] = self.get(a + "r_k", (H, hd))
        L["Wr"] = self.get(a + "r_proj.weight", (D, D))
        L["Wk"] = self.get(a + "k_proj.weight", (D, D))
        L["Wv"] = self.get(a + "v_proj.weight", (Dv, D))
        L["Wo"] = self.get(a + "o_proj.weight", (D, Dv))

        def lora(name, r, out, bias):
            q = a + name + ".lora."
            return (self.get(q + "0.weight", (r, D)), self.get(q + "2.weight", (out, r)),
                    self.get(q + "2.bias", (out,)) if bias else None)
        L["w_lora"] = lora("w_lora", rw, D, True)
        L["a_lora"] = lora("a_lora", ra, D, True)
        if i != 0:
            L["v_lora"] = lora("v_lora", rv, Dv, True)
        L["g_lora"] = lora("g_lora", rg, Dv, False)
        L["g_norm"] = (self.get(a + "g_norm.weight", (Dv,)), self.get(a + "g_norm.bias", (Dv,)))
        L["ffn_x_k"] = self.get(p + "ffn.x_k", (D,))
        L["ffn_key"] = self.get(p + "ffn.key.weight", (I, D))
        L["ffn_value"] = self.get(p + "ffn.value.weight", (D, I))
        return L

    def new_state(self):
        return [{"S": np.zeros((self.H, self.hd, L["Dv"] // self.H)), "shift": np.zeros(self.D),
                 "ffn": np.zeros(self.D)} for L in self.layers]

    # ---- forward ---------------------------------------------------------------------
    def forward(self, tokens, state=None):
        tokens = np.asarray(tokens, dtype=np.int64)
        state = self.new_state() if state is None else copy.deepcopy(state)
        h = self.emb[tokens]
        v_first = None
        eps = self.eps
        for i, (L, s) in enumerate(zip(self.layers, state)):
            if "pre_norm" in L:   # layer 0: the residual stream itself becomes ln0(emb)
                h = layer_norm(h, *L["pre_norm"], eps)
            x = layer_norm(h, *L["attn_norm"], eps)
            out, v_first = self.time_mix(L, x, s, v_first, i)
            h = h + out
            x = layer_norm(h, *L["ffn_norm"], eps)
            h = h + self.channel_mix(L, x, s)
        return layer_norm(h, self.norm_w, self.norm_b, eps) @ self.lm_head.T, state

    @staticmethod
    def shifted(x, last):
        """Token shift: previous token's input (the cached one for t = 0)."""
        return np.concatenate([last[None, :], x[:-1]], axis=0)

    def time_mix(self, L, x, s, v_first, i):
        T, H, hd = x.shape[0], self.H, self.hd
        Dv = L["Dv"]
        hv = Dv // H
        delta = self.shifted(x, s["shift"]) - x          # fla token_shift: prev - cur
        s["shift"] = x[-1].copy()
        xr, xw, xk, xv, xa, xg = (x + delta * L["mix"][n] for n in "rwkvag")
        r = xr @ L["Wr"].T
        w1, w2, w0 = L["w_lora"]
        logw = -DECAY_SCALE * sigmoid(np.tanh(xw @ w1.T) @ w2.T + w0)     # log decay in (-e^-0.5, 0)
        k = xk @ L["Wk"].T
        v = xv @ L["Wv"].T
        if i == 0:
            v_first = v
        else:
            v1, v2, v0 = L["v_lora"]
            v = v + (v_first - v) * sigmoid((xv @ v1.T) @ v2.T + v0)      # torch.lerp(v, v_first, .)
        a1, a2, a0 = L["a_lora"]
        a = sigmoid((xa @ a1.T) @ a2.T + a0)
        g1, g2, _ = L["g_lora"]
        g = sigmoid(xg @ g1.T) @ g2.T
        kk = l2_normalize((k * L["k_k"]).reshape(T, H, hd), self.fused_l2)
        k = k * (1.0 + (a - 1.0) * L["k_a"])
        r, logw, k, a = (z.reshape(T, H, hd) for z in (r, logw, k, a))
        vh = v.reshape(T, H, hv)
        o, s["S"] = rec_rwkv7(r, logw, k, vh, kk, a, s["S"])
        # GroupNorm, H groups over Dv, eps = head_dim * norm_eps (fla) -- per head LayerNorm
        gw, gb = L["g_norm"]
        mu = o.mean(-1, keepdims=True)
        oc = o - mu
        o = oc / np.sqrt((oc * oc).mean(-1, keepdims=True) + self.hd * self.eps)
        o = o.reshape(T, Dv) * gw + gb
        bonus = np.sum(r * k * L["r_k"], axis=-1, keepdims=True) * vh   # (r . (k * r_k)) v per head
        o = (o + bonus.reshape(T, Dv)) * g
        return o @ L["Wo"].T, v_first

    def channel_mix(self, L, x, s):
        delta = self.shifted(x, s["ffn"]) - x
        s["ffn"] = x[-1].copy()
        k = self.act((x + delta * L["ffn_x_k"]) @ L["ffn_key"].T)
        return k @ L["ffn_value"].T


def rec_rwkv7(r, logw, k, v, kk, a, S):
    """Generalized delta rule, token by token. r, logw, k, kk, a [T, H, K]; v [T, H, V];
    S [H, K, V] (K-first). S_t = diag(e^w) S - (kk*a) (kk^T S) + k v^T; o_t = S_t^T r_t
    (the low-rank term reads the *un-decayed* previous state, as fla's fused_recurrent kernel)."""
    T = r.shape[0]
    o = np.zeros(v.shape)
    for t in range(T):
        sa = np.einsum("hk,hkv->hv", -kk[t], S)                     # a^T S with a = -kk
        S = (np.exp(logw[t])[:, :, None] * S + (kk[t] * a[t])[:, :, None] * sa[:, None, :]
             + k[t][:, :, None] * v[t][:, None, :])
        o[t] = np.einsum("hkv,hk->hv", S, r[t])
    return o, S


def load_model(path, strict=True):
    with open(os.path.join(path, "config.json")) as f:
        cfg = json.load(f)
    tensors, _, _ = load_file(os.path.join(path, "model.safetensors"))
    return Model(cfg, tensors, strict=strict)
