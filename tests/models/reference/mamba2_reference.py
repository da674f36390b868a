"""Independent float64 reference of Mamba2 causal LMs (`model_type: "mamba2"`).

Two config flavours share one tensor layout (`backbone.*`, `lm_head.weight`):
  - "hf":  Hugging Face transformers `Mamba2ForCausalLM` / `Mamba2Config` (fields
           `layer_norm_epsilon`, `time_step_limit`, `num_heads`, `rms_norm`; default n_groups 8).
  - "fla": fla's `fla/models/mamba2` (`norm_eps`, `dt_limit`, `rmsnorm`, `norm_before_gate`,
           `D_has_hdim`; default n_groups 1).
The flavour is told from the config keys (see `flavour`). Written from transformers'
modeling_mamba2.py torch_forward, fla's fla/layers/mamba2.py (bc3b101d) and mamba_ssm
(state-spaces/mamba e9594ce1); NOTES_families.md has the rules with file:line.

Decisions (NOTES_families.md, "Mamba2"):
  - head h reads B/C group h // (H / n_groups) (transformers repeat_interleave, mamba_ssm kernels);
  - the gated RMSNorm normalises groups of Din / n_groups channels (mamba_ssm, fla, transformers'
    own fused training path). transformers' torch_forward/inference norm over the whole Din
    (an open bug for n_groups > 1, transformers PR #40861); `Model(..., norm_groups="full")`
    reproduces that reading for comparison.

    model = load_model(checkpoint_dir)
    logits, state = model.forward(tokens)           # [T, vocab] float64
    logits2, state = model.forward(more, state)

State per layer: "conv" [conv_dim, K] = last K raw xBC inputs (oldest first; HF/fla conv cache),
"S" [H, head_dim, state_size] (HF/fla/mamba_ssm ssm_state layout).
"""
import copy
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from safetensors_io import load_file  # noqa: E402

INF = float("inf")
HF_DEFAULTS = dict(num_heads=128, head_dim=64, vocab_size=32768, hidden_size=4096, state_size=128,
                   num_hidden_layers=64, layer_norm_epsilon=1e-5, expand=2, conv_kernel=4, n_groups=8,
                   use_bias=False, use_conv_bias=True, hidden_act="silu", residual_in_fp32=True,
                   time_step_limit=[0.0, INF], rms_norm=True, chunk_size=256, tie_word_embeddings=False)
FLA_DEFAULTS = dict(head_dim=64, vocab_size=32000, hidden_size=2048, state_size=128, num_hidden_layers=48,
                    norm_eps=1e-5, expand=2, conv_kernel=4, n_groups=1, use_bias=False, use_conv_bias=True,
                    hidden_act="silu", residual_in_fp32=True, dt_limit=[0.0, INF], rmsnorm=True,
                    norm_before_gate=False, chunk_size=256, D_has_hdim=False, tie_word_embeddings=False,
                    fuse_norm=True)
HF_KEYS = ("layer_norm_epsilon", "time_step_limit", "rms_norm", "time_step_rank")
FLA_KEYS = ("norm_eps", "dt_limit", "rmsnorm", "norm_before_gate", "D_has_hdim")


def flavour(raw):
    hf = [k for k in HF_KEYS if k in raw]
    fla = [k for k in FLA_KEYS if k in raw]
    if hf and fla:
        raise ValueError(f"mamba2 config mixes transformers keys {hf} and fla keys {fla}")
    if not hf and not fla:
        raise ValueError("mamba2 config names neither layer_norm_epsilon (transformers) nor norm_eps (fla)")
    return "hf" if hf else "fla"


def sigmoid(x):
    return np.exp(-np.logaddexp(0.0, -x))


def silu(x):
    return x * sigmoid(x)


def softplus(x):  # torch / mamba_ssm: identity above 20
    return np.where(x > 20.0, x, np.log1p(np.exp(np.minimum(x, 20.0))))


def rmsnorm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def parse_config(raw):
    if raw.get("model_type") != "mamba2":
        raise ValueError(f"model_type {raw.get('model_type')!r} is not 'mamba2'")
    fl = flavour(raw)
    cfg = dict(HF_DEFAULTS if fl == "hf" else FLA_DEFAULTS)
    cfg.update(raw)
    cfg["_flavour"] = fl
    if cfg["hidden_act"] not in ("silu", "swish"):
        raise NotImplementedError(f"hidden_act {cfg['hidden_act']!r}")
    return cfg


class Model:
    def __init__(self, config, weights, strict=True, norm_groups="group"):
        self.cfg = c = parse_config(config)
        self.fl = c["_flavour"]
        D = self.D = int(c["hidden_size"])
        self.L, self.V = int(c["num_hidden_layers"]), int(c["vocab_size"])
        self.eps = float(c["layer_norm_epsilon"] if self.fl == "hf" else c["norm_eps"])
        self.Din = int(c["expand"] * D)
        self.P = int(c["head_dim"])
        if self.Din % self.P:
            raise ValueError(f"expand*hidden_size {self.Din} is not a multiple of head_dim {self.P}")
        self.H = self.Din // self.P
        if c.get("num_heads") not in (None, 0, self.H):   # HF stores it; fla computes it (and checks)
            raise ValueError(f"num_heads {c['num_heads']} * head_dim {self.P} != expand * hidden_size {self.Din}")
        self.G, self.N, self.K = int(c["n_groups"]), int(c["state_size"]), int(c["conv_kernel"])
        if self.H % self.G:
            raise ValueError(f"num_heads {self.H} is not a multiple of n_groups {self.G}")
        self.conv_dim = self.Din + 2 * self.G * self.N
        lim = c["time_step_limit"] if self.fl == "hf" else c["dt_limit"]
        self.dt_lo, self.dt_hi = float(lim[0]), float(lim[1])
        # transformers ignores rms_norm (always normalises); fla can switch the norm off
        self.use_norm = True if self.fl == "hf" else bool(c["rmsnorm"])
        self.norm_before_gate = False if self.fl == "hf" else bool(c["norm_before_gate"])
        self.D_hdim = self.fl == "fla" and bool(c["D_has_hdim"])
        if norm_groups not in ("group", "full"):
            raise ValueError(norm_groups)
        self.norm_group = self.Din // self.G if norm_groups == "group" else self.Din
        self._w, self._used = weights, set()
        if "backbone.embedding.weight" in weights and "backbone.embeddings.weight" not in weights:
            weights = dict(weights)   # old key name, remapped by both load hooks
            weights["backbone.embeddings.weight"] = weights.pop("backbone.embedding.weight")
            self._w = weights
        self.emb = self.get("backbone.embeddings.weight", (self.V, D))
        self.norm_f = self.get("backbone.norm_f.weight", (D,))
        if c["tie_word_embeddings"]:
            self._used.add("lm_head.weight")
            self.lm_head = self.emb
        else:
            self.lm_head = self.get("lm_head.weight", (self.V, D))
        self.layers = [self._load_layer(i) for i in range(self.L)]
        extra = sorted(set(self._w) - self._used)
        if strict and extra:
            raise ValueError(f"unexpected tensors: {extra}")

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

    def _load_layer(self, i):
        c, D, Din, H = self.cfg, self.D, self.Din, self.H
        p = f"backbone.layers.{i}."
        m = p + "mixer."
        nproj = 2 * Din + 2 * self.G * self.N + H
        L = dict(norm=self.get(p + "norm.weight", (D,)),
                 in_w=self.get(m + "in_proj.weight", (nproj, D)),
                 conv_w=self.get(m + "conv1d.weight", (self.conv_dim, 1, self.K)).reshape(self.conv_dim, self.K),
                 dt_bias=self.get(m + "dt_bias", (H,)), A_log=self.get(m + "A_log", (H,)),
                 D=self.get(m + "D", (Din,) if self.D_hdim else (H,)),
                 out_w=self.get(m + "out_proj.weight", (D, Din)))
        L["in_b"] = self.get(m + "in_proj.bias", (nproj,)) if c["use_bias"] else None
        L["out_b"] = self.get(m + "out_proj.bias", (D,)) if c["use_bias"] else None
        L["conv_b"] = self.get(m + "conv1d.bias", (self.conv_dim,)) if c["use_conv_bias"] else None
        L["norm_w"] = self.get(m + "norm.weight", (Din,)) if self.use_norm else None
        return L

    def new_state(self):
        return [{"conv": np.zeros((self.conv_dim, self.K)), "S": np.zeros((self.H, self.P, self.N))}
                for _ in self.layers]

    def group_of_head(self):
        """B/C group read by each head: h // (H / G) (consecutive heads share a group)."""
        return np.arange(self.H) // (self.H // self.G)

    def forward(self, tokens, state=None):
        tokens = np.asarray(tokens, dtype=np.int64)
        state = self.new_state() if state is None else copy.deepcopy(state)
        h = self.emb[tokens]
        for L, s in zip(self.layers, state):
            h = h + self.mixer(L, rmsnorm(h, L["norm"], self.eps), s)   # residual_in_fp32: moot in f64
        return rmsnorm(h, self.norm_f, self.eps) @ self.lm_head.T, state

    def split_in_proj(self, L, x):
        zxbcdt = x @ L["in_w"].T
        if L["in_b"] is not None:
            zxbcdt = zxbcdt + L["in_b"]
        Din, cd = self.Din, self.conv_dim
        return zxbcdt[:, :Din], zxbcdt[:, Din:Din + cd], zxbcdt[:, Din + cd:]

    def conv(self, L, xbc, s):
        """Depthwise causal conv over time + bias + silu; cache = last K raw inputs."""
        T, K = xbc.shape[0], self.K
        xx = np.concatenate([s["conv"].T, xbc], axis=0)       # [K + T, C]; row K-1+t is input t
        y = np.zeros_like(xbc)
        for j in range(K):                                     # y_t = sum_j w[:, j] x_{t-(K-1)+j}
            y += L["conv_w"][:, j] * xx[1 + j:1 + j + T]
        if L["conv_b"] is not None:
            y = y + L["conv_b"]
        s["conv"] = xx[-K:].T.copy()
        return silu(y)

    def gate_norm(self, L, y, z):
        if not self.use_norm:
            return y * silu(z)
        T, g = y.shape[0], self.norm_group
        w = L["norm_w"]
        if not self.norm_before_gate:
            y = y * silu(z)
        y = rmsnorm(y.reshape(T, -1, g), 1.0, self.eps).reshape(T, -1) * w
        if self.norm_before_gate:
            y = y * silu(z)
        return y

    def mixer(self, L, x, s):
        T, H, P, N, G, Din = x.shape[0], self.H, self.P, self.N, self.G, self.Din
        z, xbc, dt = self.split_in_proj(L, x)
        xbc = self.conv(L, xbc, s)
        xs, B, C = xbc[:, :Din], xbc[:, Din:Din + G * N], xbc[:, Din + G * N:]
        dt = np.clip(softplus(dt + L["dt_bias"]), self.dt_lo, self.dt_hi)    # [T, H]
        A = -np.exp(L["A_log"])                                              # [H]
        xh = xs.reshape(T, H, P)
        grp = self.group_of_head()
        Bh, Ch = B.reshape(T, G, N)[:, grp], C.reshape(T, G, N)[:, grp]      # [T, H, N]
        Dh = L["D"].reshape(H, P) if self.D_hdim else L["D"][:, None]
        y, s["S"] = scan_ssd(xh, dt, A, Bh, Ch, s["S"])
        y = (y + Dh * xh).reshape(T, Din)
        y = self.gate_norm(L, y, z)
        out = y @ L["out_w"].T
        return out if L["out_b"] is None else out + L["out_b"]


def scan_ssd(x, dt, A, B, C, S):
    """Selective scan, token by token. x [T,H,P], dt [T,H], A [H], B/C [T,H,N], S [H,P,N].
    S_t = exp(dt_t A) S_{t-1} + dt_t x_t B_t^T;  y_t = S_t C_t."""
    y = np.zeros(x.shape)
    for t in range(x.shape[0]):
        S = np.exp(dt[t] * A)[:, None, None] * S + (dt[t][:, None] * x[t])[:, :, None] * B[t][:, None, :]
        y[t] = np.einsum("hpn,hn->hp", S, C[t])
    return y, S


def load_model(path, strict=True, norm_groups="group"):
    with open(os.path.join(path, "config.json")) as f:
        cfg = json.load(f)
    tensors, _, _ = load_file(os.path.join(path, "model.safetensors"))
    return Model(cfg, tensors, strict=strict, norm_groups=norm_groups)


