// Mamba2 ops (CPU): loops over strided rows.
#include <algorithm>
#include <cmath>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/parallel.h"

namespace linfer::cpu {
namespace {

constexpr int64_t kParallelWork = int64_t{1} << 16;

}  // namespace

absl::Status Mamba2Gates(const ExecContext&, const TensorView& dt, const TensorView& dt_bias,
                         const TensorView& a_log, float lo, float hi, const TensorView& delta,
                         const TensorView& g) {
  const int64_t heads = dt.dim(1);
  const float *bias = dt_bias.data<const float>(), *alog = a_log.data<const float>();
  for (int64_t t = 0; t < dt.dim(0); ++t) {
    const float* x = dt.data<const float>() + t * dt.row_stride();
    float* d = delta.data<float>() + t * delta.row_stride();
    float* gr = g.data<float>() + t * g.row_stride();
    for (int64_t h = 0; h < heads; ++h) {
      const float v = std::clamp(linfer::Softplus(x[h] + bias[h]), lo, hi);
      d[h] = v;
      gr[h] = -std::exp(alog[h]) * v;
    }
  }
  return absl::OkStatus();
}

absl::Status ScaleGroups(const ExecContext&, const TensorView& x, const TensorView& s,
                         bool accumulate, const TensorView& y) {
  const int64_t n = x.dim(1), groups = s.dim(-1), w = n / groups;
  const bool per_row = s.rank() == 2 && s.dim(0) == x.dim(0) && x.dim(0) != 1;
  ParallelFor(x.dim(0), x.numel() > kParallelWork, [&](int64_t t) {
    const float* xr = x.data<const float>() + t * x.row_stride();
    const float* sr = s.data<const float>() + (per_row ? t * s.row_stride() : 0);
    float* yr = y.data<float>() + t * y.row_stride();
    for (int64_t c = 0; c < n; ++c) {
      const float v = xr[c] * sr[c / w];
      yr[c] = accumulate ? yr[c] + v : v;
    }
  });
  return absl::OkStatus();
}

absl::Status BiasActivate(const ExecContext&, const TensorView& x, const TensorView& b,
                          Activation act, const TensorView& y) {
  const int64_t n = x.dim(1);
  const float* bs = b.data<const float>();
  ParallelFor(x.dim(0), x.numel() > kParallelWork, [&](int64_t t) {
    const float* xr = x.data<const float>() + t * x.row_stride();
    float* yr = y.data<float>() + t * y.row_stride();
    for (int64_t c = 0; c < n; ++c) yr[c] = linfer::Activate(act, xr[c] + bs[c]);
  });
  return absl::OkStatus();
}

}  // namespace linfer::cpu
