// DPFP and hedgehog feature maps (CPU), one input row at a time.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/ops.h"

namespace linfer::cpu {
namespace {

void Dpfp(const float* x, int64_t d, float* out) {
  const int64_t n = 2 * d;
  std::vector<float> r(n);
  for (int64_t i = 0; i < d; ++i) {
    r[i] = std::max(x[i], 0.0f);
    r[d + i] = -r[i];
  }
  for (int64_t j = 1; j <= 4; ++j) {
    float* o = out + (j - 1) * n;
    for (int64_t i = 0; i < n; ++i) o[i] = r[i] * r[((i - j) % n + n) % n];
  }
}

void Hedgehog(const float* z, int64_t d, float* out) {
  float mx = -INFINITY;
  for (int64_t i = 0; i < d; ++i) mx = std::max(mx, std::abs(2.0f * z[i]));
  double sum = 0.0;
  for (int64_t i = 0; i < d; ++i) {
    out[i] = std::exp(2.0f * z[i] - mx);
    out[d + i] = std::exp(-2.0f * z[i] - mx);
    sum += out[i] + out[d + i];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < 2 * d; ++i) out[i] *= inv;
}

// Based's Taylor map (taylor) or ReBased's quadratic map: [1, x/d^¼]? then the diagonal
// x_i²·c_diag, then x_i x_j·c_off for i < j in row-major order.
void Quadratic(const float* x, int64_t d, bool taylor, float* out) {
  const float sd = std::sqrt(static_cast<float>(d));
  const float c_diag = taylor ? 1.0f / (std::sqrt(2.0f) * sd) : 1.0f / sd;
  const float c_off = taylor ? 1.0f / sd : std::sqrt(2.0f / static_cast<float>(d));
  if (taylor) {
    *out++ = 1.0f;
    const float c1 = 1.0f / std::sqrt(sd);
    for (int64_t i = 0; i < d; ++i) *out++ = x[i] * c1;
  }
  for (int64_t i = 0; i < d; ++i) *out++ = x[i] * x[i] * c_diag;
  for (int64_t i = 0; i < d; ++i) {
    for (int64_t j = i + 1; j < d; ++j) *out++ = x[i] * x[j] * c_off;
  }
}

}  // namespace

absl::Status FeatureMap(const ExecContext&, FeatureMapKind kind, const TensorView& x,
                        const TensorView& y) {
  const int64_t d = x.dim(1);
  for (int64_t r = 0; r < x.dim(0); ++r) {
    const float* xr = x.data<const float>() + r * x.row_stride();
    float* yr = y.data<float>() + r * y.row_stride();
    switch (kind) {
      case FeatureMapKind::kDpfp:
        Dpfp(xr, d, yr);
        break;
      case FeatureMapKind::kHedgehog:
        Hedgehog(xr, d, yr);
        break;
      case FeatureMapKind::kTaylor:
      case FeatureMapKind::kQuadratic:
        Quadratic(xr, d, kind == FeatureMapKind::kTaylor, yr);
        break;
    }
  }
  return absl::OkStatus();
}

}  // namespace linfer::cpu
