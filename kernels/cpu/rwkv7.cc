// RWKV-7 ops (CPU): simple loops over strided rows; the recurrence runs one (segment, head) per
// task.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/parallel.h"

namespace linfer::cpu {
namespace {

constexpr int64_t kParallelWork = int64_t{1} << 16;

const float* Row(const TensorView& t, int64_t r) {
  return t.data<const float>() + r * t.row_stride();
}
float* MutableRow(const TensorView& t, int64_t r) { return t.data<float>() + r * t.row_stride(); }

}  // namespace

absl::Status TokenShift(const ExecContext&, const TensorView& x, const Segments& segs,
                        const TensorView& state, const TensorView& delta) {
  const int64_t n = x.dim(1);
  for (const Segment& s : segs.host) {
    float* prev = state.data<float>() + s.slot * n;
    for (int64_t t = 0; t < s.num_tokens; ++t) {
      const int64_t r = s.row_begin + t;
      const float* xp = t == 0 ? prev : Row(x, r - 1);
      const float* xr = Row(x, r);
      float* d = MutableRow(delta, r);
      for (int64_t c = 0; c < n; ++c) d[c] = xp[c] - xr[c];
    }
    std::copy_n(Row(x, s.row_begin + s.num_tokens - 1), n, prev);
  }
  return absl::OkStatus();
}

absl::Status MixRows(const ExecContext&, const TensorView& x, const TensorView& d,
                     const TensorView& m, const TensorView& y) {
  const int64_t n = x.dim(1);
  const float* ms = m.data<const float>();
  ParallelFor(x.dim(0), x.numel() > kParallelWork, [&](int64_t r) {
    const float *xr = Row(x, r), *dr = Row(d, r);
    float* yr = MutableRow(y, r);
    for (int64_t c = 0; c < n; ++c) yr[c] = xr[c] + dr[c] * ms[c];
  });
  return absl::OkStatus();
}

absl::Status Rwkv7Keys(const ExecContext&, const TensorView& k, const TensorView& a,
                       const TensorView& k_k, const TensorView& k_a, int64_t head_dim,
                       bool fused_norm, const TensorView& kk, const TensorView& k_out) {
  const int64_t n = k.dim(1);
  const float *kks = k_k.data<const float>(), *kas = k_a.data<const float>();
  ParallelFor(k.dim(0), k.numel() > kParallelWork, [&](int64_t r) {
    const float *kr = Row(k, r), *ar = Row(a, r);
    float *kkr = MutableRow(kk, r), *kor = MutableRow(k_out, r);
    for (int64_t c0 = 0; c0 < n; c0 += head_dim) {
      float ss = 0.0f;
      for (int64_t c = c0; c < c0 + head_dim; ++c) {
        kkr[c] = kr[c] * kks[c];
        ss += kkr[c] * kkr[c];
      }
      const float inv =
          fused_norm ? 1.0f / std::sqrt(ss + 1e-6f) : 1.0f / std::max(std::sqrt(ss), 1e-12f);
      for (int64_t c = c0; c < c0 + head_dim; ++c) {
        kkr[c] *= inv;
        kor[c] = kr[c] * (1.0f + (ar[c] - 1.0f) * kas[c]);
      }
    }
  });
  return absl::OkStatus();
}

absl::Status Rwkv7ValueResidual(const ExecContext&, const TensorView& v, const TensorView& v_first,
                                const TensorView& z, const TensorView& y) {
  const int64_t n = v.dim(1);
  ParallelFor(v.dim(0), v.numel() > kParallelWork, [&](int64_t r) {
    const float *vr = Row(v, r), *fr = Row(v_first, r), *zr = Row(z, r);
    float* yr = MutableRow(y, r);
    for (int64_t c = 0; c < n; ++c) yr[c] = vr[c] + (fr[c] - vr[c]) * linfer::Sigmoid(zr[c]);
  });
  return absl::OkStatus();
}

absl::Status Rwkv7Bonus(const ExecContext&, const TensorView& o, const TensorView& r,
                        const TensorView& k, const TensorView& r_k, const TensorView& v,
                        const TensorView& g, int64_t heads, const TensorView& y) {
  const int64_t dk = r.dim(1) / heads, dv = o.dim(1) / heads;
  const float* rks = r_k.data<const float>();
  ParallelFor(o.dim(0), o.numel() > kParallelWork, [&](int64_t t) {
    const float *orow = Row(o, t), *rr = Row(r, t), *kr = Row(k, t), *vr = Row(v, t),
                *gr = Row(g, t);
    float* yr = MutableRow(y, t);
    for (int64_t h = 0; h < heads; ++h) {
      float s = 0.0f;
      for (int64_t i = h * dk; i < (h + 1) * dk; ++i) s += rr[i] * kr[i] * rks[i];
      for (int64_t j = h * dv; j < (h + 1) * dv; ++j) yr[j] = (orow[j] + s * vr[j]) * gr[j];
    }
  });
  return absl::OkStatus();
}

namespace {

struct HeadIo {  // one head's columns of the inputs and output, rows [row0, row0 + n)
  const Rwkv7Inputs* in;
  const TensorView* o;
  int64_t h, dk, dv;
  const float* r(int64_t t) const { return Row(in->r, t) + h * dk; }
  const float* w(int64_t t) const { return Row(in->w, t) + h * dk; }
  const float* k(int64_t t) const { return Row(in->k, t) + h * dk; }
  const float* kk(int64_t t) const { return Row(in->kk, t) + h * dk; }
  const float* a(int64_t t) const { return Row(in->a, t) + h * dk; }
  const float* v(int64_t t) const { return Row(in->v, t) + h * dv; }
  float* out(int64_t t) const { return MutableRow(*o, t) + h * dv; }
};

// Token by token: sa = −kkᵀ S (the un-decayed state), then S ← diag(e^w) S + (kk⊙a) saᵀ + k vᵀ.
void RecurrentHead(const HeadIo& io, int64_t row0, int64_t n, float* s) {
  const int64_t dk = io.dk, dv = io.dv;
  std::vector<float> sa(dv);
  for (int64_t t = row0; t < row0 + n; ++t) {
    const float *r = io.r(t), *w = io.w(t), *k = io.k(t), *kk = io.kk(t), *a = io.a(t),
                *v = io.v(t);
    float* out = io.out(t);
    std::fill(sa.begin(), sa.end(), 0.0f);
    for (int64_t i = 0; i < dk; ++i) {
      for (int64_t j = 0; j < dv; ++j) sa[j] -= kk[i] * s[i * dv + j];
    }
    std::fill(out, out + dv, 0.0f);
    for (int64_t i = 0; i < dk; ++i) {
      float* si = s + i * dv;
      const float decay = std::exp(w[i]), b = kk[i] * a[i], ki = k[i], ri = r[i];
      for (int64_t j = 0; j < dv; ++j) {
        si[j] = decay * si[j] + b * sa[j] + ki * v[j];
        out[j] += si[j] * ri;
      }
    }
  }
}

// Chunked form: within a chunk of L tokens from state S0, with G_j = Σ_{i<j} w_i per channel
// (G_0 = 0) and token r's additions x_r = b_r u_rᵀ + k_r v_rᵀ (b = kk⊙a) decayed by e^{G_j −
// G_{r+1}}:
//   u_j = −kk_jᵀ S_j = −kk_jᵀ(e^{G_j} S0 + Σ_{r<j} e^{G_j − G_{r+1}} x_r)   (solved in order of j)
//   o_j = r_jᵀ(e^{G_{j+1}} S0 + Σ_{r≤j} e^{G_{j+1} − G_{r+1}} x_r),  S_L likewise.
// Every exponent is ≤ 0. Equal to RecurrentHead up to f32 rounding.
void ChunkedHead(const HeadIo& io, int64_t row0, int64_t n, float* s, int64_t chunk) {
  const int64_t dk = io.dk, dv = io.dv;
  std::vector<float> g((chunk + 1) * dk), u(chunk * dv), e(dk);
  for (int64_t c0 = 0; c0 < n; c0 += chunk) {
    const int64_t len = std::min(chunk, n - c0), base = row0 + c0;
    std::fill(g.begin(), g.begin() + dk, 0.0f);
    for (int64_t j = 0; j < len; ++j) {
      const float* w = io.w(base + j);
      for (int64_t i = 0; i < dk; ++i) g[(j + 1) * dk + i] = g[j * dk + i] + w[i];
    }
    // y (dv) = qᵀ(e^{G_m} S0 + Σ_{r<end} e^{G_m − G_{r+1}} x_r) for q over dk.
    auto contract = [&](const float* q, int64_t m, int64_t end, float* y) {
      std::fill(y, y + dv, 0.0f);
      for (int64_t i = 0; i < dk; ++i) {
        const float c = q[i] * std::exp(g[m * dk + i]);
        for (int64_t jj = 0; jj < dv; ++jj) y[jj] += c * s[i * dv + jj];
      }
      for (int64_t r = 0; r < end; ++r) {
        const float *kk = io.kk(base + r), *a = io.a(base + r), *k = io.k(base + r);
        float cb = 0.0f, ck = 0.0f;
        for (int64_t i = 0; i < dk; ++i) {
          const float d = q[i] * std::exp(g[m * dk + i] - g[(r + 1) * dk + i]);
          cb += d * kk[i] * a[i];
          ck += d * k[i];
        }
        const float *ur = u.data() + r * dv, *vr = io.v(base + r);
        for (int64_t jj = 0; jj < dv; ++jj) y[jj] += cb * ur[jj] + ck * vr[jj];
      }
    };
    for (int64_t j = 0; j < len; ++j) {
      const float* kk = io.kk(base + j);
      for (int64_t i = 0; i < dk; ++i) e[i] = -kk[i];
      contract(e.data(), j, j, u.data() + j * dv);
    }
    for (int64_t j = 0; j < len; ++j) contract(io.r(base + j), j + 1, j + 1, io.out(base + j));
    // S_L, row i: e^{G_L,i} S0_i + Σ_r e^{G_L,i − G_{r+1},i} (b_r,i u_r + k_r,i v_r).
    for (int64_t i = 0; i < dk; ++i) {
      float* si = s + i * dv;
      const float d0 = std::exp(g[len * dk + i]);
      for (int64_t jj = 0; jj < dv; ++jj) si[jj] *= d0;
      for (int64_t r = 0; r < len; ++r) {
        const float d = std::exp(g[len * dk + i] - g[(r + 1) * dk + i]);
        const float cb = d * io.kk(base + r)[i] * io.a(base + r)[i], ck = d * io.k(base + r)[i];
        const float *ur = u.data() + r * dv, *vr = io.v(base + r);
        for (int64_t jj = 0; jj < dv; ++jj) si[jj] += cb * ur[jj] + ck * vr[jj];
      }
    }
  }
}

}  // namespace

absl::Status Rwkv7Recurrence(const ExecContext& ctx, const Rwkv7Inputs& in, const Segments& segs,
                             const TensorView& state, const RecurrenceOptions& options,
                             const TensorView& o) {
  const int64_t heads = state.dim(1), dk = state.dim(2), dv = state.dim(3);
  const int64_t n_seg = static_cast<int64_t>(segs.host.size());
  const int64_t chunk = std::max(1, options.chunk_size);
  const bool parallel = segs.total_tokens() * heads * dk * dv > kParallelWork;
  ParallelFor<Schedule::kDynamic>(n_seg * heads, parallel, [&](int64_t task) {
    const Segment& seg = segs.host[task / heads];
    const HeadIo io{&in, &o, task % heads, dk, dv};
    float* s = state.data<float>() + (seg.slot * heads + io.h) * dk * dv;
    // kAuto runs token by token: this chunked form takes O(L²·dk) exponentials per chunk, more
    // work on a CPU than the O(L·dk·dv) recurrence; it is the second form the tests hold the
    // rule to (and the layout a tensor-core kernel would follow).
    if (options.mode == RecurrenceMode::kChunked && !ctx.batch_invariant) {
      ChunkedHead(io, seg.row_begin, seg.num_tokens, s, chunk);
    } else {
      RecurrentHead(io, seg.row_begin, seg.num_tokens, s);
    }
  });
  return absl::OkStatus();
}

}  // namespace linfer::cpu
