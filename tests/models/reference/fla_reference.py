"""Independent float64 reference of fla (flash-linear-attention) causal LMs.

Families (config.json "model_type"): gated_deltanet, delta_net, gla, retnet, linear_attn.
Written from fla's source at commit bc3b101d (see NOTES.md for every verified detail).
numpy only; the token mixers run the plain token-by-token recurrent form (state per head).

    model = load_model(checkpoint_dir)              # config.json + model.safetensors
    logits, state = model.forward(tokens)           # logits: [T, vocab] float64
    logits2, state = model.forward(more, state)     # continue from a state

State (list, one dict per layer) mirrors fla's cache layouts:
    gated_deltanet: S [HV, dv, dk] (V-first), conv (q, k, v) caches [C, W] (last W raw inputs)
    delta_net:      S [H, dk, dv] (K-first), conv caches as above
    gla:            S [H, dv, dk] (V-first), conv caches if use_short_conv
    retnet:         S [H, dk, dv] (K-first), offset = tokens already seen (RoPE position)
    linear_attn:    S [H, F, dv]  (K-first), z [H, F] when norm_feature_map
    hybrid attn layers (config.attn, fla_attention_reference.py): k, v [S, kv_heads, head_dim]
                    after RoPE (last window_size tokens only with a window), seen = tokens so far
"""
import copy
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from safetensors_io import load_file  # noqa: E402
from fla_attention_reference import FlaAttention, normalize_attn  # noqa: E402

# --------------------------------------------------------------------------------------
# config defaults (fla/models/<family>/configuration_<family>.py)
# --------------------------------------------------------------------------------------
_COMMON = dict(hidden_size=2048, hidden_ratio=4, intermediate_size=None, hidden_act="swish",
               num_hidden_layers=24, norm_eps=1e-6, attn=None, tie_word_embeddings=False,
               vocab_size=32000, fuse_norm=True, fuse_swiglu=True, attnres_block_size=None,
               pad_token_id=None, bos_token_id=1, eos_token_id=2)
DEFAULTS = {
    "gated_deltanet": dict(_COMMON, attn_mode="chunk", expand_v=2.0, use_gate=True, use_short_conv=True,
                           allow_neg_eigval=False, conv_size=4, head_dim=256, num_heads=6,
                           num_v_heads=None, num_hidden_layers=21),
    "delta_net": dict(_COMMON, attn_mode="chunk", expand_k=1.0, expand_v=1.0, use_gate=False,
                      use_short_conv=True, allow_neg_eigval=False, conv_size=4, use_beta=True,
                      use_output_norm=True, num_heads=16, qk_norm="l2", qk_activation="silu"),
    "gla": dict(_COMMON, expand_k=0.5, expand_v=1.0, num_heads=4, num_kv_heads=None, feature_map=None,
                attn_mode="chunk", use_short_conv=False, conv_size=4, use_output_gate=True,
                clamp_min=None, elementwise_affine=True, use_gk=True, use_gv=False),
    "retnet": dict(_COMMON, attn_mode="chunk", expand_k=1.0, expand_v=2.0, hidden_ratio=2, num_heads=8,
                   num_kv_heads=None, feature_map=None, use_short_conv=False, conv_size=4,
                   use_output_gate=True, elementwise_affine=True),
    "linear_attn": dict(_COMMON, attn_mode="fused_chunk", expand_k=1.0, expand_v=1.0, num_heads=4,
                        num_kv_heads=None, feature_map="elementwise_product", tie_feature_map_qk=False,
                        norm_q=False, norm_k=False, norm_feature_map=False, elementwise_affine=True),
}
ARCHITECTURES = {"gated_deltanet": "GatedDeltaNetForCausalLM", "delta_net": "DeltaNetForCausalLM",
                 "gla": "GLAForCausalLM", "retnet": "RetNetForCausalLM",
                 "linear_attn": "LinearAttentionForCausalLM"}
L2_EPS = 1e-6          # fla/modules/l2norm.py l2norm_fwd default, inside the sqrt
GLA_GATE_NORMALIZER = 16
GLA_GATE_LOW_RANK = 16


def parse_config(raw):
    """Apply fla's defaults for the model_type (explicit JSON nulls are kept as None)."""
    mt = raw.get("model_type")
    if mt not in DEFAULTS:
        raise ValueError(f"unsupported model_type {mt!r}")
    cfg = dict(DEFAULTS[mt])
    cfg.update(raw)
    normalize_attn(cfg.get("attn"), cfg["num_hidden_layers"])  # hybrid layers: validated here
    if cfg.get("attnres_block_size") is not None:
        raise NotImplementedError("attnres_block_size is not modelled")
    if cfg["hidden_act"] != "swish":
        raise NotImplementedError("only hidden_act='swish' (SwiGLU MLP, swish output gate)")
    return cfg


def intermediate_size(cfg):
    """fla/modules/mlp.py GatedMLP rule."""
    if cfg.get("intermediate_size") is not None:
        return int(cfg["intermediate_size"])
    hr = cfg.get("hidden_ratio")
    hr = 4 if hr is None else hr
    i = int(cfg["hidden_size"] * hr * 2 / 3)
    return 256 * ((i + 256 - 1) // 256)


# --------------------------------------------------------------------------------------
# elementwise helpers (float64)
# --------------------------------------------------------------------------------------
def sigmoid(x):
    return np.exp(-np.logaddexp(0.0, -x))


def silu(x):
    return x * sigmoid(x)


def softplus(x):  # torch / triton: threshold 20 -> identity
    return np.where(x > 20.0, x, np.log1p(np.exp(np.minimum(x, 20.0))))


def logsigmoid(x):
    return np.minimum(x, 0.0) - np.log1p(np.exp(-np.abs(x)))


def elu_p1(x):  # F.elu(x, alpha=1) + 1
    return np.where(x > 0, x + 1.0, np.exp(np.minimum(x, 0.0)))


def relu(x):
    return np.maximum(x, 0.0)


ACT2FN = {  # fla/modules/activations.py ACT2FN (used by GLA/RetNet feature_map)
    "relu": relu, "sigmoid": sigmoid, "logsigmoid": logsigmoid, "silu": silu, "swish": silu,
    "sqrelu": lambda x: relu(x) ** 2,
    "gelu": lambda x: 0.5 * x * (1.0 + np.tanh(0.79788456 * x * (1.0 + 0.044715 * x * x))),
}


def rmsnorm(x, w, eps):
    """RMSNorm over the last axis; w may be None (elementwise_affine=False)."""
    y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    return y if w is None else y * w


def l2norm(x):
    return x / np.sqrt(np.sum(x * x, axis=-1, keepdims=True) + L2_EPS)


def linear(x, w, b=None):  # nn.Linear: weight [out, in]
    y = x @ w.T
    return y if b is None else y + b


def causal_conv(x, w, cache, act):
    """Depthwise causal conv (fla ShortConvolution, no bias). x [T, C], w [C, 1, W] or [C, W],
    cache [C, W] = last W raw inputs, oldest first. Returns (y [T, C], new cache)."""
    w = w.reshape(w.shape[0], -1)
    W = w.shape[1]
    T = x.shape[0]
    xx = np.concatenate([cache.T, x], axis=0)  # [W + T, C]; row W-1+t is x_t
    y = np.zeros_like(x)
    for i in range(W):  # y_t = sum_i w[:, i] * x_{t-(W-1)+i}
        y += w[:, i] * xx[1 + i:1 + i + T]
    if act:
        y = silu(y)
    return y, xx[-W:].T.copy()


def heads(x, d):  # '... (h d) -> ... h d'
    return x.reshape(x.shape[0], -1, d)


# --------------------------------------------------------------------------------------
# linear_attn feature maps (fla/modules/feature_map.py, fla/layers/linear_attn.py)
# --------------------------------------------------------------------------------------
def feature_map(kind, x, p):
    """x [..., dk]; p: dict of this map's params (may be empty)."""
    if kind == "elementwise_product":   # HadamardFeatureMap
        return linear(x, p["layer1.weight"], p["layer1.bias"]) * linear(x, p["layer2.weight"], p["layer2.bias"])
    if kind == "hedgehog":              # softmax([2z, -2z]) over 2*dk
        z = 2.0 * linear(x, p["layer.weight"], p["layer.bias"])
        y = np.concatenate([z, -z], axis=-1)
        y = np.exp(y - y.max(axis=-1, keepdims=True))
        return y / y.sum(axis=-1, keepdims=True)
    if kind == "t2r":
        return relu(linear(x, p["layer.weight"]))
    if kind == "dpfp":                  # nu = 4; NOTE fla uses [relu(x), -relu(x)] (not relu(-x))
        r = relu(x)
        y = np.concatenate([r, -r], axis=-1)
        return np.concatenate([y * np.roll(y, j, axis=-1) for j in range(1, 5)], axis=-1)
    if kind == "elu":
        return elu_p1(x)
    if kind == "relu":
        return relu(x)
    if kind == "identity":
        return x
    raise NotImplementedError(f"feature map {kind!r}")


FM_PARAMS = {"elementwise_product": ["layer1.weight", "layer1.bias", "layer2.weight", "layer2.bias"],
             "hedgehog": ["layer.weight", "layer.bias"], "t2r": ["layer.weight"],
             "dpfp": [], "elu": [], "relu": [], "identity": []}
FM_DIM_MULT = {"hedgehog": 2, "dpfp": 8}


# --------------------------------------------------------------------------------------
# token-by-token recurrences (state per head; q already scaled). Shapes: q,k [T,H,dk], v [T,H,dv]
# --------------------------------------------------------------------------------------
def gva_qk_head(HV, H):
    """GDN GVA: value head hv reads q/k head hv // (HV // H) (fused_recurrent.py: i_h = i_hv // (HV // H))."""
    return np.arange(HV) // (HV // H)


def retention_log_decay(H):
    """RetNet g_gamma = log(1 - 2^(-5 - h)), h = 0..H-1 (fla/ops/retention/*.py)."""
    return np.log(1.0 - 2.0 ** (-5.0 - np.arange(H, dtype=np.float64)))


def rec_gated_delta(q, k, v, g, beta, S):
    """S [H, dv, dk] (V-first). S *= e^g; u = beta (v - S k); S += u k^T; o = S q."""
    o = np.zeros(v.shape)
    for t in range(q.shape[0]):
        S = S * np.exp(g[t])[:, None, None]
        u = beta[t][:, None] * (v[t] - np.einsum("hvk,hk->hv", S, k[t]))
        S = S + u[:, :, None] * k[t][:, None, :]
        o[t] = np.einsum("hvk,hk->hv", S, q[t])
    return o, S


def rec_delta(q, k, v, beta, S):
    """S [H, dk, dv] (K-first). u = beta (v - S^T k); S += k u^T; o = S^T q."""
    o = np.zeros(v.shape)
    for t in range(q.shape[0]):
        u = beta[t][:, None] * (v[t] - np.einsum("hkv,hk->hv", S, k[t]))
        S = S + k[t][:, :, None] * u[:, None, :]
        o[t] = np.einsum("hkv,hk->hv", S, q[t])
    return o, S


def rec_gla(q, k, v, gk, S):
    """S [H, dv, dk] (V-first). S = S diag(e^gk) + v k^T; o = S q."""
    o = np.zeros(v.shape)
    for t in range(q.shape[0]):
        S = S * np.exp(gk[t])[:, None, :] + v[t][:, :, None] * k[t][:, None, :]
        o[t] = np.einsum("hvk,hk->hv", S, q[t])
    return o, S


def rec_retention(q, k, v, log_gamma, S):
    """S [H, dk, dv] (K-first). S = gamma_h S + k v^T; o = S^T q."""
    o = np.zeros(v.shape)
    gamma = np.exp(log_gamma)[:, None, None]
    for t in range(q.shape[0]):
        S = gamma * S + k[t][:, :, None] * v[t][:, None, :]
        o[t] = np.einsum("hkv,hk->hv", S, q[t])
    return o, S


def rec_linear(q, k, v, S, z=None):
    """S [H, F, dv] (K-first). S += k v^T; o = S^T q; if z is given (norm_feature_map):
    z += k; o /= (q . z + 1e-10). Returns (o, S, z, denominators)."""
    o = np.zeros(v.shape)
    den = np.zeros(q.shape[:2])
    for t in range(q.shape[0]):
        S = S + k[t][:, :, None] * v[t][:, None, :]
        o[t] = np.einsum("hfv,hf->hv", S, q[t])
        if z is not None:
            z = z + k[t]
            den[t] = np.sum(q[t] * z, axis=-1) + 1e-10
            o[t] = o[t] / den[t][:, None]
    return o, S, z, den


# --------------------------------------------------------------------------------------
# model
# --------------------------------------------------------------------------------------
class Model:
    def __init__(self, config, weights, strict=True):
        self.cfg = cfg = parse_config(config)
        self.mt = cfg["model_type"]
        self.D = cfg["hidden_size"]
        self.L = cfg["num_hidden_layers"]
        self.V = cfg["vocab_size"]
        self.eps = cfg["norm_eps"]
        self.I = intermediate_size(cfg)
        self._w = weights
        self._used = set()
        self.diag = {}  # name -> list of (min |x|, median |x|) of sensitive denominators
        self._dims()
        self.attn_specs = normalize_attn(cfg.get("attn"), self.L)  # layer -> fla Attention spec
        D, V = self.D, self.V
        self.emb = self.get("model.embeddings.weight", (V, D))
        self.final_norm = self.get("model.norm.weight", (D,))
        if cfg["tie_word_embeddings"]:
            self._used.add("lm_head.weight")  # HF re-ties lm_head to the embeddings
            self.lm_head = self.emb
        else:
            self.lm_head = self.get("lm_head.weight", (V, D))
        self.layers = [self._load_layer(i) for i in range(self.L)]
        extra = sorted(set(weights) - self._used)
        if strict and extra:
            raise ValueError(f"unexpected tensors: {extra}")

    # ---- weights ---------------------------------------------------------------------
    def get(self, name, shape, optional=False):
        if name not in self._w:
            if optional:
                return None
            raise KeyError(f"missing tensor {name}")
        a = np.asarray(self._w[name], dtype=np.float64)
        if tuple(a.shape) != tuple(shape):
            raise ValueError(f"{name}: shape {a.shape} != expected {tuple(shape)}")
        self._used.add(name)
        return a

    def _dims(self):
        c, D = self.cfg, self.D
        if self.mt == "gated_deltanet":
            self.H = c["num_heads"]
            self.HV = c["num_v_heads"] if c["num_v_heads"] is not None else self.H
            self.dk = c["head_dim"]
            self.dv = int(self.dk * c["expand_v"])
            self.key_dim, self.value_dim = self.H * self.dk, self.HV * self.dv
            if self.HV % self.H != 0:
                raise ValueError("num_v_heads must be a multiple of num_heads")
            return
        self.H = c["num_heads"]
        self.key_dim, self.value_dim = int(D * c["expand_k"]), int(D * c["expand_v"])
        assert self.key_dim % self.H == 0 and self.value_dim % self.H == 0
        self.dk, self.dv = self.key_dim // self.H, self.value_dim // self.H
        self.Hkv = c.get("num_kv_heads") or self.H
        self.G = self.H // self.Hkv if self.mt != "delta_net" else 1
        if self.mt == "retnet":
            assert self.dk <= 256, "fla: head_k_dim must be <= 256"
        if self.mt == "linear_attn":
            self.F = self.dk * FM_DIM_MULT.get(c["feature_map"], 1)

    def _load_layer(self, i):
        c, D, I = self.cfg, self.D, self.I
        p = f"model.layers.{i}."
        a = p + "attn."
        L = dict(attn_norm=self.get(p + "attn_norm.weight", (D,)), mlp_norm=self.get(p + "mlp_norm.weight", (D,)),
                 gate=self.get(p + "mlp.gate_proj.weight", (I, D)), up=self.get(p + "mlp.up_proj.weight", (I, D)),
                 down=self.get(p + "mlp.down_proj.weight", (D, I)))
        if i in self.attn_specs:  # hybrid: softmax attention replaces the family's mixer
            L["attn"] = FlaAttention(self.attn_specs[i], D, self.get, a)
            return L
        W = c.get("conv_size", 4)
        kd, vd = self.key_dim, self.value_dim
        if self.mt in ("gla", "retnet", "linear_attn"):
            kd, vd = kd // self.G, vd // self.G  # per-group k/v projection sizes
        L["q"] = self.get(a + "q_proj.weight", (self.key_dim, D))
        L["k"] = self.get(a + "k_proj.weight", (kd, D))
        L["v"] = self.get(a + "v_proj.weight", (vd, D))
        L["o"] = self.get(a + "o_proj.weight", (D, self.value_dim))
        conv = c.get("use_short_conv") and self.mt != "retnet"  # retnet never passes use_short_conv
        if conv:
            for n, C in (("q", self.key_dim), ("k", kd), ("v", vd)):
                L[n + "_conv"] = self.get(a + f"{n}_conv1d.weight", (C, 1, W))
        if self.mt == "gated_deltanet":
            HV = self.HV
            L.update(a_proj=self.get(a + "a_proj.weight", (HV, D)), b_proj=self.get(a + "b_proj.weight", (HV, D)),
                     A_log=self.get(a + "A_log", (HV,)), dt_bias=self.get(a + "dt_bias", (HV,)),
                     o_norm=self.get(a + "o_norm.weight", (self.dv,)))
            if c["use_gate"]:
                L["g"] = self.get(a + "g_proj.weight", (self.value_dim, D))
        elif self.mt == "delta_net":
            if c["use_beta"]:
                L["b_proj"] = self.get(a + "b_proj.weight", (self.H, D))
            L["o_norm"] = self.get(a + "o_norm.weight", (self.dv,))
            if c["use_gate"]:
                L["g"] = self.get(a + "g_proj.weight", (self.value_dim, D))
        elif self.mt in ("gla", "retnet"):
            if c["use_output_gate"]:
                L["g"] = self.get(a + "g_proj.weight", (self.value_dim, D))
            if self.mt == "gla":
                L["gk0"] = self.get(a + "gk_proj.0.weight", (GLA_GATE_LOW_RANK, D))
                L["gk1"] = self.get(a + "gk_proj.1.weight", (kd, GLA_GATE_LOW_RANK))
                L["gk1b"] = self.get(a + "gk_proj.1.bias", (kd,))
            # key: g_norm_swish_gate iff hidden_act == 'swish' and fuse_norm and use_output_gate
            fused = c["hidden_act"] == "swish" and c["fuse_norm"] and c["use_output_gate"]
            nname = a + ("g_norm_swish_gate.weight" if fused else "g_norm.weight")
            L["g_norm"] = self.get(nname, (self.dv,)) if c["elementwise_affine"] else None
        elif self.mt == "linear_attn":
            L["norm"] = self.get(a + "norm.weight", (self.dv,)) if c["elementwise_affine"] else None
            fm = c["feature_map"]
            if fm not in FM_PARAMS:
                raise NotImplementedError(f"feature map {fm!r}")
            dk = self.dk
            shapes = {"weight": (dk, dk), "bias": (dk,)}
            tied = c["tie_feature_map_qk"] and fm in ("hedgehog", "t2r", "elementwise_product")
            for side in ("q", "k"):
                L["fm_" + side] = {n: self.get(a + f"feature_map_{side}.{n}", shapes[n.split(".")[1]],
                                               optional=tied) for n in FM_PARAMS[fm]}
            if tied:  # one shared module; a checkpoint may keep either (or both) key sets
                fq, fk = L["fm_q"], L["fm_k"]
                for n in FM_PARAMS[fm]:
                    if fq[n] is None and fk[n] is None:
                        raise KeyError(f"missing feature_map_q/k.{n} (tied)")
                    if fq[n] is not None and fk[n] is not None and not np.array_equal(fq[n], fk[n]):
                        raise ValueError("tie_feature_map_qk but feature_map_q != feature_map_k")
                    fq[n] = fk[n] = fq[n] if fq[n] is not None else fk[n]
        return L

    # ---- state -----------------------------------------------------------------------
    def new_state(self):
        c, W = self.cfg, self.cfg.get("conv_size", 4)
        st = []
        for L in self.layers:
            if "attn" in L:
                st.append(L["attn"].new_state())
                continue
            s = {}
            if self.mt == "gated_deltanet":
                s["S"] = np.zeros((self.HV, self.dv, self.dk))
            elif self.mt == "delta_net":
                s["S"] = np.zeros((self.H, self.dk, self.dv))
            elif self.mt == "gla":
                s["S"] = np.zeros((self.H, self.dv, self.dk))
            elif self.mt == "retnet":
                s["S"] = np.zeros((self.H, self.dk, self.dv))
                s["offset"] = 0
            elif self.mt == "linear_attn":
                s["S"] = np.zeros((self.H, self.F, self.dv))
                if c["norm_feature_map"]:
                    s["z"] = np.zeros((self.H, self.F))
            if "q_conv" in L:
                s["conv"] = tuple(np.zeros((L[n + "_conv"].shape[0], W)) for n in "qkv")
            st.append(s)
        return st

    # ---- forward ---------------------------------------------------------------------
    def forward(self, tokens, state=None):
        tokens = np.asarray(tokens, dtype=np.int64)
        state = self.new_state() if state is None else copy.deepcopy(state)
        h = self.emb[tokens]
        for L, s in zip(self.layers, state):
            h = h + self._mixer(L, rmsnorm(h, L["attn_norm"], self.eps), s)
            x = rmsnorm(h, L["mlp_norm"], self.eps)
            h = h + linear(silu(linear(x, L["gate"])) * linear(x, L["up"]), L["down"])
        return linear(rmsnorm(h, self.final_norm, self.eps), self.lm_head), state

    def _record(self, name, vals):
        v = np.abs(np.asarray(vals)).ravel()
        self.diag.setdefault(name, []).append((float(v.min()), float(np.median(v))))

    def _qkv(self, L, x, s, qk_act=True):
        q, k, v = linear(x, L["q"]), linear(x, L["k"]), linear(x, L["v"])
        if "q_conv" not in L:
            return q, k, v, False
        cq, ck, cv = s["conv"]
        q, cq = causal_conv(q, L["q_conv"], cq, qk_act)
        k, ck = causal_conv(k, L["k_conv"], ck, qk_act)
        v, cv = causal_conv(v, L["v_conv"], cv, True)
        s["conv"] = (cq, ck, cv)
        return q, k, v, True

    def _mixer(self, L, x, s):
        if "attn" in L:
            return L["attn"](x, s)
        return getattr(self, "_mix_" + self.mt)(L, x, s)

    def _mix_gated_deltanet(self, L, x, s):
        c, T = self.cfg, x.shape[0]
        q, k, v, conv = self._qkv(L, x, s)
        if not conv:
            q, k, v = silu(q), silu(k), silu(v)
        q, k, v = heads(q, self.dk), heads(k, self.dk), heads(v, self.dv)
        beta = sigmoid(linear(x, L["b_proj"])) * (2.0 if c["allow_neg_eigval"] else 1.0)  # [T, HV]
        g = -np.exp(L["A_log"]) * softplus(linear(x, L["a_proj"]) + L["dt_bias"])       # [T, HV]
        qk_of_v = gva_qk_head(self.HV, self.H)
        q, k = l2norm(q)[:, qk_of_v] * self.dk ** -0.5, l2norm(k)[:, qk_of_v]
        o, s["S"] = rec_gated_delta(q, k, v, g, beta, s["S"])
        o = rmsnorm(o, L["o_norm"], self.eps)
        if c["use_gate"]:
            o = o * silu(heads(linear(x, L["g"]), self.dv))
        return linear(o.reshape(T, -1), L["o"])

    def _mix_delta_net(self, L, x, s):
        c, T = self.cfg, x.shape[0]
        act = c["qk_activation"]
        q, k, v, conv = self._qkv(L, x, s, qk_act=(act == "silu"))
        if not conv:
            if act == "silu":
                q, k = silu(q), silu(k)
            v = silu(v)
        q, k, v = heads(q, self.dk), heads(k, self.dk), heads(v, self.dv)
        if act == "relu":
            q, k = relu(q), relu(k)
        elif act == "elu":
            q, k = elu_p1(q), elu_p1(k)
        elif act not in ("silu", "identity"):
            raise NotImplementedError(act)
        if c["qk_norm"] == "sum":   # x / x.sum(-1), no eps
            self._record("delta_sum_q", q.sum(-1))
            self._record("delta_sum_k", k.sum(-1))
            q, k = q / q.sum(-1, keepdims=True), k / k.sum(-1, keepdims=True)
        elif c["qk_norm"] == "l2":  # in-kernel l2norm
            q, k = l2norm(q), l2norm(k)
        else:
            raise NotImplementedError(c["qk_norm"])
        beta = sigmoid(linear(x, L["b_proj"])) if c["use_beta"] else np.ones((T, self.H))
        if c["allow_neg_eigval"]:
            beta = beta * 2.0
        o, s["S"] = rec_delta(q * self.dk ** -0.5, k, v, beta, s["S"])
        o = rmsnorm(o, L["o_norm"], self.eps)
        if c["use_gate"]:
            o = o * silu(heads(linear(x, L["g"]), self.dv))
        return linear(o.reshape(T, -1), L["o"])

    def _gated_output(self, L, x, o):
        """GLA / RetNet output: RMSNorm per head (g_norm[_swish_gate]) then * swish(g_proj(x))."""
        T = x.shape[0]
        o = rmsnorm(o, L["g_norm"], self.eps).reshape(T, -1)
        if self.cfg["use_output_gate"]:
            o = o * silu(linear(x, L["g"]))
        return linear(o, L["o"])

    def _mix_gla(self, L, x, s):
        c, G = self.cfg, self.G
        q, k, v, _ = self._qkv(L, x, s)
        gk = linear(linear(x, L["gk0"]), L["gk1"], L["gk1b"])
        rep = np.arange(self.H) // G     # query head j uses kv head j // G
        q = heads(q, self.dk)
        k, gk, v = heads(k, self.dk)[:, rep], heads(gk, self.dk)[:, rep], heads(v, self.dv)[:, rep]
        gk = logsigmoid(gk) / GLA_GATE_NORMALIZER
        if c["clamp_min"] is not None:
            gk = np.maximum(gk, c["clamp_min"])
        if c["feature_map"] is not None:
            q, k = ACT2FN[c["feature_map"]](q), ACT2FN[c["feature_map"]](k)
        o, s["S"] = rec_gla(q * self.dk ** -0.5, k, v, gk, s["S"])
        return self._gated_output(L, x, o)

    def _rope(self, x, pos):
        """NeoX half rotation over the full head dim, base 10000. x [T, h, d], pos [T]."""
        d = x.shape[-1]
        inv = 1.0 / (10000.0 ** (np.arange(0, d, 2, dtype=np.float64) / d))
        ang = pos[:, None] * inv[None, :]
        cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        x1, x2 = x[..., :d // 2], x[..., d // 2:]
        return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)

    def _mix_retnet(self, L, x, s):
        c, T, G = self.cfg, x.shape[0], self.G
        q, k, v, _ = self._qkv(L, x, s)
        q, k = heads(q, self.dk), heads(k, self.dk)
        if c["feature_map"] is not None:
            q, k = ACT2FN[c["feature_map"]](q), ACT2FN[c["feature_map"]](k)
        pos = np.arange(T, dtype=np.float64) + s["offset"]
        q, k = self._rope(q, pos), self._rope(k, pos)
        rep = np.arange(self.H) // G
        k, v = k[:, rep], heads(v, self.dv)[:, rep]
        o, s["S"] = rec_retention(q * self.dk ** -0.5, k, v, retention_log_decay(self.H), s["S"])
        s["offset"] += T
        return self._gated_output(L, x, o)

    def _mix_linear_attn(self, L, x, s):
        c, T, G = self.cfg, x.shape[0], self.G
        q, k, v = linear(x, L["q"]), linear(x, L["k"]), linear(x, L["v"])
        rep = np.arange(self.H) // G
        q, k, v = heads(q, self.dk), heads(k, self.dk)[:, rep], heads(v, self.dv)[:, rep]
        fm = c["feature_map"]
        q, k = feature_map(fm, q, L["fm_q"]), feature_map(fm, k, L["fm_k"])
        if c["norm_q"]:
            self._record("la_norm_q", q.sum(-1) + 1e-4)
            q = q / (q.sum(-1, keepdims=True) + 1e-4)
        if c["norm_k"]:
            self._record("la_norm_k", k.sum(-1) + 1e-4)
            k = k / (k.sum(-1, keepdims=True) + 1e-4)
        scale = self.F ** -0.5     # default scale = feature dim ** -0.5
        o, s["S"], z, den = rec_linear(q * scale, k, v, s["S"], s.get("z"))
        if z is not None:
            s["z"] = z
            self._record("la_norm_feature_map", den)
        o = rmsnorm(o, L["norm"], self.eps)
        return linear(o.reshape(T, -1), L["o"])


def load_model(path, strict=True):
    with open(os.path.join(path, "config.json")) as f:
        cfg = json.load(f)
    tensors, _, _ = load_file(os.path.join(path, "model.safetensors"))
    return Model(cfg, tensors, strict=strict)
