#!/usr/bin/python3
"""Self-checks for fla_reference.py, safetensors_io.py and the fixtures.

usage: /usr/bin/python3 check_reference.py [--fixtures DIR]
(without --fixtures the fixtures are regenerated into a temporary directory)
Prints one line per check and finally "N passed, M failed"; exit status 1 on failure.
"""
import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fla_reference as ref  # noqa: E402
import make_fixtures  # noqa: E402
import safetensors_io as st  # noqa: E402

RESULTS = []


def check(name, ok, detail=""):
    RESULTS.append(bool(ok))
    print(f"[{'PASS' if ok else 'FAIL'}] {name}" + (f"  ({detail})" if detail else ""))


def close(a, b, tol=1e-9):
    a, b = np.asarray(a), np.asarray(b)
    err = float(np.max(np.abs(a - b)) / max(1.0, float(np.max(np.abs(b)))))
    return err <= tol, f"rel err {err:.2e}"


# --------------------------------------------------------------------------------------
# independent chunked / parallel formulations (what fla's chunk kernels compute)
# --------------------------------------------------------------------------------------
def _decay_matrix(b):
    """exp(b_i - b_j) for j <= i, 0 above the diagonal (no overflow)."""
    n = len(b)
    d = b[:, None] - b[None, :]
    return np.exp(np.where(np.tril(np.ones((n, n), bool)), d, -np.inf))


def chunk_delta_wy(q, k, v, beta, g, h, C=64):
    """One head, K-first state h [dk, dv]; q pre-scaled. WY/UT transform per chunk
    (fla/ops/gated_delta_rule/chunk.py): A = tril(beta_i e^{b_i-b_j} k_i.k_j, -1), T = (I+A)^-1,
    W = T diag(beta e^b) K, U = T diag(beta) V, V' = U - W h, o = e^b q h + (QK^T * decay) V'."""
    T_ = q.shape[0]
    o = np.zeros((T_, v.shape[1]))
    for s in range(0, T_, C):
        e = min(s + C, T_)
        qc, kc, vc, bc = q[s:e], k[s:e], v[s:e], beta[s:e]
        b = np.cumsum(g[s:e])
        dec = _decay_matrix(b)
        A = np.tril(bc[:, None] * dec * (kc @ kc.T), -1)
        Tm = np.linalg.inv(np.eye(e - s) + A)
        W = Tm @ (bc[:, None] * np.exp(b)[:, None] * kc)
        U = Tm @ (bc[:, None] * vc)
        Vp = U - W @ h
        o[s:e] = np.exp(b)[:, None] * (qc @ h) + (dec * (qc @ kc.T)) @ Vp
        h = np.exp(b[-1]) * h + (kc * np.exp(b[-1] - b)[:, None]).T @ Vp
    return o, h


def chunk_gla(q, k, v, gk, h, C=64):
    """One head, K-first h [dk, dv]; per-key-channel log gates gk [T, dk]."""
    T_ = q.shape[0]
    o = np.zeros((T_, v.shape[1]))
    for s in range(0, T_, C):
        e = min(s + C, T_)
        qc, kc, vc = q[s:e], k[s:e], v[s:e]
        B = np.cumsum(gk[s:e], axis=0)
        n = e - s
        mask = np.tril(np.ones((n, n), bool))[:, :, None]
        E = np.exp(np.where(mask, B[:, None, :] - B[None, :, :], -np.inf))
        A = np.einsum("id,jd,ijd->ij", qc, kc, E)
        o[s:e] = (qc * np.exp(B)) @ h + A @ vc
        h = np.exp(B[-1])[:, None] * h + (kc * np.exp(B[-1] - B)).T @ vc
    return o, h


def conv_np(x, w, act):
    """Causal depthwise conv via np.convolve, zero history."""
    w = w.reshape(w.shape[0], -1)
    T_ = x.shape[0]
    y = np.stack([np.convolve(x[:, c], w[c, ::-1])[:T_] for c in range(x.shape[1])], axis=1)
    return ref.silu(y) if act else y


def parallel_forward(m, tokens):
    """Whole model with chunked/parallel token mixers (no recurrent loops)."""
    c, eps = m.cfg, m.eps
    h = m.emb[tokens]
    T_ = len(tokens)
    for L in m.layers:
        x = ref.rmsnorm(h, L["attn_norm"], eps)
        q, k, v = x @ L["q"].T, x @ L["k"].T, x @ L["v"].T
        conv = "q_conv" in L
        mt = m.mt
        if mt in ("gated_deltanet", "delta_net"):
            qk_silu = mt == "gated_deltanet" or c["qk_activation"] == "silu"
            if conv:
                q, k, v = conv_np(q, L["q_conv"], qk_silu), conv_np(k, L["k_conv"], qk_silu), conv_np(v, L["v_conv"], True)
            else:
                if qk_silu:
                    q, k = ref.silu(q), ref.silu(k)
                v = ref.silu(v)
            q, k, v = q.reshape(T_, -1, m.dk), k.reshape(T_, -1, m.dk), v.reshape(T_, -1, m.dv)
            if mt == "delta_net":
                act = c["qk_activation"]
                f = {"relu": lambda a: np.maximum(a, 0), "elu": lambda a: np.where(a > 0, a + 1, np.exp(np.minimum(a, 0))),
                     "silu": lambda a: a, "identity": lambda a: a}[act]
                q, k = f(q), f(k)
            if mt == "gated_deltanet" or c["qk_norm"] == "l2":
                q = q / np.sqrt((q ** 2).sum(-1, keepdims=True) + 1e-6)
                k = k / np.sqrt((k ** 2).sum(-1, keepdims=True) + 1e-6)
            else:
                q, k = q / q.sum(-1, keepdims=True), k / k.sum(-1, keepdims=True)
            if mt == "gated_deltanet":
                nv = m.HV
                beta = 1 / (1 + np.exp(-(x @ L["b_proj"].T)))
                sp = x @ L["a_proj"].T + L["dt_bias"]
                g = -np.exp(L["A_log"]) * np.where(sp > 20, sp, np.log1p(np.exp(np.minimum(sp, 20))))
            else:
                nv = m.H
                beta = 1 / (1 + np.exp(-(x @ L["b_proj"].T))) if c["use_beta"] else np.ones((T_, nv))
                g = np.zeros((T_, nv))
            if c["allow_neg_eigval"]:
                beta = 2 * beta
            o = np.zeros((T_, nv, m.dv))
            for hv in range(nv):
                hq = hv * m.H // nv
                o[:, hv], _ = chunk_delta_wy(q[:, hq] * m.dk ** -0.5, k[:, hq], v[:, hv], beta[:, hv], g[:, hv],
                                             np.zeros((m.dk, m.dv)))
            o = ref.rmsnorm(o, L["o_norm"], eps)
            if c["use_gate"]:
                o = o * ref.silu((x @ L["g"].T).reshape(T_, nv, m.dv))
            out = o.reshape(T_, -1) @ L["o"].T
        elif mt in ("gla", "retnet"):
            if conv:
                q, k, v = conv_np(q, L["q_conv"], True), conv_np(k, L["k_conv"], True), conv_np(v, L["v_conv"], True)
            H, G, dk, dv = m.H, m.G, m.dk, m.dv
            q = q.reshape(T_, H, dk)
            k = np.repeat(k.reshape(T_, H // G, dk), G, axis=1)
            v = np.repeat(v.reshape(T_, H // G, dv), G, axis=1)
            fm = ref.ACT2FN[c["feature_map"]] if c["feature_map"] else (lambda a: a)
            o = np.zeros((T_, H, dv))
            if mt == "gla":
                gk = np.repeat(((x @ L["gk0"].T) @ L["gk1"].T + L["gk1b"]).reshape(T_, H // G, dk), G, axis=1)
                gk = -np.logaddexp(0, -gk) / 16
                if c["clamp_min"] is not None:
                    gk = np.maximum(gk, c["clamp_min"])
                q, k = fm(q), fm(k)
                for j in range(H):
                    o[:, j], _ = chunk_gla(q[:, j] * dk ** -0.5, k[:, j], v[:, j], gk[:, j], np.zeros((dk, dv)))
            else:
                q, k = fm(q), fm(k)
                pos = np.arange(T_)[:, None]
                ang = pos * 10000.0 ** (-np.arange(0, dk, 2) / dk)
                rot = lambda a: a * np.tile(np.cos(ang), 2)[:, None] + np.concatenate(  # noqa: E731
                    [-a[..., dk // 2:], a[..., :dk // 2]], -1) * np.tile(np.sin(ang), 2)[:, None]
                q, k = rot(q), rot(k)
                for j in range(H):
                    gamma = 1 - 2.0 ** (-5 - j)
                    D_ = np.tril(gamma ** (np.arange(T_)[:, None] - np.arange(T_)[None, :]).clip(0))
                    o[:, j] = ((q[:, j] @ k[:, j].T) * D_ * dk ** -0.5) @ v[:, j]
            o = ref.rmsnorm(o, L["g_norm"], eps).reshape(T_, -1)
            if c["use_output_gate"]:
                o = o * ref.silu(x @ L["g"].T)
            out = o @ L["o"].T
        else:  # linear_attn: quadratic causal form
            H, G, dk, dv = m.H, m.G, m.dk, m.dv
            q = q.reshape(T_, H, dk)
            k = np.repeat(k.reshape(T_, H // G, dk), G, axis=1)
            v = np.repeat(v.reshape(T_, H // G, dv), G, axis=1)
            q, k = ref.feature_map(c["feature_map"], q, L["fm_q"]), ref.feature_map(c["feature_map"], k, L["fm_k"])
            if c["norm_q"]:
                q = q / (q.sum(-1, keepdims=True) + 1e-4)
            if c["norm_k"]:
                k = k / (k.sum(-1, keepdims=True) + 1e-4)
            scale = q.shape[-1] ** -0.5
            o = np.zeros((T_, H, dv))
            for j in range(H):
                A = np.tril(q[:, j] @ k[:, j].T) * scale
                o[:, j] = A @ v[:, j]
                if c["norm_feature_map"]:
                    o[:, j] /= (A.sum(1) + 1e-10)[:, None]
            out = ref.rmsnorm(o, L["norm"], eps).reshape(T_, -1) @ L["o"].T
        h = h + out
        x = ref.rmsnorm(h, L["mlp_norm"], eps)
        h = h + (ref.silu(x @ L["gate"].T) * (x @ L["up"].T)) @ L["down"].T
    return ref.rmsnorm(h, m.final_norm, eps) @ m.lm_head.T


# --------------------------------------------------------------------------------------
# checks
# --------------------------------------------------------------------------------------
def check_kernels():
    rng = np.random.default_rng(0)
    T_, H, dk, dv = 150, 3, 8, 12
    q = ref.l2norm(rng.normal(size=(T_, H, dk))) * dk ** -0.5
    k = ref.l2norm(rng.normal(size=(T_, H, dk)))
    v = rng.normal(size=(T_, H, dv))
    beta = rng.uniform(0, 2, (T_, H))
    g = -rng.uniform(0, 0.5, (T_, H))
    S0 = rng.normal(size=(H, dv, dk))  # V-first
    o, S = ref.rec_gated_delta(q, k, v, g, beta, S0)
    for C in (64, 16):
        oc = np.zeros_like(o)
        Sc = np.zeros((H, dk, dv))
        for j in range(H):
            oc[:, j], Sc[j] = chunk_delta_wy(q[:, j], k[:, j], v[:, j], beta[:, j], g[:, j], S0[j].T, C)
        ok1, d1 = close(oc, o)
        ok2, d2 = close(Sc.transpose(0, 2, 1), S)
        check(f"gated delta rule: recurrent == chunked WY (C={C}, h0!=0)", ok1 and ok2, d1 + ", state " + d2)
    # naive fla formula (naive_recurrent_gated_delta_rule, K-first): h*=e^g; v-=h^T k; v*=beta; h+=k v^T
    h = S0.transpose(0, 2, 1).copy()
    on = np.zeros_like(o)
    for t in range(T_):
        h = h * np.exp(g[t])[:, None, None]
        u = (v[t] - np.einsum("hkv,hk->hv", h, k[t])) * beta[t][:, None]
        h = h + k[t][:, :, None] * u[:, None, :]
        on[t] = np.einsum("hk,hkv->hv", q[t], h)
    check("gated delta rule == fla naive_recurrent_gated_delta_rule", *close(on, o))
    # delta rule = gated delta rule with g = 0 (K-first state)
    od, Sd = ref.rec_delta(q, k, v, beta, S0.transpose(0, 2, 1))
    og, Sg = ref.rec_gated_delta(q, k, v, np.zeros_like(g), beta, S0)
    check("delta rule == gated delta rule with g=0", close(od, og)[0] and close(Sd.transpose(0, 2, 1), Sg)[0])
    # GLA
    gk = -rng.uniform(0, 0.3, (T_, H, dk))
    qq, kk = rng.normal(size=(T_, H, dk)), rng.normal(size=(T_, H, dk))
    o, S = ref.rec_gla(qq, kk, v, gk, S0)
    oc = np.zeros_like(o)
    for j in range(H):
        oc[:, j], _ = chunk_gla(qq[:, j], kk[:, j], v[:, j], gk[:, j], S0[j].T)
    check("GLA: recurrent == chunked (C=64, h0!=0)", *close(oc, o))
    # retention == GLA with a constant per-head gate
    lg = ref.retention_log_decay(H)
    o1, _ = ref.rec_retention(qq, kk, v, lg, S0.transpose(0, 2, 1))
    o2, _ = ref.rec_gla(qq, kk, v, np.broadcast_to(lg[None, :, None], gk.shape), S0)
    check("retention == GLA with gk = log(1-2^(-5-h))", *close(o1, o2))
    check("retention decays 1-2^-5, 1-2^-6, 1-2^-7", np.allclose(np.exp(lg), [31 / 32, 63 / 64, 127 / 128], 0, 1e-15))
    # linear attention normalizer vs quadratic form
    qf, kf = np.abs(qq), np.abs(kk)
    o, _, z, den = ref.rec_linear(qf, kf, v, np.zeros((H, dk, dv)), np.zeros((H, dk)))
    A = np.einsum("thd,shd->hts", qf, kf) * np.tril(np.ones((T_, T_)))[None]
    oq = np.einsum("hts,shv->thv", A, v) / (A.sum(-1).T[:, :, None] + 1e-10)
    check("linear attn (normalized): recurrent == quadratic", *close(o, oq))
    check("gva_qk_head(8, 2) consecutive grouping", list(ref.gva_qk_head(8, 2)) == [0, 0, 0, 0, 1, 1, 1, 1])


def check_pieces():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(20, 5))
    w = rng.normal(size=(5, 1, 4))
    y, cache = ref.causal_conv(x, w, np.zeros((5, 4)), True)
    ya, ca = ref.causal_conv(x[:7], w, np.zeros((5, 4)), True)
    yb, cb = ref.causal_conv(x[7:], w, ca, True)
    check("short conv == np.convolve form; cache carries", close(y, conv_np(x, w, True))[0]
          and close(np.concatenate([ya, yb]), y)[0] and np.array_equal(cb, cache) and np.array_equal(cache, x[-4:].T))
    for D, r, want in ((2048, 4, 5632), (1024, 4, 2816), (2048, 2, 2816), (2560, 4, 6912), (64, 13, 768)):
        got = ref.intermediate_size({"hidden_size": D, "hidden_ratio": r, "intermediate_size": None})
        check(f"intermediate size D={D} r={r} -> {want}", got == want, f"got {got}")
    check("intermediate size: hidden_ratio null -> 4, explicit wins",
          ref.intermediate_size({"hidden_size": 1024, "hidden_ratio": None}) == 2816
          and ref.intermediate_size({"hidden_size": 1024, "hidden_ratio": 4, "intermediate_size": 100}) == 100)
    # feature maps
    xv = rng.normal(size=(3, 6))
    y = ref.feature_map("dpfp", xv, {})
    r = np.concatenate([np.maximum(xv, 0), -np.maximum(xv, 0)], -1)
    n = r.shape[-1]
    want = np.array([[r[a, i] * r[a, (i - j) % n] for j in range(1, 5) for i in range(n)] for a in range(3)])
    check("dpfp: [relu,-relu] * torch.roll(shift j) blocks, dim 8*dk", y.shape == (3, 48) and np.allclose(y, want))
    p = {"layer.weight": rng.normal(size=(6, 6)), "layer.bias": rng.normal(size=6)}
    y = ref.feature_map("hedgehog", xv, p)
    zz = 2 * (xv @ p["layer.weight"].T + p["layer.bias"])
    e = np.exp(np.concatenate([zz, -zz], -1))
    check("hedgehog = softmax([2z,-2z])", np.allclose(y, e / e.sum(-1, keepdims=True)) and y.shape == (3, 12))
    check("elu feature map = elu(x)+1", np.allclose(ref.feature_map("elu", xv, {}),
                                                    np.where(xv > 0, xv + 1, np.exp(xv))))
    # RoPE: scores depend only on relative position; rotation preserves norms
    m = ref.Model.__new__(ref.Model)
    qv, kv = rng.normal(size=(1, 1, 16)), rng.normal(size=(1, 1, 16))
    s1 = (m._rope(qv, np.array([10.0])) * m._rope(kv, np.array([3.0]))).sum()
    s2 = (m._rope(qv, np.array([107.0])) * m._rope(kv, np.array([100.0]))).sum()
    rq = m._rope(qv, np.array([5.0]))[0, 0]
    ang = 5.0 * 10000.0 ** (-np.arange(8) / 8)
    hand = np.concatenate([qv[0, 0, :8] * np.cos(ang) - qv[0, 0, 8:] * np.sin(ang),
                           qv[0, 0, 8:] * np.cos(ang) + qv[0, 0, :8] * np.sin(ang)])
    check("RoPE: NeoX halves, relative-position invariance", abs(s1 - s2) < 1e-12 and np.allclose(rq, hand))
    check("softplus threshold 20 / logsigmoid stable", ref.softplus(np.array([25.0]))[0] == 25.0
          and np.isclose(ref.logsigmoid(np.array([-800.0]))[0], -800.0))


def check_safetensors(tmp):
    rng = np.random.default_rng(2)
    t = {"a.weight": rng.normal(size=(3, 5)), "b": rng.normal(size=(7,)), "c.scalar": rng.normal(size=())}
    for dt in ("F32", "BF16", "F16"):
        p = os.path.join(tmp, f"rt_{dt}.safetensors")
        st.save_file(t, p, dtype=dt, metadata={"format": "pt"})
        back, dts, meta = st.load_file(p)
        raw = open(p, "rb").read()
        n = int.from_bytes(raw[:8], "little")
        hdr = json.loads(raw[8:8 + n])
        offs = sorted(v["data_offsets"] for k, v in hdr.items() if k != "__metadata__")
        contiguous = offs[0][0] == 0 and all(a[1] == b[0] for a, b in zip(offs, offs[1:])) \
            and offs[-1][1] == len(raw) - 8 - n
        ok = (all(np.array_equal(back[k], st.round_to_dtype(t[k], dt)) and back[k].shape == t[k].shape for k in t)
              and set(dts.values()) == {dt} and meta == {"format": "pt"} and (8 + n) % 8 == 0 and contiguous)
        check(f"safetensors round trip {dt} (aligned header, packed offsets, metadata)", ok)
    # bf16 round-to-nearest-even on exact ties and a normal rounding case
    vals = np.array([1.0 + 2 ** -8, 1.0 + 3 * 2 ** -8, 1.0 + 2 ** -8 + 2 ** -20, -2.5, 65504.0, 3.0e38])
    bits = st.f32_to_bf16_bits(vals)
    want = [0x3F80, 0x3F82, 0x3F81, 0xC020, 0x4780, 0x7F62]
    ok = all(w is None or int(b) == w for b, w in zip(bits, want)) and np.isfinite(st.bf16_bits_to_f32(bits[-1:]))[0]
    check("bf16 rounding: ties-to-even, round-up above tie", ok, " ".join(hex(int(b)) for b in bits))


def check_fixtures(fx):
    names = open(os.path.join(fx, "cases.txt")).read().split()
    req = {"gdn_default", "gdn_nogate", "gdn_noconv", "gdn_negeig", "gdn_gva", "gdn_tied", "gdn_bf16", "gdn_f16",
           "gdn_intermediate", "deltanet_default", "deltanet_relu_sum", "deltanet_elu", "deltanet_identity",
           "deltanet_gate", "deltanet_nobeta", "deltanet_noconv", "deltanet_negeig", "gla_default", "gla_conv",
           "gla_kvgroups", "gla_featuremap_relu_clamp", "gla_nogate", "gla_nonfused", "retnet_default",
           "retnet_kvgroups", "retnet_nogate", "linear_attn_tied", "linear_attn_kvgroups"}
    check(f"cases.txt lists {len(names)} cases incl. all required", req <= set(names), str(sorted(req - set(names))))
    for name in names:
        d = os.path.join(fx, name)
        exp = json.load(open(os.path.join(d, "expected.json")))
        cfg = json.load(open(os.path.join(d, "config.json")))
        toks = np.array(exp["tokens"])
        V = exp["vocab_size"]
        logits = np.fromfile(os.path.join(d, exp["logits_file"]), dtype="<f8")
        m = ref.load_model(d)
        _, dts, _ = st.load_file(os.path.join(d, "model.safetensors"))
        ok_meta = (logits.size == len(toks) * V and set(dts.values()) == {exp["weights_dtype"]}
                   and cfg["architectures"] == [ref.ARCHITECTURES[cfg["model_type"]]] and len(toks) > 64)
        logits = logits.reshape(len(toks), V)
        full, state = m.forward(toks)
        ok1, d1 = close(full, logits, 1e-12)  # bitwise only with the same BLAS setup
        par = parallel_forward(m, toks)
        ok2, d2 = close(par, full, 1e-9)
        # state carry: 37 tokens, then 27, then 6 single-token (decode) steps
        s = None
        outs = []
        for a, b in ((0, 37), (37, 64), (64, 65), (65, 66), (66, 67), (67, 68), (68, 69), (69, 70)):
            lo, s = m.forward(toks[a:b], s)
            outs.append(lo)
        ok3, d3 = close(np.concatenate(outs), full, 1e-10)
        ok4 = all(np.array_equal(x, y) for x, y in zip(_flat(s), _flat(state)) if x.dtype.kind == "i") \
            and all(close(x, y, 1e-10)[0] for x, y in zip(_flat(s), _flat(state)))
        check(f"fixture {name}: file==ref, ref==chunked/parallel, split-state==full",
              ok_meta and ok1 and ok2 and ok3 and ok4, f"{d2}; split {d3}")


def _flat(state):
    out = []
    for s in state:
        for key in sorted(s):
            v = s[key]
            out.extend([np.asarray(a) for a in v] if isinstance(v, tuple) else [np.asarray(v)])
    return out


def check_sensitivity(fx):
    """The fixtures must catch typical misreadings of fla (each mutation must move the logits)."""
    def diff(case, mutate_cfg=None, patch=None):
        d = os.path.join(fx, case)
        exp = json.load(open(os.path.join(d, "expected.json")))
        cfg = json.load(open(os.path.join(d, "config.json")))
        tensors, _, _ = st.load_file(os.path.join(d, "model.safetensors"))
        if mutate_cfg:
            cfg.update(mutate_cfg)
        saved = {}
        for (obj, attr), val in (patch or {}).items():
            saved[(obj, attr)] = getattr(obj, attr)
            setattr(obj, attr, val)
        try:
            lg, _ = ref.Model(cfg, tensors, strict=False).forward(exp["tokens"])
        finally:
            for (obj, attr), val in saved.items():
                setattr(obj, attr, val)
        want = np.fromfile(os.path.join(d, exp["logits_file"]), "<f8").reshape(lg.shape)
        return float(np.abs(lg - want).max())

    fm0 = ref.feature_map

    def dpfp_paper(kind, x, p):
        if kind != "dpfp":
            return fm0(kind, x, p)
        r = np.concatenate([np.maximum(x, 0), np.maximum(-x, 0)], -1)
        return np.concatenate([r * np.roll(r, j, -1) for j in range(1, 5)], -1)

    def hedgehog_1x(kind, x, p):
        if kind != "hedgehog":
            return fm0(kind, x, p)
        return fm0(kind, x, {"layer.weight": p["layer.weight"] / 2, "layer.bias": p["layer.bias"] / 2})

    def rope_interleaved(self, x, pos):
        d = x.shape[-1]
        ang = pos[:, None] * 10000.0 ** (-np.arange(0, d, 2) / d)
        c, s = np.cos(ang)[:, None], np.sin(ang)[:, None]
        y = x.copy()
        y[..., 0::2], y[..., 1::2] = x[..., 0::2] * c - x[..., 1::2] * s, x[..., 1::2] * c + x[..., 0::2] * s
        return y

    muts = [
        ("gdn_negeig", "beta not doubled", dict(allow_neg_eigval=False), None),
        ("gdn_gva", "GVA head map hv % H", None, {(ref, "gva_qk_head"): lambda HV, H: np.arange(HV) % H}),
        ("gdn_default", "conv without silu", None,
         {(ref, "causal_conv"): lambda x, w, c, act, f=ref.causal_conv: f(x, w, c, False)}),
        ("deltanet_relu_sum", "l2 instead of sum norm", dict(qk_norm="l2"), None),
        ("deltanet_elu", "elu without +1", None, {(ref, "elu_p1"): lambda x: np.where(x > 0, x, np.expm1(x))}),
        ("gla_featuremap_relu_clamp", "clamp_min ignored", dict(clamp_min=None), None),
        ("gla_featuremap_relu_clamp", "feature_map ignored", dict(feature_map=None), None),
        ("retnet_default", "interleaved RoPE", None, {(ref.Model, "_rope"): rope_interleaved}),
        ("retnet_default", "decays 1-2^(-6-h)", None,
         {(ref, "retention_log_decay"): lambda H: np.log(1 - 2.0 ** (-6.0 - np.arange(H)))}),
        ("linear_attn_hedgehog", "softmax([z,-z]) (no factor 2)", None, {(ref, "feature_map"): hedgehog_1x}),
        ("linear_attn_dpfp", "paper DPFP [relu(x), relu(-x)]", None, {(ref, "feature_map"): dpfp_paper}),
        ("linear_attn_normfm", "norm_feature_map ignored", dict(norm_feature_map=False), None),
        ("linear_attn_normqk", "norm_k ignored", dict(norm_k=False), None),
    ]
    for case, what, mc, patch in muts:
        dd = diff(case, mc, patch)
        check(f"sensitivity {case}: '{what}' changes logits", dd > 1e-3, f"max |dlogit| {dd:.3g}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixtures")
    args = ap.parse_args()
    t0 = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        fx = args.fixtures
        if fx is None:
            fx = os.path.join(tmp, "fixtures")
            make_fixtures.main(["--out", fx])
        check_kernels()
        check_pieces()
        check_safetensors(tmp)
        check_fixtures(fx)
        check_sensitivity(fx)
    n_ok = sum(RESULTS)
    print(f"{n_ok} passed, {len(RESULTS) - n_ok} failed  ({time.time() - t0:.1f}s)")
    sys.exit(0 if n_ok == len(RESULTS) else 1)


if __name__ == "__main__":
    main()
