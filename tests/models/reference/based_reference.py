"""Based and ReBased as `linear_attn` feature maps (float64 reference).

fla has no `based`/`rebased` model_type (only the layers fla/layers/based.py, fla/layers/rebased.py),
so linfer loads them as `model_type: "linear_attn"` with two more feature maps:

  feature_map: "taylor_exp"  fla TaylorFeatureMap (fla/modules/feature_map.py:205-218) over the
      head's key dim d (Based's reduced `feature_dim`: choose expand_k = feature_dim * H / D):
      phi(x) = [1, x / d^(1/4), x_i^2 / (sqrt(2) sqrt(d)), x_i x_j / sqrt(d) (i < j)],
      F = 1 + d + d(d+1)/2, so phi(q).phi(k) = 1 + q.k/sqrt(d) + (q.k)^2 / (2d). No parameters.
  feature_map: "rebased"     fla RebasedFeatureMap (feature_map.py:221-260): x <- LayerNorm(x) * gamma
      + beta (eps 1e-5), then phi(x) = [x_i^2 / sqrt(d), sqrt(2/d) x_i x_j (i < j)], F = d(d+1)/2,
      phi(q).phi(k) = (q.k)^2 / d. Parameters as the ReBased layer names them, one module shared by
      q and k: `model.layers.{i}.attn.feature_map.gamma` / `.beta` [d]. Config fields (the layer's
      argument names) `use_gamma`, `use_beta`, `normalize` (all default true; same combinations as
      RebasedFeatureMap.forward).

Everything else is plain linear_attn (fla_reference.py): kv-group repeat, norm_q/norm_k, scale F^-1/2,
`norm_feature_map` (Based/ReBased layers always normalise: set it true), per-head RMSNorm `norm`,
o_proj. Feature order (hence the recurrent state layout [H, F, dv]) follows fla's
flatten_diag_outer_product_off1: diagonal terms, then the i<j terms in torch.triu_indices order.

This module subclasses fla_reference.Model (which it leaves untouched); `load_model` takes any
checkpoint fla_reference.py can load, plus these two maps.
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fla_reference as ref  # noqa: E402
from safetensors_io import load_file  # noqa: E402

EXT_MAPS = ("taylor_exp", "rebased")
LN_EPS = 1e-5   # fla.modules.layernorm.layer_norm default (and F.layer_norm's)


def feature_dim(kind, d):
    if kind == "taylor_exp":
        return 1 + d + d * (d + 1) // 2
    if kind == "rebased":
        return d * (d + 1) // 2
    raise ValueError(kind)


def _diag_offdiag(x):
    """fla flatten_diag_outer_product_off1(x, x): (x_i x_j for i<j in triu order, x_i^2)."""
    d = x.shape[-1]
    iu, ju = np.triu_indices(d, 1)
    return x[..., iu] * x[..., ju], x * x


def taylor_exp(x):
    d = x.shape[-1]
    off, diag = _diag_offdiag(x)
    one = np.ones(x.shape[:-1] + (1,))
    return np.concatenate([one, x / d ** 0.25, diag / (np.sqrt(d) * np.sqrt(2.0)), off / np.sqrt(d)], axis=-1)


def rebased_norm(x, p):
    """RebasedFeatureMap.forward before flattening (feature_map.py:244-255)."""
    g, b = p.get("gamma"), p.get("beta")
    if p["normalize"]:
        mu = x.mean(-1, keepdims=True)
        xc = x - mu
        x = xc / np.sqrt((xc * xc).mean(-1, keepdims=True) + LN_EPS)
        if g is not None:
            x = x * g
        return x if b is None else x + b
    if g is not None and b is not None:
        return x * g + b
    if g is not None:
        return x * g
    raise ValueError("rebased: use_gamma/use_beta/normalize combination not supported by fla")


def rebased(x, p):
    d = x.shape[-1]
    off, diag = _diag_offdiag(rebased_norm(x, p))
    return np.concatenate([diag * d ** -0.5, off * (2.0 / d) ** 0.5], axis=-1)


def ext_feature_map(kind, x, p):
    if kind == "taylor_exp":
        return taylor_exp(x)
    if kind == "rebased":
        return rebased(x, p)
    return ref.feature_map(kind, x, p)


class Model(ref.Model):
    """fla_reference.Model plus the taylor_exp / rebased feature maps for linear_attn."""

    def __init__(self, config, weights, strict=True):
        fm = config.get("feature_map")
        self.ext = config.get("model_type") == "linear_attn" and fm in EXT_MAPS
        if not self.ext:
            super().__init__(config, weights, strict=strict)
            return
        # the parent loads projections / norm as for a parameter-free map, then the map is swapped in
        super().__init__(dict(config, feature_map="identity"), weights, strict=False)
        self.cfg["feature_map"] = fm
        self.F = feature_dim(fm, self.dk)
        c = self.cfg
        for layer_i, L in enumerate(self.layers):
            p = {}
            if fm == "rebased":
                a = f"model.layers.{layer_i}.attn.feature_map."
                p["normalize"] = bool(c.get("normalize", True))
                p["gamma"] = self.get(a + "gamma", (self.dk,)) if c.get("use_gamma", True) else None
                p["beta"] = self.get(a + "beta", (self.dk,)) if c.get("use_beta", True) else None
                if not p["normalize"] and p["gamma"] is None:
                    raise ValueError("rebased: use_gamma=false needs normalize=true (fla raises otherwise)")
            L["fm_q"] = L["fm_k"] = p
        extra = sorted(set(weights) - self._used)
        if strict and extra:
            raise ValueError(f"unexpected tensors: {extra}")

    def _mix_linear_attn(self, L, x, s):
        if not self.ext:
            return super()._mix_linear_attn(L, x, s)
        c, T, G = self.cfg, x.shape[0], self.G
        q, k, v = x @ L["q"].T, x @ L["k"].T, x @ L["v"].T
        rep = np.arange(self.H) // G                      # query head j uses kv head j // G
        q, k, v = ref.heads(q, self.dk), ref.heads(k, self.dk)[:, rep], ref.heads(v, self.dv)[:, rep]
        fm = c["feature_map"]
        q, k = ext_feature_map(fm, q, L["fm_q"]), ext_feature_map(fm, k, L["fm_k"])
        if c["norm_q"]:
            self._record("la_norm_q", q.sum(-1) + 1e-4)
            q = q / (q.sum(-1, keepdims=True) + 1e-4)
        if c["norm_k"]:
            self._record("la_norm_k", k.sum(-1) + 1e-4)
            k = k / (k.sum(-1, keepdims=True) + 1e-4)
        o, s["S"], z, den = ref.rec_linear(q * self.F ** -0.5, k, v, s["S"], s.get("z"))
        if z is not None:
            s["z"] = z
            self._record("la_norm_feature_map", den)
        o = ref.rmsnorm(o, L["norm"], self.eps)
        return o.reshape(T, -1) @ L["o"].T


def load_model(path, strict=True):
    with open(os.path.join(path, "config.json")) as f:
        cfg = json.load(f)
    tensors, _, _ = load_file(os.path.join(path, "model.safetensors"))
    return Model(cfg, tensors, strict=strict)
