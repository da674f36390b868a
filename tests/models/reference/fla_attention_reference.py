"""Float64 reference of softmax attention as used by the hybrid linear-attention models.

Two users:
  * fla's hybrid option (config.attn; fla/layers/attn.py `Attention`, fla/models/hybrid.py) — the
    layer is modelled here (`FlaAttention`) and plugged into fla_reference.py;
  * the Qwen3.5 gated attention (qwen3_5_reference.py) reuses `apply_rope` and `attend`.

Written from fla at commit bc3b101d (see NOTES_qwen3_5.md, section "fla hybrid attention").
numpy only. `attend` is the token-by-token form (one query at a time over the cached keys);
check_hybrid_reference.py compares it with a full masked-matrix softmax.

KV-cache state of one fla attention layer (dict):
    k, v   [S, num_kv_heads, head_dim]  keys after RoPE / values, oldest first; with window_size w
                                        only the last w tokens are kept (as fla's cache does)
    seen   int                          tokens seen so far (RoPE position of the next token)
"""
import numpy as np

# fla/models/hybrid.py _normalize_spec: defaults applied to each attn spec
ATTN_SPEC_DEFAULTS = dict(num_kv_heads=None, qkv_bias=False, window_size=None, rope_theta=10000.0)


def normalize_attn(attn, num_hidden_layers):
    """config.attn (None, one dict or a list of dicts) -> {layer index: normalized spec}.

    Mirrors fla/models/hybrid.py normalize_hybrid_attention_config: `layers` and `num_heads` are
    required, num_kv_heads null/absent -> num_heads, qkv_bias False, window_size None (full causal),
    rope_theta 10000; unknown keys are kept and ignored; a layer may appear in one spec only."""
    if attn is None:
        return {}
    if not isinstance(attn, (dict, list)):
        raise ValueError(f"attn must be null, a dict or a list of dicts; got {attn!r}")
    out = {}
    for spec in ([attn] if isinstance(attn, dict) else attn):
        if not isinstance(spec, dict):
            raise ValueError(f"attn spec must be a dict; got {spec!r}")
        for req in ("layers", "num_heads"):
            if req not in spec:
                raise ValueError(f"attn spec field {req!r} is required")
        s = dict(spec)
        for k, v in ATTN_SPEC_DEFAULTS.items():
            if k not in s or (k == "num_kv_heads" and s[k] is None):
                s[k] = v
        if s["num_kv_heads"] is None:
            s["num_kv_heads"] = s["num_heads"]
        for k in ("num_heads", "num_kv_heads"):
            if isinstance(s[k], bool) or not isinstance(s[k], int) or s[k] <= 0:
                raise ValueError(f"attn {k} must be a positive integer; got {s[k]!r}")
        if s["window_size"] is not None and (isinstance(s["window_size"], bool)
                                             or not isinstance(s["window_size"], int) or s["window_size"] <= 0):
            raise ValueError(f"attn window_size must be null or a positive integer; got {s['window_size']!r}")
        if not isinstance(s["qkv_bias"], bool):
            raise ValueError("attn qkv_bias must be a boolean")
        th = s["rope_theta"]
        if isinstance(th, bool) or not isinstance(th, (int, float)) or not np.isfinite(th) or th <= 0:
            raise ValueError(f"attn rope_theta must be positive and finite; got {th!r}")
        for i in s["layers"]:
            if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < num_hidden_layers:
                raise ValueError(f"attn layer index {i!r} out of range [0, {num_hidden_layers})")
            if i in out:
                raise ValueError(f"attn layer {i} assigned twice")
            out[i] = s
    return out


def apply_rope(x, pos, theta, rot_dim=None):
    """Rotate-half ("NeoX", non-interleaved) RoPE on the first rot_dim dims of the last axis.

    x [T, h, d], pos [T] absolute positions. inv_freq_i = theta^(-2i/rot_dim), i < rot_dim/2;
    pairs are (j, j + rot_dim/2); dims >= rot_dim pass through unchanged."""
    d = x.shape[-1]
    r = d if rot_dim is None else rot_dim
    if r % 2 or r > d:
        raise ValueError(f"rotary dim {r} must be even and <= head dim {d}")
    if r == 0:
        return x.copy()
    inv = 1.0 / (float(theta) ** (np.arange(0, r, 2, dtype=np.float64) / r))
    ang = np.asarray(pos, dtype=np.float64)[:, None] * inv[None, :]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    x1, x2 = x[..., :r // 2], x[..., r // 2:r]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin, x[..., r:]], axis=-1)


def attend(q, k, v, q_pos, k_pos, scale, window=None):
    """Causal (optionally sliding-window) GQA softmax attention, one query at a time.

    q [T, H, d], k/v [S, KVH, d(v)], q_pos [T], k_pos [S] absolute positions. Query head h reads
    KV head h // (H / KVH) (consecutive groups, HF repeat_kv / flash-attn GQA). Query at position p
    sees keys at positions j with j <= p and, with a window w, j > p - w (flash-attn window (w-1, 0))."""
    T, H, _ = q.shape
    KVH = k.shape[1]
    if H % KVH:
        raise ValueError("num_heads must be a multiple of num_kv_heads")
    kv_of_q = np.arange(H) // (H // KVH)
    o = np.zeros((T, H, v.shape[-1]))
    for t in range(T):
        vis = k_pos <= q_pos[t]
        if window is not None:
            vis &= k_pos > q_pos[t] - window
        idx = np.nonzero(vis)[0]
        for h in range(H):
            kh = kv_of_q[h]
            s = (k[idx, kh] @ q[t, h]) * scale
            p = np.exp(s - s.max())
            o[t, h] = (p / p.sum()) @ v[idx, kh]
    return o


class FlaAttention:
    """fla/layers/attn.py Attention as built by the hybrid blocks (no qk_norm: the hybrid spec
    does not pass it). Weights: q_proj [D, D], k_proj/v_proj [kv_dim, D] (+ biases if qkv_bias),
    o_proj [D, D] without bias; head_dim = D // num_heads."""

    def __init__(self, spec, hidden_size, get, prefix):
        self.spec = spec
        self.H, self.KVH = spec["num_heads"], spec["num_kv_heads"]
        if hidden_size % self.H or self.H % self.KVH:
            raise ValueError("hidden_size % num_heads and num_heads % num_kv_heads must be 0")
        self.hd = hidden_size // self.H
        kv = self.KVH * self.hd
        D = hidden_size
        self.window = spec["window_size"]
        self.theta = spec["rope_theta"]
        self.wq = get(prefix + "q_proj.weight", (D, D))
        self.wk = get(prefix + "k_proj.weight", (kv, D))
        self.wv = get(prefix + "v_proj.weight", (kv, D))
        self.wo = get(prefix + "o_proj.weight", (D, D))
        if spec["qkv_bias"]:
            self.bq = get(prefix + "q_proj.bias", (D,))
            self.bk = get(prefix + "k_proj.bias", (kv,))
            self.bv = get(prefix + "v_proj.bias", (kv,))
        else:
            self.bq = self.bk = self.bv = None

    def new_state(self):
        return {"k": np.zeros((0, self.KVH, self.hd)), "v": np.zeros((0, self.KVH, self.hd)), "seen": 0}

    def __call__(self, x, s):
        T = x.shape[0]

        def lin(w, b):
            y = x @ w.T
            return y if b is None else y + b
        q = lin(self.wq, self.bq).reshape(T, self.H, self.hd)
        k = lin(self.wk, self.bk).reshape(T, self.KVH, self.hd)
        v = lin(self.wv, self.bv).reshape(T, self.KVH, self.hd)
        pos = s["seen"] + np.arange(T)
        q, k = apply_rope(q, pos, self.theta), apply_rope(k, pos, self.theta)
        kc = np.concatenate([s["k"], k])
        vc = np.concatenate([s["v"], v])
        kpos = s["seen"] + T - kc.shape[0] + np.arange(kc.shape[0])
        o = attend(q, kc, vc, pos, kpos, self.hd ** -0.5, self.window)
        if self.window is not None:  # fla keeps the last window_size tokens
            kc, vc = kc[-self.window:], vc[-self.window:]
        s["k"], s["v"], s["seen"] = kc, vc, s["seen"] + T
        return o.reshape(T, -1) @ self.wo.T
