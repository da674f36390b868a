#!/usr/bin/python3
"""Self-checks for qwen3_5_reference.py, fla_attention_reference.py and the hybrid fixtures.

usage: /usr/bin/python3 check_hybrid_reference.py [--fixtures DIR]
(without --fixtures the fixtures are regenerated into a temporary directory)
Prints one line per check and finally "N passed, M failed"; exit status 1 on failure.

The second, independent whole-model implementation here (`qwen_parallel` / `fla_parallel`) uses
chunked WY gated delta rule (check_reference.chunk_delta_wy), np.convolve and full masked-matrix
softmax attention. It takes "misreading" knobs: each one must move some fixture's logits a lot
(mutation checks), while the plain setting must equal the stored logits.
"""
import argparse
import copy
import json
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_reference as cr  # noqa: E402
import fla_attention_reference as far  # noqa: E402
import fla_reference as fla  # noqa: E402
import make_hybrid_fixtures  # noqa: E402
import qwen3_5_reference as qwen  # noqa: E402

RESULTS = []


def check(name, ok, detail=""):
    RESULTS.append(bool(ok))
    print(f"[{'PASS' if ok else 'FAIL'}] {name}" + (f"  ({detail})" if detail else ""))


def close(a, b, tol=1e-9):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        return False, f"shape {a.shape} != {b.shape}"
    err = float(np.max(np.abs(a - b)) / max(1.0, float(np.max(np.abs(b))))) if a.size else 0.0
    return err <= tol, f"rel err {err:.2e}"


def sig(x):
    return 1.0 / (1.0 + np.exp(-x))


# --------------------------------------------------------------------------------------
# second implementation: masked-matrix attention, chunked GDN, np.convolve
# --------------------------------------------------------------------------------------
def masked_attention(q, k, v, scale, window=None, kv_map="grouped"):
    """q [T, H, d], k/v [T, KVH, d]: full score matrix with a causal (and window) mask."""
    T, H, _ = q.shape
    KVH = k.shape[1]
    kv = np.arange(H) // (H // KVH) if kv_map == "grouped" else np.arange(H) % KVH
    i, j = np.arange(T)[:, None], np.arange(T)[None, :]
    mask = j <= i
    if window is not None:
        mask &= j > i - window
    s = np.einsum("thd,shd->hts", q, k[:, kv]) * scale
    s = np.where(mask[None], s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return np.einsum("hts,shd->thd", p, v[:, kv])


def rope_ref(x, pos, theta, rot, layout="halves"):
    """Independent RoPE: explicit cos/sin tables, halves (rotate_half) or interleaved pairs."""
    out = x.copy()
    if rot == 0:
        return out
    inv = theta ** (-np.arange(rot // 2) * 2.0 / rot)
    ang = np.outer(pos, inv)
    c, s = np.cos(ang)[:, None], np.sin(ang)[:, None]
    if layout == "halves":
        a, b = x[..., :rot // 2], x[..., rot // 2:rot]
        out[..., :rot // 2], out[..., rot // 2:rot] = a * c - b * s, b * c + a * s
    else:
        a, b = x[..., 0:rot:2], x[..., 1:rot:2]
        out[..., 0:rot:2], out[..., 1:rot:2] = a * c - b * s, b * c + a * s
    return out


def chunked_gdn(q, k, v, beta, g, head_of_v, C=64):
    """q (scaled), k [T, Hk, dk]; v [T, HV, dv]; per value head chunked WY form, zero initial state."""
    T, HV, dv = v.shape
    o = np.zeros((T, HV, dv))
    for hv in range(HV):
        kh = head_of_v[hv]
        o[:, hv], _ = cr.chunk_delta_wy(q[:, kh], k[:, kh], v[:, hv], beta[:, hv], g[:, hv],
                                        np.zeros((q.shape[2], dv)), C)
    return o


QWEN_KNOBS = dict(norm_offset=1.0, gdn_norm_offset=0.0, rope_layout="halves", rotary_dim=None, gva="grouped",
                  qgate_split="interleaved", gate_act="sigmoid", A_exp=True, conv_order="qkv", qk_norm="before_rope",
                  kv_map="grouped", lm_head="model", C=64, l2_eps=1e-6, moe_renorm=None, moe_gate_up="gate_up",
                  moe_shared_gate=True)


def moe_parallel(m, L, x, kn):
    """Qwen3_5MoeSparseMoeBlock for every token at once: every expert on every token (einsum), the top
    k by router logit (argsort), weights softmax over the chosen logits; knobs = misreadings."""
    logits = x @ L["router"].T
    top = np.argsort(-logits, axis=1, kind="stable")[:, :m.topk]
    sel = np.take_along_axis(logits, top, 1)
    if kn["moe_renorm"] if kn["moe_renorm"] is not None else m.cfg["norm_topk_prob"]:
        w = np.exp(sel - sel[:, :1])
        w /= w.sum(1, keepdims=True)
    else:  # the top k's probabilities as they are (norm_topk_prob false)
        p = np.exp(logits - logits.max(1, keepdims=True))
        w = np.take_along_axis(p / p.sum(1, keepdims=True), top, 1)
    eg, eu = (L["eg"], L["eu"]) if kn["moe_gate_up"] == "gate_up" else (L["eu"], L["eg"])
    G, U = np.einsum("eid,td->tei", eg, x), np.einsum("eid,td->tei", eu, x)
    Y = np.einsum("edi,tei->ted", L["ed"], G * sig(G) * U)
    out = np.einsum("tk,tkd->td", w, np.take_along_axis(Y, top[..., None], 1))
    gs, us = x @ L["sg"].T, x @ L["su"].T
    shared = (gs * sig(gs) * us) @ L["sd"].T
    return out + (sig(x @ L["sgate"].T) if kn["moe_shared_gate"] else 1.0) * shared


def qwen_parallel(m, tokens, **knobs):
    """Whole Qwen3.5 text model from the weights loaded in reference model m; knobs = misreadings."""
    kn = dict(QWEN_KNOBS, **knobs)
    c, eps = m.cfg, m.eps
    T = len(tokens)

    def norm(x, w, off):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * (off + w)
    h = m.emb[np.asarray(tokens)]
    for L in m.layers:
        x = norm(h, L["in_norm"], kn["norm_offset"])
        if L["type"] == "linear_attention":
            kd, vd = m.key_dim, m.value_dim
            raw = x @ L["qkv"].T
            w = L["conv"]
            if kn["conv_order"] != "qkv":  # channels read as [k | q | v]
                w = np.concatenate([w[kd:2 * kd], w[:kd], w[2 * kd:]])
            mixed = cr.conv_np(raw, w, True)
            q, k, v = mixed[:, :kd], mixed[:, kd:2 * kd], mixed[:, 2 * kd:]
            q, k, v = q.reshape(T, m.Hk, m.dk), k.reshape(T, m.Hk, m.dk), v.reshape(T, m.HV, m.dv)
            q = q / np.sqrt((q * q).sum(-1, keepdims=True) + kn["l2_eps"]) * m.dk ** -0.5
            k = k / np.sqrt((k * k).sum(-1, keepdims=True) + kn["l2_eps"])
            beta = sig(x @ L["b"].T)
            A = np.exp(L["A_log"]) if kn["A_exp"] else L["A_log"]
            sp = x @ L["a"].T + L["dt_bias"]
            g = -A * np.where(sp > 20, sp, np.log1p(np.exp(np.minimum(sp, 20))))
            r = m.HV // m.Hk
            hov = np.arange(m.HV) // r if kn["gva"] == "grouped" else np.arange(m.HV) % m.Hk
            o = chunked_gdn(q, k, v, beta, g, hov, kn["C"])
            z = (x @ L["z"].T).reshape(T, m.HV, m.dv)
            o = o / np.sqrt((o * o).mean(-1, keepdims=True) + eps) * (kn["gdn_norm_offset"] + L["norm"])
            o = o * z * sig(z)
            out = o.reshape(T, vd) @ L["out"].T
        else:
            H, KVH, hd = m.H, m.KVH, m.hd
            qg = x @ L["q"].T + L.get("qb", 0.0)
            if kn["qgate_split"] == "interleaved":
                qg = qg.reshape(T, H, 2 * hd)
                q, gate = qg[..., :hd], qg[..., hd:].reshape(T, H * hd)
            else:  # misreading: [all queries | all gates]
                q, gate = qg[:, :H * hd].reshape(T, H, hd), qg[:, H * hd:]
            k = (x @ L["k"].T + L.get("kb", 0.0)).reshape(T, KVH, hd)
            v = (x @ L["v"].T + L.get("vb", 0.0)).reshape(T, KVH, hd)
            rot = c["rotary_dim"] if kn["rotary_dim"] is None else kn["rotary_dim"]
            pos = np.arange(T, dtype=np.float64)
            if kn["qk_norm"] == "before_rope":
                q, k = norm(q, L["q_norm"], kn["norm_offset"]), norm(k, L["k_norm"], kn["norm_offset"])
            q = rope_ref(q, pos, c["rope_theta"], rot, kn["rope_layout"])
            k = rope_ref(k, pos, c["rope_theta"], rot, kn["rope_layout"])
            if kn["qk_norm"] == "after_rope":
                q, k = norm(q, L["q_norm"], kn["norm_offset"]), norm(k, L["k_norm"], kn["norm_offset"])
            o = masked_attention(q, k, v, hd ** -0.5, kv_map=kn["kv_map"]).reshape(T, H * hd)
            gates = {"sigmoid": sig(gate), "silu": gate * sig(gate), "none": 1.0}
            o = o * gates[kn["gate_act"]]
            out = o @ L["o"].T + L.get("ob", 0.0)
        h = h + out
        x = norm(h, L["post_norm"], kn["norm_offset"])
        if "router" in L:
            h = h + moe_parallel(m, L, x, kn)
        else:
            h = h + ((x @ L["gate"].T) * sig(x @ L["gate"].T) * (x @ L["up"].T)) @ L["down"].T
    head = m.lm_head if isinstance(kn["lm_head"], str) else kn["lm_head"]
    return norm(h, m.final_norm, kn["norm_offset"]) @ head.T


FLA_KNOBS = dict(window="spec", rope_layout="halves", kv_map="grouped")


def fla_parallel(m, tokens, **knobs):
    """fla gated_deltanet hybrid from the weights of fla_reference model m."""
    kn = dict(FLA_KNOBS, **knobs)
    eps = m.eps
    T = len(tokens)
    assert m.mt == "gated_deltanet"
    h = m.emb[np.asarray(tokens)]
    for L in m.layers:
        x = fla.rmsnorm(h, L["attn_norm"], eps)
        if "attn" in L:
            A = L["attn"]

            def lin(w, b):
                return x @ w.T + (0.0 if b is None else b)
            q = lin(A.wq, A.bq).reshape(T, A.H, A.hd)
            k = lin(A.wk, A.bk).reshape(T, A.KVH, A.hd)
            v = lin(A.wv, A.bv).reshape(T, A.KVH, A.hd)
            pos = np.arange(T, dtype=np.float64)
            q = rope_ref(q, pos, A.theta, A.hd, kn["rope_layout"])
            k = rope_ref(k, pos, A.theta, A.hd, kn["rope_layout"])
            win = A.window if kn["window"] == "spec" else kn["window"]
            out = masked_attention(q, k, v, A.hd ** -0.5, win, kn["kv_map"]).reshape(T, -1) @ A.wo.T
        else:
            q = cr.conv_np(x @ L["q"].T, L["q_conv"], True).reshape(T, m.H, m.dk)
            k = cr.conv_np(x @ L["k"].T, L["k_conv"], True).reshape(T, m.H, m.dk)
            v = cr.conv_np(x @ L["v"].T, L["v_conv"], True).reshape(T, m.HV, m.dv)
            q = q / np.sqrt((q * q).sum(-1, keepdims=True) + 1e-6) * m.dk ** -0.5
            k = k / np.sqrt((k * k).sum(-1, keepdims=True) + 1e-6)
            beta = sig(x @ L["b_proj"].T)
            sp = x @ L["a_proj"].T + L["dt_bias"]
            g = -np.exp(L["A_log"]) * np.where(sp > 20, sp, np.log1p(np.exp(np.minimum(sp, 20))))
            o = chunked_gdn(q, k, v, beta, g, np.arange(m.HV) // (m.HV // m.H))
            o = fla.rmsnorm(o, L["o_norm"], eps) * fla.silu((x @ L["g"].T).reshape(T, m.HV, m.dv))
            out = o.reshape(T, -1) @ L["o"].T
        h = h + out
        x = fla.rmsnorm(h, L["mlp_norm"], eps)
        h = h + (fla.silu(x @ L["gate"].T) * (x @ L["up"].T)) @ L["down"].T
    return fla.rmsnorm(h, m.final_norm, eps) @ m.lm_head.T


# --------------------------------------------------------------------------------------
# unit checks
# --------------------------------------------------------------------------------------
def check_config_parsing():
    base = dict(make_hybrid_fixtures.QWEN_MINIMAL)
    c = qwen.parse_config(base)
    check("config defaults: interval 4 -> layer 3 full, partial 0.25, theta 1e4, eps 1e-6, kernel 4, untied",
          c["layer_types"] == ["linear_attention"] * 3 + ["full_attention"] and c["partial_rotary_factor"] == 0.25
          and c["rope_theta"] == 10000.0 and c["rotary_dim"] == 6 and c["rms_norm_eps"] == 1e-6
          and c["linear_conv_kernel_dim"] == 4 and not c["tie_word_embeddings"] and c["head_dim"] == 24)
    full = qwen.parse_config({"model_type": "qwen3_5_text"})
    check("config defaults (all): head_dim 256, rotary 64, 32 layers every 4th full, 16/32 GDN heads of 128",
          full["head_dim"] == 256 and full["rotary_dim"] == 64 and full["layer_types"].count("full_attention") == 8
          and full["layer_types"][3] == "full_attention"
          and (full["linear_num_key_heads"], full["linear_num_value_heads"]) == (16, 32)
          and full["linear_key_head_dim"] == full["linear_value_head_dim"] == 128)
    c = qwen.parse_config(dict(base, full_attention_interval=2, layer_types=["mamba", "attention", "mamba", "mamba"]))
    check("config: explicit layer_types win over full_attention_interval; legacy names remapped",
          c["layer_types"] == ["linear_attention", "full_attention", "linear_attention", "linear_attention"])
    c = qwen.parse_config(dict(base, rope_theta=5e5, partial_rotary_factor=0.5))
    legacy = {"type": "default", "rope_theta": 5e5, "partial_rotary_factor": 0.5}
    c2 = qwen.parse_config(dict(base, rope_scaling=legacy))
    check("config: top-level rope_theta/partial_rotary_factor and legacy rope_scaling accepted",
          (c["rope_theta"], c["rotary_dim"]) == (5e5, 12) == (c2["rope_theta"], c2["rotary_dim"]))
    bad = [dict(base, rope_parameters={"rope_type": "yarn", "factor": 4.0}),
           dict(base, layer_types=["linear_attention"] * 3), dict(base, hidden_act="gelu"),
           dict(base, linear_num_value_heads=3), {"model_type": "qwen3_nextgen"}]
    n_raise = 0
    for b in bad:
        try:
            qwen.parse_config(b)
        except (ValueError, NotImplementedError):
            n_raise += 1
    c3 = qwen.parse_config(dict(base, rope_theta=1e6, partial_rotary_factor=1.0,
                                rope_parameters={"rope_theta": 1e7, "partial_rotary_factor": 0.5}))
    check("config: rope_parameters values win over top-level rope_theta/partial_rotary_factor (setdefault)",
          (c3["rope_theta"], c3["rotary_dim"]) == (1e7, 12))
    check("config: refuses yarn, wrong layer_types length, gelu, HV % H != 0, other model types",
          n_raise == len(bad), f"{n_raise}/{len(bad)}")
    vlm = {"model_type": "qwen3_5", "tie_word_embeddings": True, "text_config": dict(base, tie_word_embeddings=False)}
    vlm2 = {"model_type": "qwen3_5", "text_config": dict(base, tie_word_embeddings=True)}
    check("config: multimodal model ties by the top-level flag (default false), not text_config's",
          qwen.parse_config(vlm)["tie_word_embeddings"] and not qwen.parse_config(vlm2)["tie_word_embeddings"]
          and qwen.parse_config(vlm)["layout"] == "multimodal")
    moe = qwen.parse_config({"model_type": "qwen3_5_moe_text"})
    moe_vlm = qwen.parse_config({"model_type": "qwen3_5_moe", "text_config": {"num_experts": 4,
                                                                              "num_experts_per_tok": 4}})
    n_raise = 0
    for b in ({"model_type": "qwen3_5_moe_text", "num_experts": 4, "num_experts_per_tok": 5},
              {"model_type": "qwen3_5_moe", "text_config": {"model_type": "qwen3_5_text"}},
              {"model_type": "qwen3_5_moe_text", "moe_intermediate_size": 0}):
        try:
            qwen.parse_config(b)
        except ValueError:
            n_raise += 1
    nx = qwen.parse_config({"model_type": "qwen3_next"})
    check("config: Qwen3-Next defaults (vocab 151936, 48 layers, 512 experts, top 10, dense width 5632, "
          "sparse step 1, renormalised)",
          (nx["vocab_size"], nx["num_hidden_layers"], nx["num_experts"], nx["num_experts_per_tok"],
           nx["intermediate_size"], nx["decoder_sparse_step"], nx["norm_topk_prob"], nx["mlp_only_layers"],
           nx["num_key_value_heads"], nx["next"]) == (151936, 48, 512, 10, 5632, 1, True, [], 2, True))
    check("config: MoE defaults (hidden 2048, 40 layers, 2 KV heads, 256 experts, top 8, widths 512), "
          "multimodal text_config, refusals",
          (moe["hidden_size"], moe["num_hidden_layers"], moe["num_key_value_heads"], moe["num_experts"],
           moe["num_experts_per_tok"], moe["moe_intermediate_size"], moe["shared_expert_intermediate_size"])
          == (2048, 40, 2, 256, 8, 512, 512) and "intermediate_size" not in moe and moe_vlm["moe"]
          and moe_vlm["layout"] == "multimodal" and moe_vlm["num_experts"] == 4 and n_raise == 3,
          f"{n_raise}/3 refused")
    specs = far.normalize_attn([{"layers": [1], "num_heads": 4},
                                {"layers": [0, 2], "num_heads": 2, "num_kv_heads": None, "window_size": 8,
                                 "extra": 1}], 3)
    ok = specs[1]["num_kv_heads"] == 4 and specs[1]["window_size"] is None and specs[1]["rope_theta"] == 10000.0 \
        and specs[0]["num_kv_heads"] == 2 and specs[2]["window_size"] == 8 and not specs[0]["qkv_bias"]
    n_raise = 0
    for b in ([{"layers": [0]}], {"layers": [0, 0], "num_heads": 2}, {"layers": [3], "num_heads": 2},
              [{"layers": [0], "num_heads": 2}, {"layers": [0], "num_heads": 2}], {"layers": [0], "num_heads": 2,
                                                                                   "rope_theta": None}):
        try:
            far.normalize_attn(b, 3)
        except ValueError:
            n_raise += 1
    check("fla attn spec: defaults (kv heads, no window, theta 1e4, no bias), list form, invalid specs refused",
          ok and n_raise == 5, f"{n_raise}/5 refused")


def check_pieces():
    rng = np.random.default_rng(3)
    # attention: token loop vs masked matrix, GQA, full and window, and a split KV cache
    T, H, KVH, d = 40, 6, 2, 8
    q, k, v = rng.normal(size=(T, H, d)), rng.normal(size=(T, KVH, d)), rng.normal(size=(T, KVH, d))
    pos = np.arange(T)
    for win in (None, 1, 7, 40):
        o1 = far.attend(q, k, v, pos, pos, 0.3, win)
        o2 = masked_attention(q, k, v, 0.3, win)
        ok, dd = close(o1, o2, 1e-12)
        check(f"attention: per-token loop == masked matrix (GQA 6/2, window {win})", ok, dd)
    # KV-cache attention from a later offset (keys 10..39 cached, queries 30..39)
    o1 = far.attend(q[30:], k[10:], v[10:], pos[30:], pos[10:], 0.3, 7)
    check("attention: cached keys at absolute positions (window 7) == full computation rows",
          close(o1, masked_attention(q, k, v, 0.3, 7)[30:], 1e-12)[0])
    # RoPE: partial rotary leaves the tail, relative-position invariance, halves layout by hand
    x = rng.normal(size=(5, 2, 16))
    y = far.apply_rope(x, np.arange(5) + 3.0, 1e4, 8)
    def score(p1, p2):
        a, b = far.apply_rope(x[:1], np.array([p1]), 1e4, 8), far.apply_rope(x[1:2], np.array([p2]), 1e4, 8)
        return (a * b)[..., :8].sum()
    s1, s2 = score(9.0, 2.0), score(109.0, 102.0)
    check("RoPE: partial (8 of 16 dims) leaves dims 8.. untouched, halves layout, relative positions",
          np.array_equal(y[..., 8:], x[..., 8:]) and close(y, rope_ref(x, np.arange(5) + 3.0, 1e4, 8), 1e-13)[0]
          and abs(s1 - s2) < 1e-12)
    # M-RoPE with text-only positions == plain RoPE; with distinct T/H/W rows it is not
    inv = 1e7 ** (-np.arange(0, 64, 2) / 64.0)
    pos = np.arange(300.0)
    cs, sn = qwen.mrope_text_cos_sin(pos, inv, [11, 11, 10])
    ang = np.outer(pos, inv)
    ok = np.allclose(cs, np.cos(np.concatenate([ang, ang], -1)), 0, 1e-15) and \
        np.allclose(sn, np.sin(np.concatenate([ang, ang], -1)), 0, 1e-15)
    check("M-RoPE recomposition (sections 11/11/10, interleaved) with text-only positions == plain RoPE", ok)
    # GDN recurrence vs chunked WY (with a non-zero initial state), K-first state [HV, dk, dv]
    T, HV, dk, dv = 130, 3, 8, 12
    q = qwen.l2norm(rng.normal(size=(T, HV, dk))) * dk ** -0.5
    k = qwen.l2norm(rng.normal(size=(T, HV, dk)))
    v = rng.normal(size=(T, HV, dv))
    beta, g = rng.uniform(0, 1, (T, HV)), -rng.uniform(0, 0.6, (T, HV))
    S0 = rng.normal(size=(HV, dk, dv))
    o, S = qwen.gated_delta_rule(q, k, v, g, beta, S0)
    for C in (64, 16):
        oc, Sc = np.zeros_like(o), np.zeros_like(S)
        for j in range(HV):
            oc[:, j], Sc[j] = cr.chunk_delta_wy(q[:, j], k[:, j], v[:, j], beta[:, j], g[:, j], S0[j], C)
        check(f"GDN: token recurrence == chunked WY (C={C}, h0 != 0, final state)",
              close(oc, o)[0] and close(Sc, S)[0], close(oc, o)[1])
    check("GDN: value head -> key head mapping is grouped (HV=8, H=2: 0,0,0,0,1,1,1,1)",
          list(qwen.value_to_key_head(8, 2)) == [0, 0, 0, 0, 1, 1, 1, 1])
    # conv: cache carries, equals np.convolve
    x = rng.normal(size=(20, 5))
    w = rng.normal(size=(5, 1, 4))
    y, cache = qwen.causal_conv(x, w, np.zeros((5, 4)))
    ya, ca = qwen.causal_conv(x[:7], w, np.zeros((5, 4)))
    yb, cb = qwen.causal_conv(x[7:], w, ca)
    check("conv1d: == np.convolve + silu; cache = last W raw inputs; split == whole",
          close(y, cr.conv_np(x, w, True))[0] and close(np.concatenate([ya, yb]), y)[0] and np.array_equal(cb, cache)
          and np.array_equal(cache, x[-4:].T))
    # norms
    xv = rng.normal(size=(3, 8))
    wv = rng.normal(size=8)
    zv = rng.normal(size=(3, 8))
    r = xv / np.sqrt((xv ** 2).mean(-1, keepdims=True) + 1e-6)
    check("RMSNorm zero-centred (1+w); gated RMSNorm plain w then * silu(z)",
          np.allclose(qwen.zc_rmsnorm(xv, wv, 1e-6), r * (1 + wv))
          and np.allclose(qwen.gated_rmsnorm(xv, wv, zv, 1e-6), r * wv * zv * sig(zv)))
    # Qwen3-Next fused in_proj_qkvz / in_proj_ba -> Qwen3.5 split projections
    H, HV, dk, dv, D = 2, 6, 4, 5, 7
    r = HV // H
    Wf = rng.normal(size=(H * (2 * dk + 2 * r * dv), D))
    Bf = rng.normal(size=(H * 2 * r, D))
    xx = rng.normal(size=(3, D))
    y = (xx @ Wf.T).reshape(3, H, 2 * dk + 2 * r * dv)   # HF Qwen3-Next: view per key head, then split
    qn, kn_, vn, zn = y[..., :dk], y[..., dk:2 * dk], y[..., 2 * dk:2 * dk + r * dv], y[..., 2 * dk + r * dv:]
    yb = (xx @ Bf.T).reshape(3, H, 2 * r)
    qkv, Wz, Wb, Wa = qwen.qwen3_next_split(Wf, Bf, H, HV, dk, dv)
    m = xx @ qkv.T
    ok = (np.allclose(m[:, :H * dk].reshape(3, H, dk), qn)
          and np.allclose(m[:, H * dk:2 * H * dk].reshape(3, H, dk), kn_)
          and np.allclose(m[:, 2 * H * dk:].reshape(3, HV, dv), vn.reshape(3, HV, dv))
          and np.allclose((xx @ Wz.T).reshape(3, HV, dv), zn.reshape(3, HV, dv))
          and np.allclose(xx @ Wb.T, yb[..., :r].reshape(3, HV)) and np.allclose(xx @ Wa.T, yb[..., r:].reshape(3, HV)))
    check("Qwen3-Next fused qkvz/ba (grouped per key head) -> split in_proj_qkv/z/b/a", ok)


# --------------------------------------------------------------------------------------
# fixtures
# --------------------------------------------------------------------------------------
def _flat(state):
    out = []
    for s in state:
        for key in sorted(s):
            vals = s[key] if isinstance(s[key], tuple) else (s[key],)
            out.extend(np.asarray(v, dtype=np.float64) for v in vals)
    return out


def load_case(fx, name):
    d = os.path.join(fx, name)
    exp = json.load(open(os.path.join(d, "expected.json")))
    cfg = json.load(open(os.path.join(d, "config.json")))
    tensors, dts, files = qwen.load_tensors(d)
    want = np.fromfile(os.path.join(d, exp["logits_file"]), dtype="<f8")
    return d, exp, cfg, tensors, dts, files, want


def build(cfg, tensors, strict=True):
    if cfg["model_type"] in ("qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text", "qwen3_next"):
        return qwen.Model(cfg, tensors, strict=strict)
    return fla.Model(cfg, tensors, strict=strict)


def check_fixtures(fx):
    names = open(os.path.join(fx, "cases.txt")).read().split()
    req = {n for n, *_ in make_hybrid_fixtures.CASES}
    check(f"cases.txt lists {len(names)} cases incl. all of make_hybrid_fixtures", req <= set(names),
          str(sorted(req - set(names))))
    for name in names:
        d, exp, cfg, tensors, dts, files, want = load_case(fx, name)
        toks = np.array(exp["tokens"])
        V = exp["vocab_size"]
        m = build(cfg, tensors)
        full, state = m.forward(toks)
        ok_meta = (want.size == len(toks) * V and len(toks) > 64 and files == exp["weights_files"]
                   and sorted(set(dts.values())) == exp["weights_dtypes"]
                   and exp["weights_dtype"] in exp["weights_dtypes"]
                   and all(os.path.exists(os.path.join(d, f)) for f in files))
        ok1, d1 = close(full, want.reshape(len(toks), V), 1e-12)
        par = qwen_parallel(m, toks) if isinstance(m, qwen.Model) else fla_parallel(m, toks)
        ok2, d2 = close(par, full, 1e-9)
        s, outs = None, []
        a = 0
        for b in list(exp["split_points"][:2]) + list(range(exp["split_points"][1] + 1, len(toks) + 1)):
            lo, s = m.forward(toks[a:b], s)
            outs.append(lo)
            a = b
        ok3, d3 = close(np.concatenate(outs), full, 1e-10)
        ok4 = all(x.shape == y.shape and close(x, y, 1e-10)[0] for x, y in zip(_flat(s), _flat(state)))
        s, outs = None, []  # uneven chunks, some longer than any sliding window: 5 + 45 + 20
        for a, b in ((0, 5), (5, 50), (50, len(toks))):
            lo, s = m.forward(toks[a:b], s)
            outs.append(lo)
        ok5, d5 = close(np.concatenate(outs), full, 1e-10)
        ok4 = ok4 and ok5 and all(x.shape == y.shape and close(x, y, 1e-10)[0] for x, y in zip(_flat(s), _flat(state)))
        check(f"fixture {name}: file==ref, ref==chunked/masked-matrix, 37+27+6x1 and 5+45+20 state carry==one pass",
              ok_meta and ok1 and ok2 and ok3 and ok4, f"{d2}; split {d3}")
        if isinstance(m, qwen.Model):
            kv_ok = all((st_["k"].shape[0], st_["seen"]) == (len(toks), len(toks))
                        for st_, t in zip(state, m.layer_types) if t == "full_attention")
            check(f"fixture {name}: layout {exp['layout']}, layer_types as expected.json, KV cache holds all "
                  f"{len(toks)} tokens", kv_ok and exp["layer_types"] == m.layer_types
                  and exp["layout"] == m.cfg["layout"] and exp["tied"] == m.cfg["tie_word_embeddings"])
        else:
            kv_ok = all(st_["k"].shape[0] == (L["attn"].window or len(toks)) and st_["seen"] == len(toks)
                        for st_, L in zip(state, m.layers) if "attn" in L)
            check(f"fixture {name}: fla attn layers {exp['attn_layers']}, KV cache = last window_size tokens",
                  kv_ok and exp["attn_layers"] == sorted(m.attn_specs))


def check_layouts(fx):
    """Dummy visual/mtp tensors are ignored; strictness; text model reads the multimodal file."""
    d, exp, cfg, tensors, dts, files, want = load_case(fx, "qwen35_vlm_f32")
    toks = exp["tokens"]
    ref, _ = qwen.Model(cfg, tensors).forward(toks)
    dummies = [n for n in tensors if n.startswith(("model.visual.", "mtp."))]
    stripped = {n: t for n, t in tensors.items() if n not in dummies}
    noisy = {n: (t + 7.0 if n in dummies else t) for n, t in tensors.items()}
    a, _ = qwen.Model(cfg, stripped).forward(toks)
    b, _ = qwen.Model(cfg, noisy).forward(toks)
    check(f"multimodal: {len(dummies)} model.visual.*/mtp.* tensors present and ignored (removed/changed: same logits)",
          len(dummies) > 20 and np.array_equal(a, ref) and np.array_equal(b, ref)
          and any(n.startswith("mtp.") for n in dummies))
    n_raise = 0
    for bad in ({**tensors, "model.language_model.layers.0.linear_attn.extra": np.zeros(3)},
                {n: t for n, t in tensors.items() if n != "model.language_model.layers.2.self_attn.k_norm.weight"},
                {**tensors, "model.language_model.layers.0.linear_attn.A_log": np.zeros(5)},
                {**tensors, "model.layers.0.input_layernorm.weight": np.zeros(64)}):
        try:
            qwen.Model(cfg, bad)
        except (ValueError, KeyError):
            n_raise += 1
    check("strict loading: unknown tensor, missing tensor, wrong shape, mixed prefixes refused", n_raise == 4,
          f"{n_raise}/4")
    # transformers renames model.language_model.* -> model.* when a qwen3_5_text model reads this file
    text_cfg = dict(cfg["text_config"], tie_word_embeddings=cfg["tie_word_embeddings"])
    c, _ = qwen.Model(text_cfg, tensors).forward(toks)
    check("Qwen3_5ForCausalLM (qwen3_5_text config) on the multimodal file == Qwen3_5ForConditionalGeneration",
          np.array_equal(c, ref))
    # the text layout ignores model.visual.* / mtp.* too (Qwen3_5ForCausalLM._keys_to_ignore_on_load_unexpected)
    d2, exp2, cfg2, t2, *_ = load_case(fx, "qwen35_text_f32")
    extra = {**t2, "mtp.fc.weight": np.zeros((64, 128)), "model.visual.pos_embed.weight": np.zeros((4, 16))}
    e, _ = qwen.Model(cfg2, extra).forward(exp2["tokens"])
    check("text layout: stray mtp.* / model.visual.* tensors ignored",
          np.array_equal(e, qwen.Model(cfg2, t2).forward(exp2["tokens"])[0]))
    # tied head: no lm_head.weight on disk; an lm_head equal to the embeddings is accepted
    d3, exp3, cfg3, t3, *_ = load_case(fx, "qwen35_text_bf16_tied")
    ok = "lm_head.weight" not in t3
    t3b = {**t3, "lm_head.weight": t3["model.embed_tokens.weight"]}
    tk = exp3["tokens"]
    ok = ok and np.array_equal(qwen.Model(cfg3, t3b).forward(tk)[0], qwen.Model(cfg3, t3).forward(tk)[0])
    try:
        qwen.Model(cfg3, {**t3, "lm_head.weight": t3["model.embed_tokens.weight"] + 1})
        ok = False
    except ValueError:
        pass
    check("tied: lm_head.weight absent on disk; equal copy accepted, different copy refused", ok)
    # mixed dtypes in one file; sharded index
    _, exp4, _, t4, dts4, files4, _ = load_case(fx, "qwen35_vlm_mixed_dtypes")
    f32 = sorted(n for n, dt in dts4.items() if dt == "F32")
    check("mixed dtypes: one file with F32 A_log + norm weights and BF16 elsewhere",
          files4 == ["model.safetensors"] and set(dts4.values()) == {"F32", "BF16"}
          and all(n.endswith(("A_log", "norm.weight")) for n in f32)
          and any(n.endswith("linear_attn.A_log") for n in f32)
          and any(n.endswith("linear_attn.norm.weight") for n in f32))
    _, exp5, _, t5, _, files5, _ = load_case(fx, "qwen35_vlm_sharded")
    idx = json.load(open(os.path.join(fx, "qwen35_vlm_sharded", "model.safetensors.index.json")))
    sizes = [os.path.getsize(os.path.join(fx, "qwen35_vlm_sharded", f)) for f in files5]
    check("sharded: index.json weight_map covers 2 non-empty shards exactly",
          len(files5) == 2 and set(idx["weight_map"]) == set(t5) and min(sizes) > 1000
          and sorted(set(idx["weight_map"].values())) == files5)


def naive_next_split(in_proj_qkvz, in_proj_ba, H, HV, dk, dv):
    """A misreading of Qwen3-Next's fused projections: blocks of all heads, as Qwen3.5 stores them."""
    kd, vd = H * dk, HV * dv
    return (in_proj_qkvz[:2 * kd + vd], in_proj_qkvz[2 * kd + vd:], in_proj_ba[:HV], in_proj_ba[HV:])


def check_sensitivity(fx):
    """Every misreading must move some fixture's logits (max |dlogit| > 1e-3; most move by > 0.1)."""
    def diff(case, fn):
        _, exp, cfg, tensors, _, _, want = load_case(fx, case)
        got = fn(cfg, tensors, exp["tokens"])
        return float(np.abs(got - want.reshape(got.shape)).max())

    def par(**kn):
        def fn(cfg, tensors, toks):
            m = build(cfg, tensors)
            return qwen_parallel(m, toks, **kn) if isinstance(m, qwen.Model) else fla_parallel(m, toks, **kn)
        return fn

    def cfg_change(mutate):
        def fn(cfg, tensors, toks):
            cfg = copy.deepcopy(cfg)
            mutate(cfg)
            return build(cfg, tensors, strict=False).forward(toks)[0]
        return fn

    def patched(obj, attr, val):
        def fn(cfg, tensors, toks):
            old = getattr(obj, attr)
            setattr(obj, attr, val)
            try:
                return build(cfg, tensors).forward(toks)[0]
            finally:
                setattr(obj, attr, old)
        return fn

    def text_tie(cfg):
        cfg["tie_word_embeddings"] = cfg["text_config"]["tie_word_embeddings"]

    def vlm_untied_head(cfg, tensors, toks):
        m = build(cfg, tensors)
        return qwen_parallel(m, toks, lm_head=m.emb)
    muts = [
        ("qwen35_text_f32", "RMSNorm weight applied as w, not (1+w)", par(norm_offset=0.0)),
        ("qwen35_text_f32", "GDN gated norm applied as (1+w)", par(gdn_norm_offset=1.0)),
        ("qwen35_text_f32", "RoPE interleaved pairs instead of halves", par(rope_layout="interleaved")),
        ("qwen35_text_dkdv", "RoPE interleaved pairs instead of halves (theta 1e4, partial 0.5)",
         par(rope_layout="interleaved")),
        ("qwen35_text_f32", "RoPE on the full head_dim (partial factor ignored)", par(rotary_dim=32)),
        ("qwen35_text_f32", "GVA value head h uses key head h % H (tiled)", par(gva="tiled")),
        ("qwen35_text_dkdv", "GVA tiled (3 key heads, 6 value heads)", par(gva="tiled")),
        ("qwen35_text_f32", "q_proj read as [all queries | all gates]", par(qgate_split="blocks")),
        ("qwen35_text_f32", "output gate silu instead of sigmoid", par(gate_act="silu")),
        ("qwen35_text_f32", "output gate ignored", par(gate_act="none")),
        ("qwen35_text_f32", "q/k norm after RoPE", par(qk_norm="after_rope")),
        ("qwen35_text_f32", "no q/k norm", par(qk_norm="none")),
        ("qwen35_text_f32", "GQA kv head h % KVH (tiled)", par(kv_map="tiled")),
        ("qwen35_text_f32", "A_log used as A (no exp)", par(A_exp=False)),
        ("qwen35_text_f32", "conv channels read as [k|q|v]", par(conv_order="kqv")),
        ("qwen35_vlm_toplevel_untied", "tie decided by text_config (tied) instead of the top level", vlm_untied_head),
        ("qwen35_vlm_toplevel_untied", "text_config tie flag via config", cfg_change(text_tie)),
        ("qwen35_text_minimal", "rope_theta 1e7 instead of the default 1e4",
         cfg_change(lambda c: c.update(rope_theta=1e7))),
        ("qwen35_text_minimal", "partial_rotary_factor 1.0 instead of the default 0.25",
         cfg_change(lambda c: c.update(partial_rotary_factor=1.0))),
        ("qwen35_text_f32", "value head h uses key head h % H (reference patched)",
         patched(qwen, "value_to_key_head", lambda HV, H: np.arange(HV) % H)),
        ("qwen35moe_text_fused", "MoE top-k weights not renormalised", par(moe_renorm=False)),
        ("qwen35moe_text_fused", "MoE fused gate_up read as [up | gate]", par(moe_gate_up="up_gate")),
        ("qwen35moe_vlm_bf16_per_expert", "MoE per-expert gate/up swapped", par(moe_gate_up="up_gate")),
        ("qwen35moe_text_fused", "MoE shared expert's sigmoid gate ignored", par(moe_shared_gate=False)),
        ("qwen3next_bf16_step2_unnormed", "Qwen3-Next norm_topk_prob false ignored (renormalised)",
         par(moe_renorm=True)),
        ("qwen3next_f32", "Qwen3-Next in_proj_qkvz read as [all q | all k | all v | all z] (not per key head)",
         patched(qwen, "qwen3_next_split", naive_next_split)),
        ("gdn_hybrid_window", "sliding window ignored (full causal)", par(window=None)),
        ("gdn_hybrid_window", "window off by one (w+1 keys)", par(window=17)),
        ("gdn_hybrid_full", "fla RoPE interleaved", par(rope_layout="interleaved")),
        ("gdn_hybrid_full", "fla GQA tiled", par(kv_map="tiled")),
    ]
    for case, what, fn in muts:
        dd = diff(case, fn)
        check(f"sensitivity {case}: '{what}' changes logits", dd > 1e-3, f"max |dlogit| {dd:.3g}")
    # e4m3fn as the OCP format defines it, and the encoder inverting the decoder on every finite byte
    from safetensors_io import e4m3_decode, e4m3_encode
    finite = np.array([b for b in range(256) if b & 0x7F != 0x7F], dtype=np.uint8)
    vals = e4m3_decode(finite)
    check("e4m3: 0x01 = 2^-9, 0x08 = 2^-6, 0x38 = 1, 0x7E = 448, 0xFE = -448, 0x7F NaN; encode(decode(b)) = b",
          list(e4m3_decode(np.array([0x01, 0x08, 0x38, 0x7E, 0xFE], dtype=np.uint8))) == [2.0 ** -9, 2.0 ** -6, 1.0,
                                                                                          448.0, -448.0]
          and np.isnan(e4m3_decode(np.array([0x7F, 0xFF], dtype=np.uint8))).all()
          and (e4m3_encode(vals) == finite).all() and e4m3_encode(np.array([1e9, 1.0625]))[0] == 0x7E
          and e4m3_encode(np.array([1.0625]))[0] == 0x38)
    # block-wise fp8: the fixture's logits depend on every block's own scale
    _, exp, cfg, _, _, _, want = load_case(fx, "qwen35_text_fp8")
    raw, dts, _ = qwen.load_tensors(os.path.join(fx, "qwen35_text_fp8"), dequantize=False)
    _, _, (br, bc) = qwen.fp8_scheme(cfg)
    fp8_names = [n for n, t in dts.items() if t == "F8_E4M3"]
    check("qwen35_text_fp8: projections stored as F8_E4M3 with F32 block scales, blocks not dividing the sizes",
          len(fp8_names) == len(exp["fp8"]["tensors"]) > 0
          and all(dts[n + "_scale_inv"] == "F32" for n in fp8_names)
          and any(raw[n].shape[0] % br or raw[n].shape[1] % bc for n in fp8_names))
    for what, dequant in (
            ("fp8 scales ignored (Q used as W)", lambda q, s: q),
            ("fp8 scale of the block's first column block only",
             lambda q, s: q * np.repeat(s[:, :1], br, axis=0)[:q.shape[0]])):
        w = {n: v for n, v in raw.items() if not n.endswith("_scale_inv")}
        for n in fp8_names:
            w[n] = dequant(raw[n], raw[n + "_scale_inv"])
        got = qwen.Model(cfg, w).forward(exp["tokens"])[0]
        dd = float(np.abs(got - want.reshape(got.shape)).max())
        check(f"sensitivity qwen35_text_fp8: '{what}' changes logits", dd > 1e-3, f"max |dlogit| {dd:.3g}")
    # layer types decide the tensor names: the interval-2 file does not load as interval 4
    _, exp, cfg, tensors, *_ = load_case(fx, "qwen35_text_interval2")
    try:
        qwen.Model(dict(cfg, full_attention_interval=4), tensors)
        ok = False
    except KeyError:
        ok = True
    check("qwen35_text_interval2: full_attention_interval=2 is what the tensors say (4 refused)", ok)
    # l2norm eps and rms eps are below what these fixtures resolve (documented, not required)
    dd = diff("qwen35_text_f32", par(l2_eps=1e-12))
    check("l2norm eps 1e-6 vs 1e-12: below fixture resolution (informational)", dd < 1e-3, f"max |dlogit| {dd:.3g}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixtures")
    args = ap.parse_args()
    t0 = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        fx = args.fixtures
        if fx is None:
            fx = os.path.join(tmp, "fixtures")
            make_hybrid_fixtures.main(["--out", fx])
        check_config_parsing()
        check_pieces()
        check_fixtures(fx)
        check_layouts(fx)
        check_sensitivity(fx)
    n_ok = sum(RESULTS)
    print(f"{n_ok} passed, {len(RESULTS) - n_ok} failed  ({time.time() - t0:.1f}s)")
    sys.exit(0 if n_ok == len(RESULTS) else 1)


if __name__ == "__main__":
    main()
