"""Independent float64 reference of the Qwen3.5 / Qwen3.6 hybrid text model (Hugging Face format).

Written from transformers' source (src/transformers/models/qwen3_5/{modeling,configuration}_qwen3_5.py,
see NOTES_qwen3_5.md for the commit and every rule with its location). numpy only; the Gated DeltaNet
runs the token-by-token recurrence and attention runs one query at a time over its KV cache.

    model = load_model(checkpoint_dir)            # config.json + model.safetensors or sharded index
    logits, state = model.forward(tokens)         # logits [T, vocab] float64
    logits2, state = model.forward(more, state)   # continue (prefill N, then more tokens)

The mixture-of-experts variants (modeling_qwen3_5_moe.py: Qwen3_5MoeSparseMoeBlock) replace every
block's MLP by a router over num_experts SwiGLU experts (softmax over all experts in float, the top
num_experts_per_tok by probability, renormalised) plus a shared expert behind sigmoid(x·w_sg);
model_type "qwen3_5_moe_text" / "qwen3_5_moe" (text settings under text_config). Experts come fused
(mlp.experts.gate_up_proj [E, 2I, D], mlp.experts.down_proj [E, D, I], as transformers 5 writes
them) or one per tensor (mlp.experts.{e}.{gate,up,down}_proj.weight).

Qwen3-Next (model_type "qwen3_next", modeling_qwen3_next.py) is the same hybrid with its Gated DeltaNet's
input projections fused per key head (in_proj_qkvz, in_proj_ba: split by qwen3_next_split), the MoE
block in every layer but those in mlp_only_layers or off the decoder_sparse_step (a dense MLP of
intermediate_size there), and norm_topk_prob deciding whether the top-k weights are renormalised.

Two on-disk layouts:
    model_type "qwen3_5_text" (Qwen3_5ForCausalLM):             model.*, lm_head.weight
    model_type "qwen3_5" (Qwen3_5ForConditionalGeneration):     model.language_model.*, lm_head.weight,
        text parameters under config["text_config"]; model.visual.* and mtp.* are ignored (also
        ignored in the text layout, as transformers does). A tied head has no lm_head.weight.

State (list, one dict per layer), in transformers' cache layouts:
    linear_attention: S [HV, dk, dv] fp64 (K-first, as HF's recurrent_states), conv [conv_dim, W]
                      = the last W raw (pre-conv) in_proj_qkv outputs, oldest first
    full_attention:   k, v [S, KVH, head_dim] keys after q/k-norm and RoPE / values, seen = tokens
                      so far (the next RoPE position)
"""
import copy
import json
import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fla_attention_reference import apply_rope, attend  # noqa: E402
from safetensors_io import load_file  # noqa: E402

# configuration_qwen3_5.py Qwen3_5TextConfig field defaults
TEXT_DEFAULTS = dict(vocab_size=248320, hidden_size=4096, intermediate_size=12288, num_hidden_layers=32,
                     num_attention_heads=16, num_key_value_heads=4, hidden_act="silu",
                     max_position_embeddings=32768, initializer_range=0.02, rms_norm_eps=1e-6, use_cache=True,
                     tie_word_embeddings=False, rope_parameters=None, attention_bias=False,
                     attention_dropout=0.0, head_dim=256, linear_conv_kernel_dim=4, linear_key_head_dim=128,
                     linear_value_head_dim=128, linear_num_key_heads=16, linear_num_value_heads=32,
                     layer_types=None, pad_token_id=None, bos_token_id=None, eos_token_id=None)
# configuration_qwen3_5_moe.py Qwen3_5MoeTextConfig: the dense defaults but these (no intermediate_size)
MOE_TEXT_DEFAULTS = dict(TEXT_DEFAULTS, hidden_size=2048, num_hidden_layers=40, num_key_value_heads=2,
                         moe_intermediate_size=512, shared_expert_intermediate_size=512,
                         num_experts_per_tok=8, num_experts=256)
del MOE_TEXT_DEFAULTS["intermediate_size"]
# configuration_qwen3_next.py Qwen3NextConfig
NEXT_DEFAULTS = dict(TEXT_DEFAULTS, vocab_size=151936, hidden_size=2048, intermediate_size=5632,
                     num_hidden_layers=48, num_key_value_heads=2, decoder_sparse_step=1, moe_intermediate_size=512,
                     shared_expert_intermediate_size=512, num_experts_per_tok=10, num_experts=512,
                     norm_topk_prob=True, mlp_only_layers=None)
# Qwen3_5Config (multimodal) top-level defaults
VLM_DEFAULTS = dict(text_config=None, vision_config=None, image_token_id=248056, video_token_id=248057,
                    vision_start_token_id=248053, vision_end_token_id=248054, tie_word_embeddings=False)
DEFAULT_FULL_ATTENTION_INTERVAL = 4    # Qwen3_5TextConfig.__post_init__ (kwargs.pop default)
DEFAULT_PARTIAL_ROTARY_FACTOR = 0.25   # Qwen3_5TextConfig.__post_init__ (kwargs.setdefault)
DEFAULT_ROPE_THETA = 10000.0           # RotaryEmbeddingConfigMixin.default_theta
LEGACY_LAYER_TYPES = {"mamba": "linear_attention", "attention": "full_attention"}  # remap_legacy_layer_types
L2_EPS = 1e-6                          # modeling_qwen3_5.py l2norm(eps=1e-6), inside the rsqrt
ARCHITECTURES = {"qwen3_5_text": "Qwen3_5ForCausalLM", "qwen3_5": "Qwen3_5ForConditionalGeneration",
                 "qwen3_5_moe_text": "Qwen3_5MoeForCausalLM", "qwen3_5_moe": "Qwen3_5MoeForConditionalGeneration",
                 "qwen3_next": "Qwen3NextForCausalLM"}
PREFIX = {"qwen3_5_text": "model.", "qwen3_5": "model.language_model.",
          "qwen3_5_moe_text": "model.", "qwen3_5_moe": "model.language_model.", "qwen3_next": "model."}
TEXT_TYPE = {"qwen3_5": "qwen3_5_text", "qwen3_5_moe": "qwen3_5_moe_text"}
IGNORED = re.compile(r"^(mtp\.|model\.visual\.)")  # _keys_to_ignore_on_load_unexpected


def parse_config(raw):
    """config.json dict -> flat dict of the text model's resolved settings (+ 'model_type',
    'layout', 'tie_word_embeddings' as transformers decides it, 'layer_types', 'rope_theta',
    'partial_rotary_factor', 'rotary_dim')."""
    mt = raw.get("model_type")
    moe = mt in ("qwen3_5_moe", "qwen3_5_moe_text", "qwen3_next")
    if mt in TEXT_TYPE:
        top = dict(VLM_DEFAULTS, **raw)
        text = dict(top["text_config"] or {})
        # Qwen3_5ForConditionalGeneration ties by its own (top-level) config.tie_word_embeddings
        tie = bool(top["tie_word_embeddings"])
        if text.get("model_type", TEXT_TYPE[mt]) != TEXT_TYPE[mt]:
            raise ValueError(f"text_config.model_type {text.get('model_type')!r} is not {TEXT_TYPE[mt]}")
    elif mt in ("qwen3_5_text", "qwen3_5_moe_text", "qwen3_next"):
        text = dict(raw)
        tie = bool(text.get("tie_word_embeddings", TEXT_DEFAULTS["tie_word_embeddings"]))
    else:
        raise ValueError(f"unsupported model_type {mt!r} (qwen3_5_text, qwen3_5, qwen3_5_moe_text, qwen3_5_moe "
                         "or qwen3_next)")
    nxt = mt == "qwen3_next"
    c = dict(NEXT_DEFAULTS if nxt else MOE_TEXT_DEFAULTS if moe else TEXT_DEFAULTS)
    c.update(text)
    c["next"] = nxt
    if nxt:
        c["mlp_only_layers"] = list(c["mlp_only_layers"] or [])
    elif moe:  # Qwen3_5MoeTextConfig deletes these: every layer is MoE, the weights renormalised
        c.update(norm_topk_prob=True, mlp_only_layers=[], decoder_sparse_step=1)
    c["model_type"], c["layout"], c["tie_word_embeddings"] = mt, ("multimodal" if mt in TEXT_TYPE else "text"), tie
    c["moe"] = moe
    sizes = (["num_experts", "num_experts_per_tok", "moe_intermediate_size", "shared_expert_intermediate_size",
              "decoder_sparse_step"] if moe else []) + (["intermediate_size"] if not moe or nxt else [])
    for k in ["hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
              "vocab_size", "linear_conv_kernel_dim", "linear_key_head_dim",
              "linear_value_head_dim", "linear_num_key_heads", "linear_num_value_heads"] + sizes:
        if isinstance(c[k], bool) or not isinstance(c[k], int) or c[k] <= 0:
            raise ValueError(f"{k} must be a positive integer; got {c[k]!r}")
    if c["hidden_act"] not in ("silu", "swish"):
        raise NotImplementedError(f"hidden_act {c['hidden_act']!r} (MLP and conv activation): only silu")
    if moe and c["num_experts_per_tok"] > c["num_experts"]:
        raise ValueError("num_experts_per_tok must not exceed num_experts")
    if c["num_attention_heads"] % c["num_key_value_heads"]:
        raise ValueError("num_attention_heads must be a multiple of num_key_value_heads")
    if c["linear_num_value_heads"] % c["linear_num_key_heads"]:
        raise ValueError("linear_num_value_heads must be a multiple of linear_num_key_heads")
    # layer types: explicit list wins (legacy names remapped); else full_attention_interval
    n = c["num_hidden_layers"]
    if c["layer_types"] is None:
        k = c.get("full_attention_interval", DEFAULT_FULL_ATTENTION_INTERVAL)
        c["layer_types"] = ["linear_attention" if (i + 1) % k else "full_attention" for i in range(n)]
    else:
        c["layer_types"] = [LEGACY_LAYER_TYPES.get(t, t) for t in c["layer_types"]]
    if len(c["layer_types"]) != n or not set(c["layer_types"]) <= {"linear_attention", "full_attention"}:
        raise ValueError(f"layer_types must list {n} of linear_attention/full_attention: {c['layer_types']}")
    # RoPE: the rope_parameters dict (legacy rope_scaling replaces it) wins, then top-level fields, then
    # defaults (RotaryEmbeddingConfigMixin.convert_rope_params_to_dict uses setdefault on the dict)
    rp = c.get("rope_scaling") or c.get("rope_parameters") or {}
    if set(rp) & {"linear_attention", "full_attention"}:
        raise NotImplementedError("per-layer-type rope_parameters")
    rope_type = rp.get("rope_type", rp.get("type", "default"))
    if rope_type != "default":
        raise NotImplementedError(f"rope_type {rope_type!r} (only 'default')")
    for key, dflt in (("rope_theta", DEFAULT_ROPE_THETA), ("partial_rotary_factor", DEFAULT_PARTIAL_ROTARY_FACTOR)):
        inner, outer = rp.get(key), text.get(key)
        c[key] = float(inner if inner is not None else outer if outer is not None else dflt)
    c["rotary_dim"] = int(c["head_dim"] * c["partial_rotary_factor"])
    if c["rotary_dim"] % 2:
        raise ValueError(f"rotary dim {c['rotary_dim']} must be even")
    return c


def qwen3_next_split(in_proj_qkvz, in_proj_ba, H, HV, dk, dv):
    """Qwen3-Next's fused projections -> Qwen3.5's separate in_proj_qkv / z / b / a.

    Qwen3-Next (modeling_qwen3_next.py fix_query_key_value_ordering) groups the fused rows per key
    head g: qkvz rows [q_g (dk) | k_g (dk) | v (r*dv) | z (r*dv)] and ba rows [b (r) | a (r)] with
    r = HV/H; value head g*r + j. Qwen3.5 stores [all q | all k | all v], z, b, a separately."""
    r = HV // H
    D = in_proj_qkvz.shape[1]
    qkvz = in_proj_qkvz.reshape(H, 2 * dk + 2 * r * dv, D)
    q, k = qkvz[:, :dk], qkvz[:, dk:2 * dk]
    v, z = qkvz[:, 2 * dk:2 * dk + r * dv], qkvz[:, 2 * dk + r * dv:]
    ba = in_proj_ba.reshape(H, 2 * r, D)
    qkv = np.concatenate([q.reshape(-1, D), k.reshape(-1, D), v.reshape(-1, D)])
    return qkv, z.reshape(-1, D), ba[:, :r].reshape(-1, D), ba[:, r:].reshape(-1, D)


# --------------------------------------------------------------------------------------
# elementwise helpers (float64)
# --------------------------------------------------------------------------------------
def sigmoid(x):
    return np.exp(-np.logaddexp(0.0, -x))


def silu(x):
    return x * sigmoid(x)


def softplus(x):  # torch F.softplus(beta=1, threshold=20)
    return np.where(x > 20.0, x, np.log1p(np.exp(np.minimum(x, 20.0))))


def rms(x, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)


def zc_rmsnorm(x, w, eps):
    """Qwen3_5RMSNorm: zero-centred weight, y = x * rsqrt(mean(x^2) + eps) * (1 + w)."""
    return rms(x, eps) * (1.0 + w)


def gated_rmsnorm(x, w, z, eps):
    """Qwen3_5RMSNormGated: plain weight, norm first, then * silu(z)."""
    return rms(x, eps) * w * silu(z)


def l2norm(x):
    return x / np.sqrt(np.sum(x * x, axis=-1, keepdims=True) + L2_EPS)


def causal_conv(x, w, cache):
    """Depthwise causal conv1d, no bias, then SiLU. x [T, C], w [C, 1, W], cache [C, W] = the last
    W raw inputs (oldest first). Returns (y [T, C], new cache)."""
    w = w.reshape(w.shape[0], -1)
    W, T = w.shape[1], x.shape[0]
    xx = np.concatenate([cache.T, x], axis=0)  # row W + t is x_t; y_t uses rows t+1 .. t+W
    y = np.zeros_like(x)
    for i in range(W):
        y += w[:, i] * xx[1 + i:1 + i + T]
    return silu(y), xx[-W:].T.copy()


def value_to_key_head(HV, H):
    """GDN grouped value attention: value head hv reads q/k head hv // (HV/H) (repeat_interleave)."""
    return np.arange(HV) // (HV // H)


def gated_delta_rule(q, k, v, g, beta, S):
    """Token loop, HF torch_recurrent_gated_delta_rule. q (already scaled), k [T, HV, dk], v [T, HV, dv],
    g, beta [T, HV], S [HV, dk, dv]: S *= e^g; d = beta (v - S^T k); S += k d^T; o = S^T q."""
    o = np.zeros(v.shape)
    for t in range(q.shape[0]):
        S = S * np.exp(g[t])[:, None, None]
        d = beta[t][:, None] * (v[t] - np.einsum("hkv,hk->hv", S, k[t]))
        S = S + k[t][:, :, None] * d[:, None, :]
        o[t] = np.einsum("hkv,hk->hv", S, q[t])
    return o, S


def mrope_text_cos_sin(pos, inv_freq, mrope_section):
    """Qwen3_5TextRotaryEmbedding for text-only positions (the T, H and W rows all equal pos):
    interleaved M-RoPE recomposition (T everywhere, H at 1::3 up to 3*sec[1], W at 2::3 up to
    3*sec[2]) then cat(freqs, freqs). Used by the self-check to show it equals plain RoPE."""
    rows = [np.asarray(pos, dtype=np.float64)[:, None] * inv_freq[None, :] for _ in range(3)]
    f = rows[0].copy()
    for dim, off in ((1, 1), (2, 2)):
        idx = slice(off, mrope_section[dim] * 3, 3)
        f[:, idx] = rows[dim][:, idx]
    f = np.concatenate([f, f], axis=-1)
    return np.cos(f), np.sin(f)


# --------------------------------------------------------------------------------------
# model
# --------------------------------------------------------------------------------------
class Model:
    def __init__(self, config, weights, strict=True):
        self.cfg = c = parse_config(config)
        self.D, self.V, self.L = c["hidden_size"], c["vocab_size"], c["num_hidden_layers"]
        self.I, self.eps = c.get("intermediate_size"), c["rms_norm_eps"]
        if c["moe"]:
            self.E, self.topk = c["num_experts"], c["num_experts_per_tok"]
            self.EI, self.SI = c["moe_intermediate_size"], c["shared_expert_intermediate_size"]
        self.route_margin = np.inf  # smallest gap between the k-th and (k+1)-th router logit seen
        self.H, self.KVH, self.hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
        self.Hk, self.HV = c["linear_num_key_heads"], c["linear_num_value_heads"]
        self.dk, self.dv = c["linear_key_head_dim"], c["linear_value_head_dim"]
        self.key_dim, self.value_dim = self.Hk * self.dk, self.HV * self.dv
        self.conv_dim, self.W = 2 * self.key_dim + self.value_dim, c["linear_conv_kernel_dim"]
        self.layer_types = c["layer_types"]
        self._w, self._used = weights, set()
        self.prefix = self._pick_prefix(weights)
        D, V, P = self.D, self.V, self.prefix
        self.emb = self.get(P + "embed_tokens.weight", (V, D))
        self.final_norm = self.get(P + "norm.weight", (D,))
        if c["tie_word_embeddings"]:
            if "lm_head.weight" in weights:  # tied: HF points lm_head at the embeddings
                if strict and not np.array_equal(np.asarray(weights["lm_head.weight"]), np.asarray(self.emb)):
                    raise ValueError("tie_word_embeddings is true but lm_head.weight differs from the embeddings")
                self._used.add("lm_head.weight")
            self.lm_head = self.emb
        else:
            self.lm_head = self.get("lm_head.weight", (V, D))
        self.layers = [self._load_layer(i) for i in range(self.L)]
        self.ignored = sorted(n for n in weights if IGNORED.match(n))
        extra = sorted(set(weights) - self._used - set(self.ignored))
        if strict and extra:
            raise ValueError(f"unexpected tensors: {extra}")

    def _pick_prefix(self, weights):
        """Multimodal layout: model.language_model.*. Text layout: model.*; transformers also renames
        model.language_model.* to model.* when a qwen3_5_text model loads a multimodal file."""
        if self.cfg["model_type"] in TEXT_TYPE:
            return PREFIX[self.cfg["model_type"]]
        vlm = any(n.startswith("model.language_model.") for n in weights)
        txt = any(n.startswith("model.") and not n.startswith(("model.language_model.", "model.visual."))
                  for n in weights)
        if vlm and txt:
            raise ValueError("both model.* and model.language_model.* tensors present")
        return PREFIX["qwen3_5"] if vlm else PREFIX["qwen3_5_text"]

    def get(self, name, shape):
        if name not in self._w:
            raise KeyError(f"missing tensor {name}")
        a = np.asarray(self._w[name], dtype=np.float64)
        if tuple(a.shape) != tuple(shape):
            raise ValueError(f"{name}: shape {a.shape} != expected {tuple(shape)}")
        self._used.add(name)
        return a

    def _load_layer(self, i):
        D, I = self.D, self.I
        p = f"{self.prefix}layers.{i}."
        L = dict(type=self.layer_types[i],
                 in_norm=self.get(p + "input_layernorm.weight", (D,)),
                 post_norm=self.get(p + "post_attention_layernorm.weight", (D,)))
        c = self.cfg
        if c["moe"] and i not in c["mlp_only_layers"] and (i + 1) % c["decoder_sparse_step"] == 0:
            L.update(self._load_moe(p + "mlp."))
        else:
            L.update(gate=self.get(p + "mlp.gate_proj.weight", (I, D)), up=self.get(p + "mlp.up_proj.weight", (I, D)),
                     down=self.get(p + "mlp.down_proj.weight", (D, I)))
        if L["type"] == "linear_attention":
            a = p + "linear_attn."
            if c["next"]:  # fused per key head
                r = self.HV // self.Hk
                qkv, z, b, a_ = qwen3_next_split(
                    self.get(a + "in_proj_qkvz.weight", (self.Hk * (2 * self.dk + 2 * r * self.dv), D)),
                    self.get(a + "in_proj_ba.weight", (2 * self.HV, D)), self.Hk, self.HV, self.dk, self.dv)
                L.update(qkv=qkv, z=z, b=b, a=a_)
            else:
                L.update(qkv=self.get(a + "in_proj_qkv.weight", (self.conv_dim, D)),
                         z=self.get(a + "in_proj_z.weight", (self.value_dim, D)),
                         b=self.get(a + "in_proj_b.weight", (self.HV, D)),
                         a=self.get(a + "in_proj_a.weight", (self.HV, D)))
            L.update(conv=self.get(a + "conv1d.weight", (self.conv_dim, 1, self.W)),
                     dt_bias=self.get(a + "dt_bias", (self.HV,)), A_log=self.get(a + "A_log", (self.HV,)),
                     norm=self.get(a + "norm.weight", (self.dv,)),
                     out=self.get(a + "out_proj.weight", (D, self.value_dim)))
        else:
            a = p + "self_attn."
            H, KVH, hd = self.H, self.KVH, self.hd
            L.update(q=self.get(a + "q_proj.weight", (2 * H * hd, D)), k=self.get(a + "k_proj.weight", (KVH * hd, D)),
                     v=self.get(a + "v_proj.weight", (KVH * hd, D)), o=self.get(a + "o_proj.weight", (D, H * hd)),
                     q_norm=self.get(a + "q_norm.weight", (hd,)), k_norm=self.get(a + "k_norm.weight", (hd,)))
            if self.cfg["attention_bias"]:  # config.attention_bias: q/k/v and o_proj biases
                L.update(qb=self.get(a + "q_proj.bias", (2 * H * hd,)), kb=self.get(a + "k_proj.bias", (KVH * hd,)),
                         vb=self.get(a + "v_proj.bias", (KVH * hd,)), ob=self.get(a + "o_proj.bias", (D,)))
        return L

    def _load_moe(self, m):
        D, E, EI, SI = self.D, self.E, self.EI, self.SI
        L = dict(router=self.get(m + "gate.weight", (E, D)),
                 sgate=self.get(m + "shared_expert_gate.weight", (1, D)),
                 sg=self.get(m + "shared_expert.gate_proj.weight", (SI, D)),
                 su=self.get(m + "shared_expert.up_proj.weight", (SI, D)),
                 sd=self.get(m + "shared_expert.down_proj.weight", (D, SI)))
        if m + "experts.gate_up_proj" in self._w:  # fused, as transformers 5 saves them
            gu = self.get(m + "experts.gate_up_proj", (E, 2 * EI, D))
            L.update(eg=gu[:, :EI], eu=gu[:, EI:], ed=self.get(m + "experts.down_proj", (E, D, EI)))
        else:
            L.update(eg=np.stack([self.get(f"{m}experts.{e}.gate_proj.weight", (EI, D)) for e in range(E)]),
                     eu=np.stack([self.get(f"{m}experts.{e}.up_proj.weight", (EI, D)) for e in range(E)]),
                     ed=np.stack([self.get(f"{m}experts.{e}.down_proj.weight", (D, EI)) for e in range(E)]))
        return L

    def _moe(self, L, x):
        """Qwen3_5MoeSparseMoeBlock: softmax over every expert, the top k by probability (stable:
        the lower index first among equals), renormalised; Σ w_j expert_j(x) + σ(x·w_sg) shared(x)."""
        out = np.zeros_like(x)
        logits = x @ L["router"].T
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        for t in range(x.shape[0]):
            order = np.argsort(-p[t], kind="stable")
            top = order[:self.topk]
            if self.topk < self.E:
                gap = logits[t, order[self.topk - 1]] - logits[t, order[self.topk]]
                self.route_margin = min(self.route_margin, gap)
            w = p[t, top] / p[t, top].sum() if self.cfg["norm_topk_prob"] else p[t, top]
            for wj, e in zip(w, top):
                a = silu(L["eg"][e] @ x[t]) * (L["eu"][e] @ x[t])
                out[t] += wj * (L["ed"][e] @ a)
        shared = (silu(x @ L["sg"].T) * (x @ L["su"].T)) @ L["sd"].T
        return out + sigmoid(x @ L["sgate"].T) * shared

    # ---- state -----------------------------------------------------------------------
    def new_state(self):
        st = []
        for t in self.layer_types:
            if t == "linear_attention":
                st.append({"S": np.zeros((self.HV, self.dk, self.dv)), "conv": np.zeros((self.conv_dim, self.W))})
            else:
                st.append({"k": np.zeros((0, self.KVH, self.hd)), "v": np.zeros((0, self.KVH, self.hd)), "seen": 0})
        return st

    # ---- forward ---------------------------------------------------------------------
    def forward(self, tokens, state=None):
        tokens = np.asarray(tokens, dtype=np.int64)
        state = self.new_state() if state is None else copy.deepcopy(state)
        h = self.emb[tokens]
        for L, s in zip(self.layers, state):
            x = zc_rmsnorm(h, L["in_norm"], self.eps)
            h = h + (self._gdn(L, x, s) if L["type"] == "linear_attention" else self._attn(L, x, s))
            x = zc_rmsnorm(h, L["post_norm"], self.eps)
            h = h + (self._moe(L, x) if "router" in L else (silu(x @ L["gate"].T) * (x @ L["up"].T)) @ L["down"].T)
        return zc_rmsnorm(h, self.final_norm, self.eps) @ self.lm_head.T, state

    def _gdn(self, L, x, s):
        T = x.shape[0]
        mixed, s["conv"] = causal_conv(x @ L["qkv"].T, L["conv"], s["conv"])
        kd = self.key_dim
        q = mixed[:, :kd].reshape(T, self.Hk, self.dk)
        k = mixed[:, kd:2 * kd].reshape(T, self.Hk, self.dk)
        v = mixed[:, 2 * kd:].reshape(T, self.HV, self.dv)
        z = (x @ L["z"].T).reshape(T, self.HV, self.dv)
        beta = sigmoid(x @ L["b"].T)
        g = -np.exp(L["A_log"]) * softplus(x @ L["a"].T + L["dt_bias"])
        kh = value_to_key_head(self.HV, self.Hk)
        q = l2norm(q)[:, kh] * self.dk ** -0.5
        k = l2norm(k)[:, kh]
        o, s["S"] = gated_delta_rule(q, k, v, g, beta, s["S"])
        o = gated_rmsnorm(o, L["norm"], z, self.eps)
        return o.reshape(T, -1) @ L["out"].T

    def _attn(self, L, x, s):
        T, H, KVH, hd = x.shape[0], self.H, self.KVH, self.hd
        qg = x @ L["q"].T + (L["qb"] if "qb" in L else 0.0)
        qg = qg.reshape(T, H, 2 * hd)           # per head: [query (hd) | gate (hd)]
        q, gate = qg[..., :hd], qg[..., hd:].reshape(T, H * hd)
        k = (x @ L["k"].T + (L["kb"] if "kb" in L else 0.0)).reshape(T, KVH, hd)
        v = (x @ L["v"].T + (L["vb"] if "vb" in L else 0.0)).reshape(T, KVH, hd)
        q, k = zc_rmsnorm(q, L["q_norm"], self.eps), zc_rmsnorm(k, L["k_norm"], self.eps)
        pos = s["seen"] + np.arange(T)
        rd, th = self.cfg["rotary_dim"], self.cfg["rope_theta"]
        q, k = apply_rope(q, pos, th, rd), apply_rope(k, pos, th, rd)
        s["k"], s["v"] = np.concatenate([s["k"], k]), np.concatenate([s["v"], v])
        o = attend(q, s["k"], s["v"], pos, np.arange(s["k"].shape[0]), hd ** -0.5)
        s["seen"] += T
        o = o.reshape(T, H * hd) * sigmoid(gate)
        return o @ L["o"].T + (L["ob"] if "ob" in L else 0.0)


# --------------------------------------------------------------------------------------
# loading
# --------------------------------------------------------------------------------------
def fp8_scheme(cfg):
    """How a checkpoint's F8_E4M3 tensors are scaled, from its quantization_config (top level or
    text_config), or None:
      quant_method "fp8" with weight_block_size [br, bc] (transformers' FineGrainedFP8Config):
        ("_scale_inv", "block", (br, bc));
      quant_method "fp8" without it (vLLM's per-tensor fp8 checkpoints): ("_scale", "tensor", None);
      "compressed-tensors", format float-quantized, weights {type float, num_bits 8, strategy
        tensor | channel | block + block_structure}: ("_scale", strategy, block or None)."""
    for level in (cfg, cfg.get("text_config") or {}):
        q = level.get("quantization_config")
        if not q:
            continue
        if q.get("quant_method") == "fp8" and q.get("fmt", "e4m3") == "e4m3":
            if "weight_block_size" in q:
                return "_scale_inv", "block", tuple(int(b) for b in q["weight_block_size"])
            return "_scale", "tensor", None
        if q.get("quant_method") == "compressed-tensors" and q.get("format") == "float-quantized":
            (group,) = q["config_groups"].values()
            w = group["weights"]
            assert w["type"] == "float" and w["num_bits"] == 8, w
            block = tuple(w["block_structure"]) if w["strategy"] == "block" else None
            return "_scale", w["strategy"], block
        raise ValueError(f"unsupported quantization_config {q}")
    return None


def dequantize_fp8(tensors, dtypes, scheme):
    """Every F8_E4M3 tensor Q [..., R, C] with its scale S = `<name><suffix>` (or the `_scales_inv`
    of older transformers' fused experts) becomes W = Q * S broadcast over its blocks: [..., ceil(R/br),
    ceil(C/bc)] for blocks of br x bc, one scale an output row for "channel" (stored [R, 1] or [R]),
    one for the tensor for "tensor" (stored [] or [1]). The scales and any static activation scales
    (`*.input_scale`) leave the dict."""
    suffix, strategy, block = scheme
    out = dict(tensors)
    for name in sorted(n for n, dt in dtypes.items() if dt == "F8_E4M3"):
        sname = name + suffix
        if sname not in tensors and suffix == "_scale_inv":
            sname = name + "_scales_inv"
        q, s = tensors[name], out.pop(sname)
        R, C = q.shape[-2:]
        lead = q.shape[:-2]
        if strategy == "block":
            br, bc = block
            grid = lead + (-(-R // br), -(-C // bc))
            if [d for d in s.shape if d != 1] != [d for d in grid if d != 1]:  # as stored, size-1 dims aside
                raise ValueError(f"{sname}: shape {s.shape} does not tile {name} {q.shape} by {block}")
            s = np.asarray(s).reshape(grid)
            full = np.repeat(np.repeat(s, br, axis=-2), bc, axis=-1)[..., :R, :C]
        elif strategy == "channel":
            full = np.asarray(s).reshape(lead + (R, 1))
        else:
            full = np.asarray(s).reshape(lead + (1, 1))
        out[name] = q * full
    for name in [n for n in out if n.endswith(".input_scale") or n.endswith("activation_scale")]:
        del out[name]
    return out


def load_tensors(path, cfg=None, dequantize=True):
    """model.safetensors, or model.safetensors.index.json + its shards. Returns (tensors, dtypes, files).
    fp8 weights come back dequantized (cfg: the config, else path/config.json if present)."""
    tensors, dtypes, files = _load_stored(path)
    if cfg is None and os.path.exists(os.path.join(path, "config.json")):
        with open(os.path.join(path, "config.json")) as f:
            cfg = json.load(f)
    scheme = fp8_scheme(cfg) if cfg is not None else None
    if scheme is not None and dequantize:
        tensors = dequantize_fp8(tensors, dtypes, scheme)
    return tensors, dtypes, files


def _load_stored(path):
    """The stored values (fp8 decoded, not yet scaled): (tensors, dtypes, files)."""
    index = os.path.join(path, "model.safetensors.index.json")
    if not os.path.exists(index):
        t, d, _ = load_file(os.path.join(path, "model.safetensors"))
        return t, d, ["model.safetensors"]
    with open(index) as f:
        wmap = json.load(f)["weight_map"]
    tensors, dtypes, files = {}, {}, sorted(set(wmap.values()))
    for fn in files:
        t, d, _ = load_file(os.path.join(path, fn))
        for n in t:
            if wmap.get(n) != fn:
                raise ValueError(f"{fn}: tensor {n} not mapped to this shard in the index")
            if n in tensors:
                raise ValueError(f"tensor {n} in two shards")
        tensors.update(t)
        dtypes.update(d)
    missing = sorted(set(wmap) - set(tensors))
    if missing:
        raise ValueError(f"index lists tensors absent from the shards: {missing[:5]}")
    return tensors, dtypes, files


def load_model(path, strict=True):
    with open(os.path.join(path, "config.json")) as f:
        cfg = json.load(f)
    tensors, _, _ = load_tensors(path)
    return Model(cfg, tensors, strict=strict)
