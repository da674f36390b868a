"""Gated DeltaNet causal LM in plain PyTorch, following /work/shared/design/MODELS.md §0 and §1.

Parameter names and shapes are exactly those of fla's GatedDeltaNetForCausalLM, so the
state_dict can be written to model.safetensors unchanged.  Works on CPU (PyTorch 1.13) and GPU.

Two implementations of the gated delta rule:
  * `recurrent_gated_delta_rule`: the per-token recurrence of MODELS.md §1.3 (the reference);
  * `chunk_gated_delta_rule`: the exact chunked WY/UT form of MODELS.md §12 (used for training).
`python3 model.py` runs a self-test that they agree and that the whole model's forward does.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def intermediate_size_for(hidden_size, hidden_ratio=4, intermediate_size=None):
    if intermediate_size is not None:
        return intermediate_size
    i = int(hidden_size * hidden_ratio * 2 / 3)
    return 256 * ((i + 255) // 256)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight.float()
        return y.to(x.dtype)


def l2norm(x, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + eps)


def recurrent_gated_delta_rule(q, k, v, g, beta, state=None):
    """q,k: [B,H,T,dk] (q already scaled, both l2-normalised); v: [B,H,T,dv];
    g (log decay), beta: [B,H,T].  State S: [B,H,dk,dv] (K x V).
    S <- exp(g) S;  u = beta (v - S^T k);  S <- S + k u^T;  o = S^T q."""
    B, H, T, dk = k.shape
    dv = v.shape[-1]
    S = q.new_zeros(B, H, dk, dv) if state is None else state
    outs = []
    for t in range(T):
        S = S * g[:, :, t, None, None].exp()
        kt = k[:, :, t]
        u = beta[:, :, t, None] * (v[:, :, t] - torch.einsum("bhkv,bhk->bhv", S, kt))
        S = S + kt[..., :, None] * u[..., None, :]
        outs.append(torch.einsum("bhkv,bhk->bhv", S, q[:, :, t]))
    return torch.stack(outs, 2), S


def chunk_gated_delta_rule(q, k, v, g, beta, state=None, chunk_size=64):
    """Same contract as recurrent_gated_delta_rule, computed chunk-parallel (WY / UT form).

    Within a chunk (local cumulative log decay b_i, state S0 at chunk start):
      (I + A) U = diag(beta) V - diag(beta e^b) K S0,  A_ij = beta_i e^{b_i-b_j} k_i.k_j  (j < i)
      o_i = e^{b_i} S0^T q_i + sum_{j<=i} e^{b_i-b_j} (q_i.k_j) u_j
      S_C = e^{b_C} S0 + sum_j e^{b_C-b_j} k_j u_j^T
    """
    B, H, T, dk = k.shape
    dv = v.shape[-1]
    C = chunk_size
    pad = (-T) % C
    if pad:  # zero k, v, beta, g: padded steps leave the state unchanged
        q, k, v = (F.pad(x, (0, 0, 0, pad)) for x in (q, k, v))
        g, beta = (F.pad(x, (0, pad)) for x in (g, beta))
    N = (T + pad) // C
    q, k, v = (x.reshape(B, H, N, C, x.shape[-1]) for x in (q, k, v))
    g, beta = (x.reshape(B, H, N, C) for x in (g, beta))

    b = g.cumsum(-1)                                            # [B,H,N,C]
    tri = torch.ones(C, C, dtype=torch.bool, device=q.device).tril()
    diff = (b[..., :, None] - b[..., None, :]).masked_fill(~tri, float("-inf"))
    decay = diff.exp()                                          # e^{b_i-b_j}, j<=i else 0
    A = (beta[..., :, None] * decay * (k @ k.transpose(-1, -2))).tril(-1)
    eye = torch.eye(C, dtype=q.dtype, device=q.device)
    rhs = torch.cat([beta[..., None] * v, (beta * b.exp())[..., None] * k], -1)
    sol = torch.linalg.solve_triangular(eye + A, rhs, upper=False, unitriangular=True)
    U, W = sol[..., :dv], sol[..., dv:]                          # U' and W
    attn = (q @ k.transpose(-1, -2)) * decay                    # [B,H,N,C,C]
    qd = q * b.exp()[..., None]
    kd = k * (b[..., -1:] - b).exp()[..., None]
    bC = b[..., -1].exp()                                        # [B,H,N]

    S = q.new_zeros(B, H, dk, dv) if state is None else state
    outs = []
    for n in range(N):
        u = U[:, :, n] - W[:, :, n] @ S
        outs.append(qd[:, :, n] @ S + attn[:, :, n] @ u)
        S = bC[:, :, n, None, None] * S + kd[:, :, n].transpose(-1, -2) @ u
    o = torch.stack(outs, 2).reshape(B, H, N * C, dv)[:, :, :T]
    return o, S


class ShortConv(nn.Conv1d):
    """Depthwise causal conv (fla ShortConvolution): weight [C,1,W], no bias, silu."""

    def __init__(self, channels, kernel_size):
        super().__init__(channels, channels, kernel_size, groups=channels,
                         padding=kernel_size - 1, bias=False)

    def forward(self, x, cache=None):
        """x: [B,T,C] raw projections; cache: [B,W-1,C] previous raw inputs (None: zeros).
        Returns (silu(conv(x)), new cache = last W-1 raw inputs)."""
        W = self.kernel_size[0]
        if cache is None:
            cache = x.new_zeros(x.shape[0], W - 1, x.shape[2])
        xx = torch.cat([cache.to(x.dtype), x], 1)
        y = F.conv1d(xx.transpose(1, 2), self.weight, None, groups=self.groups)
        return F.silu(y.transpose(1, 2)), xx[:, -(W - 1):]


class GatedDeltaNet(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        D = cfg["hidden_size"]
        self.H = cfg["num_heads"]
        self.HV = cfg.get("num_v_heads") or self.H
        self.dk = cfg["head_dim"]
        self.dv = int(self.dk * cfg["expand_v"])
        key_dim, value_dim = self.H * self.dk, self.HV * self.dv
        assert self.HV == self.H, "GVA not needed here"
        self.q_proj = nn.Linear(D, key_dim, bias=False)
        self.k_proj = nn.Linear(D, key_dim, bias=False)
        self.v_proj = nn.Linear(D, value_dim, bias=False)
        self.a_proj = nn.Linear(D, self.HV, bias=False)
        self.b_proj = nn.Linear(D, self.HV, bias=False)
        # fla init: A ~ U(0, 16); dt ~ logU(1e-3, 1e-1), dt_bias = softplus^-1(dt)
        self.A_log = nn.Parameter(torch.empty(self.HV).uniform_(0, 16).log())
        dt = torch.exp(torch.rand(self.HV) * (math.log(0.1) - math.log(0.001)) + math.log(0.001))
        dt = dt.clamp(min=1e-4)
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))
        self.q_conv1d = ShortConv(key_dim, cfg["conv_size"])
        self.k_conv1d = ShortConv(key_dim, cfg["conv_size"])
        self.v_conv1d = ShortConv(value_dim, cfg["conv_size"])
        self.g_proj = nn.Linear(D, value_dim, bias=False)
        self.o_norm = RMSNorm(self.dv, cfg["norm_eps"])
        self.o_proj = nn.Linear(value_dim, D, bias=False)

    def forward(self, x, recurrent=False, state=None):
        """state: None or (q_cache, k_cache, v_cache, S).  Returns (output, new state)."""
        B, T, _ = x.shape
        qc, kc, vc, S = state if state is not None else (None, None, None, None)
        q, qc = self.q_conv1d(self.q_proj(x), qc)
        k, kc = self.k_conv1d(self.k_proj(x), kc)
        v, vc = self.v_conv1d(self.v_proj(x), vc)
        q = q.view(B, T, self.H, self.dk).transpose(1, 2)
        k = k.view(B, T, self.H, self.dk).transpose(1, 2)
        v = v.view(B, T, self.HV, self.dv).transpose(1, 2)
        q = l2norm(q.float()) * self.dk ** -0.5
        k = l2norm(k.float())
        beta = torch.sigmoid(self.b_proj(x).float()).transpose(1, 2)          # [B,H,T]
        g = (-self.A_log.float().exp() *
             F.softplus(self.a_proj(x).float() + self.dt_bias.float())).transpose(1, 2)
        rule = recurrent_gated_delta_rule if recurrent else chunk_gated_delta_rule
        o, S = rule(q, k, v.float(), g, beta, S)
        o = o.transpose(1, 2)                                                  # [B,T,H,dv]
        gate = self.g_proj(x).view(B, T, self.HV, self.dv)
        o = self.o_norm(o) * F.silu(gate.float())
        return self.o_proj(o.reshape(B, T, -1).to(x.dtype)), (qc, kc, vc, S)


class GatedMLP(nn.Module):
    def __init__(self, D, I):
        super().__init__()
        self.gate_proj = nn.Linear(D, I, bias=False)
        self.up_proj = nn.Linear(D, I, bias=False)
        self.down_proj = nn.Linear(I, D, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        D = cfg["hidden_size"]
        self.attn_norm = RMSNorm(D, cfg["norm_eps"])
        self.attn = GatedDeltaNet(cfg)
        self.mlp_norm = RMSNorm(D, cfg["norm_eps"])
        self.mlp = GatedMLP(D, intermediate_size_for(D, cfg.get("hidden_ratio", 4),
                                                     cfg.get("intermediate_size")))

    def forward(self, h, recurrent=False, state=None):
        a, state = self.attn(self.attn_norm(h), recurrent, state)
        h = h + a
        return h + self.mlp(self.mlp_norm(h)), state


class Backbone(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embeddings = nn.Embedding(cfg["vocab_size"], cfg["hidden_size"])
        self.layers = nn.ModuleList([Block(cfg) for _ in range(cfg["num_hidden_layers"])])
        self.norm = RMSNorm(cfg["hidden_size"], cfg["norm_eps"])


class GatedDeltaNetForCausalLM(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.model = Backbone(cfg)
        self.lm_head = nn.Linear(cfg["hidden_size"], cfg["vocab_size"], bias=False)
        self.reset_parameters(cfg.get("initializer_range", 0.02))

    def reset_parameters(self, std):
        L = self.cfg["num_hidden_layers"]
        for name, p in self.named_parameters():
            if name.endswith("A_log") or name.endswith("dt_bias") or p.dim() == 1:
                continue
            if "conv1d" in name:
                continue  # keep PyTorch's Conv1d default init
            nn.init.normal_(p, std=std)
            if name.endswith("o_proj.weight") or name.endswith("down_proj.weight"):
                p.data /= math.sqrt(2 * L)  # GPT-2 style residual-branch scaling

    def hidden(self, ids, recurrent=False, state=None):
        """Final-norm hidden states and the new per-layer state list."""
        h = self.model.embeddings(ids)
        new = []
        for i, layer in enumerate(self.model.layers):
            h, st = layer(h, recurrent, None if state is None else state[i])
            new.append(st)
        return self.model.norm(h), new

    def forward(self, ids, recurrent=False, state=None, return_state=False):
        h, new = self.hidden(ids, recurrent, state)
        logits = self.lm_head(h)
        return (logits, new) if return_state else logits


def _selftest():
    torch.manual_seed(0)
    B, H, T, dk, dv = 2, 3, 150, 16, 32
    q = l2norm(torch.randn(B, H, T, dk, dtype=torch.float64)) * dk ** -0.5
    k = l2norm(torch.randn(B, H, T, dk, dtype=torch.float64))
    v = torch.randn(B, H, T, dv, dtype=torch.float64)
    g = -torch.rand(B, H, T, dtype=torch.float64) * 2
    beta = torch.rand(B, H, T, dtype=torch.float64)
    s0 = torch.randn(B, H, dk, dv, dtype=torch.float64)
    o1, s1 = recurrent_gated_delta_rule(q, k, v, g, beta, s0)
    for C in (16, 64):
        o2, s2 = chunk_gated_delta_rule(q, k, v, g, beta, s0, chunk_size=C)
        err = max((o1 - o2).abs().max().item(), (s1 - s2).abs().max().item())
        print(f"chunk({C}) vs recurrent, float64: max abs diff {err:.2e}")
        assert err < 1e-9
    cfg = dict(hidden_size=64, num_hidden_layers=2, num_heads=2, head_dim=16, expand_v=2,
               conv_size=4, norm_eps=1e-6, vocab_size=100, hidden_ratio=4)
    m = GatedDeltaNetForCausalLM(cfg)
    ids = torch.randint(0, 100, (2, 130))
    with torch.no_grad():
        a, b = m(ids), m(ids, recurrent=True)
    err = (a - b).abs().max().item()
    print(f"model chunk vs recurrent, float32: max abs logit diff {err:.2e}")
    assert err < 1e-4
    # streaming in pieces with carried state == one call
    with torch.no_grad():
        st, pieces = None, []
        for s0, s1 in ((0, 1), (1, 50), (50, 51), (51, 130)):
            lg, st = m(ids[:, s0:s1], state=st, return_state=True)
            pieces.append(lg)
    err = (torch.cat(pieces, 1) - a).abs().max().item()
    print(f"model streamed in pieces vs one call: max abs logit diff {err:.2e}")
    assert err < 1e-4
    names = sorted(n for n, _ in m.named_parameters())
    print("\n".join(f"  {n} {list(dict(m.named_parameters())[n].shape)}" for n in names[:20]))
    print("self-test ok")


if __name__ == "__main__":
    _selftest()
