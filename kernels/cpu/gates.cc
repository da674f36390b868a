// Gate ops (CPU), elementwise over [T, H] views.
#include <algorithm>
#include <cmath>

#include "kernels/cpu/ops.h"

namespace linfer::cpu {
namespace {

template <typename Fn>
void ForEach(const TensorView& out, Fn&& fn) {
  for (int64_t i = 0; i < out.dim(0); ++i) {
    for (int64_t j = 0; j < out.dim(1); ++j) fn(i, j);
  }
}

float At(const TensorView& t, int64_t i, int64_t j) {
  return t.data<const float>()[i * t.row_stride() + j];
}
float& Ref(const TensorView& t, int64_t i, int64_t j) {
  return t.data<float>()[i * t.row_stride() + j];
}

}  // namespace

absl::Status GdnGates(const ExecContext&, const TensorView& a, const TensorView& b,
                      const TensorView& a_log, const TensorView& dt_bias, float beta_scale,
                      const TensorView& g, const TensorView& beta) {
  const float* al = a_log.data<const float>();
  const float* db = dt_bias.data<const float>();
  ForEach(g, [&](int64_t i, int64_t h) {
    const float gi = -std::exp(al[h]) * Softplus(At(a, i, h) + db[h]);
    const float bi = Sigmoid(At(b, i, h)) * beta_scale;
    Ref(g, i, h) = gi;
    Ref(beta, i, h) = bi;
  });
  return absl::OkStatus();
}

absl::Status SigmoidScale(const ExecContext&, const TensorView& x, float scale,
                          const TensorView& y) {
  ForEach(y, [&](int64_t i, int64_t j) { Ref(y, i, j) = Sigmoid(At(x, i, j)) * scale; });
  return absl::OkStatus();
}

absl::Status GlaDecay(const ExecContext&, const TensorView& x, float normalizer, float clamp_min,
                      const TensorView& y) {
  ForEach(y, [&](int64_t i, int64_t j) {
    Ref(y, i, j) = std::max(LogSigmoid(At(x, i, j)) / normalizer, clamp_min);
  });
  return absl::OkStatus();
}

absl::Status Fill(const ExecContext&, float value, const TensorView& y) {
  ForEach(y, [&](int64_t i, int64_t j) { Ref(y, i, j) = value; });
  return absl::OkStatus();
}

}  // namespace linfer::cpu
