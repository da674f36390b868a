// Token-by-token recurrence. Per token and head the state [dk, dv] is read and written once
// (plus one extra read pass for the delta rule, which needs Sᵀk before the update); rows of the
// state are contiguous over dv, so every pass is a vectorised axpy.
#include "kernels/recurrence.h"

#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/small_gemm.h"

namespace linfer {

absl::Status ValidateRecurrenceSpec(const RecurrenceSpec& spec) {
  if (spec.dk <= 0 || spec.dv <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("recurrence dims must be positive, got dk=", spec.dk, " dv=", spec.dv));
  }
  if (spec.delta_rule && spec.decay == DecayKind::kVector) {
    return absl::UnimplementedError("the delta rule with a per-key-channel decay");
  }
  if (spec.normalize && (spec.delta_rule || spec.decay != DecayKind::kNone)) {
    return absl::UnimplementedError("the normaliser is only defined for plain linear attention");
  }
  return absl::OkStatus();
}

void RecurrentForward(const RecurrenceSpec& spec, const HeadSequence& seq, int64_t num_tokens) {
  const int dk = spec.dk;
  const int dv = spec.dv;
  std::vector<float> qs(dk), alpha(dk, 1.0f), u(dv);
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
    const float* add = v;
    if (spec.delta_rule) {
      // u = β (v − (αS)ᵀ k)
      for (int j = 0; j < dv; ++j) u[j] = 0.0f;
      for (int i = 0; i < dk; ++i) cpu::Axpy(alpha[i] * k[i], s + int64_t{i} * dv, u.data(), dv);
      const float beta = seq.beta[t * seq.beta_stride];
      for (int j = 0; j < dv; ++j) u[j] = beta * (v[j] - u[j]);
      add = u.data();
    }
    // S[i,:] = α_i S[i,:] + k_i add;  o = Sᵀ qs  (one read and one write of the state)
    for (int j = 0; j < dv; ++j) o[j] = 0.0f;
    for (int i = 0; i < dk; ++i) {
      float* row = s + int64_t{i} * dv;
      const float a = alpha[i];
      const float ki = k[i];
      const float qi = qs[i];
#pragma omp simd
      for (int j = 0; j < dv; ++j) {
        const float x = a * row[j] + ki * add[j];
        row[j] = x;
        o[j] += qi * x;
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

}  // namespace linfer
