// Token-by-token recurrence. Per token and head the state [dk, dv] is read and written once
// from memory (the delta rule's extra pass for Sᵀk runs over a cache-resident column block);
// rows of the state are contiguous over dv, so every pass is a vectorised axpy.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/head_recurrence.h"
#include "kernels/cpu/small_gemm.h"

namespace linfer::cpu {
namespace {

// State columns per block (×4 bytes×dk rows stays within L2 for dk ≤ 512).
constexpr int kColumnBlock = 128;

}  // namespace

void RecurrentForward(const RecurrenceSpec& spec, const HeadSequence& seq, int64_t num_tokens) {
  const int dk = spec.dk;
  const int dv = spec.dv;
  std::vector<float> qs(dk), alpha(dk, 1.0f), u(kColumnBlock);
  float* s = seq.state;
  for (int64_t t = 0; t < num_tokens; ++t) {
    const float* q = seq.q + t * seq.q_stride;
    const float* k = seq.k + t * seq.k_stride;
    const float* v = seq.v + t * seq.v_stride;
    float* o = seq.o + t * seq.o_stride;
    for (int i = 0; i < dk; ++i) qs[i] = q[i] * spec.scale;
    if (spec.decay == DecayKind::kScalar) {
      const float a = std::exp(seq.g[t * seq.g_stride]);
      for (int i = 0; i < dk; ++i) alpha[i] = a;
    } else if (spec.decay == DecayKind::kVector) {
      const float* g = seq.g + t * seq.g_stride;
      for (int i = 0; i < dk; ++i) alpha[i] = std::exp(g[i]);
    }
    // Column blocks of the state: the delta rule's Sᵀk and the update then touch each block
    // twice while it is in cache, so memory sees one read and one write of the state. Rows go
    // four at a time, so the L1-resident u and o are loaded and stored once per four rows, and
    // the next block is prefetched while this one is updated (memory stays busy in both passes).
    for (int j0 = 0; j0 < dv; j0 += kColumnBlock) {
      const int jn = std::min(kColumnBlock, dv - j0);
      const bool prefetch_next = j0 + kColumnBlock < dv;
      const float* add = v + j0;
      if (spec.delta_rule) {  // u = β (v − (αS)ᵀ k)
        float* ub = u.data();
        for (int j = 0; j < jn; ++j) ub[j] = 0.0f;
        int i = 0;
        for (; i + 4 <= dk; i += 4) {
          const float* r0 = s + int64_t{i} * dv + j0;
          const float* r1 = r0 + dv;
          const float* r2 = r1 + dv;
          const float* r3 = r2 + dv;
          const float c0 = alpha[i] * k[i], c1 = alpha[i + 1] * k[i + 1];
          const float c2 = alpha[i + 2] * k[i + 2], c3 = alpha[i + 3] * k[i + 3];
#pragma omp simd
          for (int j = 0; j < jn; ++j) ub[j] += c0 * r0[j] + c1 * r1[j] + c2 * r2[j] + c3 * r3[j];
        }
        for (; i < dk; ++i) cpu::Axpy(alpha[i] * k[i], s + int64_t{i} * dv + j0, ub, jn);
        const float beta = seq.beta[t * seq.beta_stride];
        for (int j = 0; j < jn; ++j) ub[j] = beta * (v[j0 + j] - ub[j]);
        add = ub;
      }
      // S[i,:] = α_i S[i,:] + k_i add;  o = Sᵀ qs
      float* ob = o + j0;
      for (int j = 0; j < jn; ++j) ob[j] = 0.0f;
      int i = 0;
      for (; i + 4 <= dk; i += 4) {
        float* r0 = s + int64_t{i} * dv + j0;
        float* r1 = r0 + dv;
        float* r2 = r1 + dv;
        float* r3 = r2 + dv;
        if (prefetch_next) {
          for (float* r : {r0, r1, r2, r3}) {
            for (int c = 0; c < kColumnBlock; c += 16) __builtin_prefetch(r + kColumnBlock + c);
          }
        }
        const float a0 = alpha[i], a1 = alpha[i + 1], a2 = alpha[i + 2], a3 = alpha[i + 3];
        const float k0 = k[i], k1 = k[i + 1], k2 = k[i + 2], k3 = k[i + 3];
        const float q0 = qs[i], q1 = qs[i + 1], q2 = qs[i + 2], q3 = qs[i + 3];
#pragma omp simd
        for (int j = 0; j < jn; ++j) {
          const float d = add[j];
          const float x0 = a0 * r0[j] + k0 * d;
          const float x1 = a1 * r1[j] + k1 * d;
          const float x2 = a2 * r2[j] + k2 * d;
          const float x3 = a3 * r3[j] + k3 * d;
          r0[j] = x0;
          r1[j] = x1;
          r2[j] = x2;
          r3[j] = x3;
          ob[j] += q0 * x0 + q1 * x1 + q2 * x2 + q3 * x3;
        }
      }
      for (; i < dk; ++i) {
        float* row = s + int64_t{i} * dv + j0;
        const float a = alpha[i];
        const float ki = k[i];
        const float qi = qs[i];
#pragma omp simd
        for (int j = 0; j < jn; ++j) {
          const float x = a * row[j] + ki * add[j];
          row[j] = x;
          ob[j] += qi * x;
        }
      }
    }
    if (spec.normalize) {
      float denom = 0.0f;
      for (int i = 0; i < dk; ++i) {
        seq.z[i] += k[i];
        denom += qs[i] * seq.z[i];
      }
      const float inv = 1.0f / (denom + 1e-10f);
      for (int j = 0; j < dv; ++j) o[j] *= inv;
    }
  }
}

}  // namespace linfer::cpu
