// Chunked recurrence (prefill). Within a chunk of L tokens starting from state h (log-decay
// cumsum b, γ_i = e^{b_i}):
//   delta rule: u_i = β_i(v_i − γ_i hᵀk_i) − Σ_{j<i} β_i e^{b_i−b_j}(k_i·k_j) u_j  (forward
//               substitution = the UT transform); otherwise u = v
//   o_i = γ_i hᵀq_i + Σ_{j≤i} e^{b_i−b_j} (q_i·k_j) u_j;   h ← γ_L h + Σ_j e^{b_L−b_j} k_j u_jᵀ
// Vector decay (GLA) uses per-channel e^{B_i−B_j}, computed in 16-token sub-blocks so that every
// exponent is ≤ 0 (no overflow). All products are small row-major GEMMs (kernels/cpu/small_gemm.h).
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/head_recurrence.h"
#include "kernels/cpu/small_gemm.h"

namespace linfer::cpu {
namespace {

constexpr int kSubBlock = 16;

struct Workspace {
  std::vector<float> q, k, v, u, b, m, kh, tmp, kd;
  void Resize(int c, int dk, int dv) {
    q.resize(size_t(c) * dk);
    k.resize(size_t(c) * dk);
    v.resize(size_t(c) * dv);
    u.resize(size_t(c) * dv);
    b.resize(size_t(c) * dk);  // log-decay cumsum: [c] scalar or [c, dk] vector
    m.resize(size_t(c) * c);
    kh.resize(size_t(c) * dv);
    tmp.resize(size_t(c) * dk);
    kd.resize(size_t(c) * dk);
  }
};

// Chunk with no decay or a scalar decay per token.
void ScalarChunk(const RecurrenceSpec& spec, const HeadSequence& seq, int64_t t0, int len,
                 Workspace& w) {
  const int dk = spec.dk, dv = spec.dv;
  float* h = seq.state;
  // b: cumulative log-decay within the chunk.
  float acc = 0.0f;
  for (int i = 0; i < len; ++i) {
    if (spec.decay == DecayKind::kScalar) acc += seq.g[(t0 + i) * seq.g_stride];
    w.b[i] = acc;
  }
  // M_ij = e^{b_i − b_j} (q_i·k_j) for j ≤ i.
  cpu::MatMulBT(w.q.data(), dk, w.k.data(), dk, w.m.data(), len, len, len, dk, false);
  for (int i = 0; i < len; ++i) {
    for (int j = 0; j < len; ++j) {
      float& x = w.m[size_t(i) * len + j];
      x = j <= i ? x * std::exp(w.b[i] - w.b[j]) : 0.0f;
    }
  }
  const float* u = w.v.data();
  if (spec.delta_rule) {
    // rhs_i = β_i (v_i − γ_i (hᵀ k_i)), then forward substitution with A_ij = β_i e^{b_i−b_j}
    // k_i·k_j.
    cpu::MatMul(w.k.data(), dk, h, dv, w.kh.data(), dv, len, dv, dk, false);
    for (int i = 0; i < len; ++i) {
      const float beta = seq.beta[(t0 + i) * seq.beta_stride];
      const float gamma = std::exp(w.b[i]);
      float* ui = w.u.data() + size_t(i) * dv;
      const float* vi = w.v.data() + size_t(i) * dv;
      const float* khi = w.kh.data() + size_t(i) * dv;
      for (int j = 0; j < dv; ++j) ui[j] = beta * (vi[j] - gamma * khi[j]);
      const float* ki = w.k.data() + size_t(i) * dk;
      for (int j = 0; j < i; ++j) {
        const float a =
            beta * std::exp(w.b[i] - w.b[j]) * cpu::Dot(ki, w.k.data() + size_t(j) * dk, dk);
        cpu::Axpy(-a, w.u.data() + size_t(j) * dv, ui, dv);
      }
    }
    u = w.u.data();
  }
  // o = diag(γ) Q h + M U
  float* o_rows = w.kh.data();  // reuse: [len, dv]
  cpu::MatMul(w.q.data(), dk, h, dv, o_rows, dv, len, dv, dk, false);
  for (int i = 0; i < len; ++i) {
    const float gamma = std::exp(w.b[i]);
    for (int j = 0; j < dv; ++j) o_rows[size_t(i) * dv + j] *= gamma;
  }
  cpu::MatMul(w.m.data(), len, u, dv, o_rows, dv, len, dv, len, true);
  if (spec.normalize) {
    // z_i = z0 + Σ_{j≤i} k_j; denominator scale·q_i·z_i = q_i·z0 + Σ_{j≤i} M_ij (no decay here).
    for (int i = 0; i < len; ++i) {
      float denom = cpu::Dot(w.q.data() + size_t(i) * dk, seq.z, dk);
      for (int j = 0; j <= i; ++j) denom += w.m[size_t(i) * len + j];
      const float inv = 1.0f / (denom + 1e-10f);
      for (int j = 0; j < dv; ++j) o_rows[size_t(i) * dv + j] *= inv;
    }
    for (int i = 0; i < len; ++i) cpu::Axpy(1.0f, w.k.data() + size_t(i) * dk, seq.z, dk);
  }
  for (int i = 0; i < len; ++i) {
    std::copy_n(o_rows + size_t(i) * dv, dv, seq.o + (t0 + i) * seq.o_stride);
  }
  // h = γ_L h + (diag(e^{b_L − b}) K)ᵀ U
  const float b_last = w.b[len - 1];
  const float gamma_last = std::exp(b_last);
  for (int64_t x = 0; x < int64_t{dk} * dv; ++x) h[x] *= gamma_last;
  for (int i = 0; i < len; ++i) {
    const float f = std::exp(b_last - w.b[i]);
    for (int c = 0; c < dk; ++c) w.kd[size_t(i) * dk + c] = w.k[size_t(i) * dk + c] * f;
  }
  cpu::MatMulAT(w.kd.data(), dk, u, dv, h, dv, dk, dv, len, true);
}

// Chunk with a per-key-channel decay (GLA).
void VectorChunk(const RecurrenceSpec& spec, const HeadSequence& seq, int64_t t0, int len,
                 Workspace& w) {
  const int dk = spec.dk, dv = spec.dv;
  float* h = seq.state;
  float* bb = w.b.data();  // [len, dk] cumulative log-decay
  for (int i = 0; i < len; ++i) {
    const float* g = seq.g + (t0 + i) * seq.g_stride;
    for (int c = 0; c < dk; ++c)
      bb[size_t(i) * dk + c] = g[c] + (i > 0 ? bb[size_t(i - 1) * dk + c] : 0.0f);
  }
  // Intra-chunk scores A (lower triangular), by 16-token query sub-blocks referenced at r = i0.
  std::fill_n(w.m.data(), size_t(len) * len, 0.0f);
  for (int i0 = 0; i0 < len; i0 += kSubBlock) {
    const int i1 = std::min(len, i0 + kSubBlock);
    const float* br = bb + size_t(i0) * dk;
    if (i0 > 0) {
      for (int i = i0; i < i1; ++i) {
        for (int c = 0; c < dk; ++c) {
          w.tmp[size_t(i - i0) * dk + c] =
              w.q[size_t(i) * dk + c] * std::exp(bb[size_t(i) * dk + c] - br[c]);
        }
      }
      for (int j = 0; j < i0; ++j) {
        for (int c = 0; c < dk; ++c) {
          w.kd[size_t(j) * dk + c] =
              w.k[size_t(j) * dk + c] * std::exp(br[c] - bb[size_t(j) * dk + c]);
        }
      }
      cpu::MatMulBT(w.tmp.data(), dk, w.kd.data(), dk, w.m.data() + size_t(i0) * len, len, i1 - i0,
                    i0, dk, false);
    }
    for (int i = i0; i < i1; ++i) {
      for (int j = i0; j <= i; ++j) {
        float acc = 0.0f;
        const float* qi = w.q.data() + size_t(i) * dk;
        const float* kj = w.k.data() + size_t(j) * dk;
        const float* bi = bb + size_t(i) * dk;
        const float* bj = bb + size_t(j) * dk;
        for (int c = 0; c < dk; ++c) acc += qi[c] * kj[c] * std::exp(bi[c] - bj[c]);
        w.m[size_t(i) * len + j] = acc;
      }
    }
  }
  // o = (Q ⊙ e^{B}) h + A V
  for (int i = 0; i < len; ++i) {
    for (int c = 0; c < dk; ++c) {
      w.tmp[size_t(i) * dk + c] = w.q[size_t(i) * dk + c] * std::exp(bb[size_t(i) * dk + c]);
    }
  }
  float* o_rows = w.kh.data();
  cpu::MatMul(w.tmp.data(), dk, h, dv, o_rows, dv, len, dv, dk, false);
  cpu::MatMul(w.m.data(), len, w.v.data(), dv, o_rows, dv, len, dv, len, true);
  for (int i = 0; i < len; ++i) {
    std::copy_n(o_rows + size_t(i) * dv, dv, seq.o + (t0 + i) * seq.o_stride);
  }
  // h = diag(e^{B_L}) h + (K ⊙ e^{B_L − B})ᵀ V
  const float* bl = bb + size_t(len - 1) * dk;
  for (int c = 0; c < dk; ++c) {
    const float f = std::exp(bl[c]);
    for (int j = 0; j < dv; ++j) h[size_t(c) * dv + j] *= f;
  }
  for (int i = 0; i < len; ++i) {
    for (int c = 0; c < dk; ++c) {
      w.kd[size_t(i) * dk + c] = w.k[size_t(i) * dk + c] * std::exp(bl[c] - bb[size_t(i) * dk + c]);
    }
  }
  cpu::MatMulAT(w.kd.data(), dk, w.v.data(), dv, h, dv, dk, dv, len, true);
}

}  // namespace

void ChunkedForward(const RecurrenceSpec& spec, const HeadSequence& seq, int64_t num_tokens,
                    int chunk_size) {
  const int dk = spec.dk, dv = spec.dv;
  const int c = std::max(1, chunk_size);
  thread_local Workspace w;
  w.Resize(c, dk, dv);
  for (int64_t t0 = 0; t0 < num_tokens; t0 += c) {
    const int len = static_cast<int>(std::min<int64_t>(c, num_tokens - t0));
    for (int i = 0; i < len; ++i) {
      const float* q = seq.q + (t0 + i) * seq.q_stride;
      for (int x = 0; x < dk; ++x) w.q[size_t(i) * dk + x] = q[x] * spec.scale;
      std::copy_n(seq.k + (t0 + i) * seq.k_stride, dk, w.k.data() + size_t(i) * dk);
      std::copy_n(seq.v + (t0 + i) * seq.v_stride, dv, w.v.data() + size_t(i) * dv);
    }
    if (spec.decay == DecayKind::kVector) {
      VectorChunk(spec, seq, t0, len, w);
    } else {
      ScalarChunk(spec, seq, t0, len, w);
    }
  }
}

}  // namespace linfer::cpu
