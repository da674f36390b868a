// RMSNorm, gated RMSNorm, l2norm and sum-norm (CPU), over groups of columns of strided rows.
#include <cmath>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/small_gemm.h"

namespace linfer::cpu {
namespace {

// fn(x_group, y_group, row, first_column) for every group of every row; in parallel over groups
// when the work pays for waking the threads.
template <typename Fn>
void ForEachGroup(const TensorView& x, const TensorView& y, int64_t group, Fn&& fn) {
  const int64_t per_row = x.dim(1) / group;
  const int64_t groups = x.dim(0) * per_row;
  const float* xs = x.data<const float>();
  float* ys = y.data<float>();
  ParallelFor(groups, x.numel() > (int64_t{1} << 16), [&](int64_t i) {
    const int64_t r = i / per_row, c = (i % per_row) * group;
    fn(xs + r * x.row_stride() + c, ys + r * y.row_stride() + c, r, c);
  });
}

}  // namespace

absl::Status RmsNorm(const ExecContext&, const TensorView& x, const TensorView& w,
                     const NormParams& p, const TensorView& y) {
  const float* ws = w.empty() ? nullptr : w.data<const float>();
  const int64_t g = p.group;
  const float shift = p.zero_centered ? 1.0f : 0.0f;
  ForEachGroup(x, y, g, [&](const float* xr, float* yr, int64_t, int64_t) {
    const float inv = 1.0f / std::sqrt(Dot(xr, xr, g) / g + p.eps);
    for (int64_t j = 0; j < g; ++j) yr[j] = xr[j] * inv * (ws ? ws[j] + shift : 1.0f);
  });
  return absl::OkStatus();
}

absl::Status LayerNorm(const ExecContext&, const TensorView& x, const TensorView& w,
                       const TensorView& b, const NormParams& p, const TensorView& y) {
  const float* ws = w.empty() ? nullptr : w.data<const float>();
  const float* bs = b.empty() ? nullptr : b.data<const float>();
  const bool w_cols = !w.empty() && w.numel() != p.group,
             b_cols = !b.empty() && b.numel() != p.group;
  const int64_t g = p.group;
  ForEachGroup(x, y, g, [&](const float* xr, float* yr, int64_t, int64_t c) {
    float mean = 0.0f, var = 0.0f;
    for (int64_t j = 0; j < g; ++j) mean += xr[j];
    mean /= static_cast<float>(g);
    for (int64_t j = 0; j < g; ++j) var += (xr[j] - mean) * (xr[j] - mean);
    const float inv = 1.0f / std::sqrt(var / static_cast<float>(g) + p.eps);
    for (int64_t j = 0; j < g; ++j) {
      const float wj = ws ? ws[w_cols ? c + j : j] : 1.0f, bj = bs ? bs[b_cols ? c + j : j] : 0.0f;
      yr[j] = (xr[j] - mean) * inv * wj + bj;
    }
  });
  return absl::OkStatus();
}

absl::Status GatedRmsNorm(const ExecContext&, const TensorView& x, const TensorView& gate,
                          const TensorView& w, const NormParams& p, Activation act,
                          const TensorView& y) {
  const float* ws = w.empty() ? nullptr : w.data<const float>();
  const float* gs = gate.data<const float>();
  const int64_t g = p.group;
  const float shift = p.zero_centered ? 1.0f : 0.0f;
  ForEachGroup(x, y, g, [&](const float* xr, float* yr, int64_t r, int64_t c) {
    const float* gr = gs + r * gate.row_stride() + c;
    const float inv = 1.0f / std::sqrt(Dot(xr, xr, g) / g + p.eps);
    for (int64_t j = 0; j < g; ++j) {
      yr[j] = xr[j] * inv * (ws ? ws[j] + shift : 1.0f) * linfer::Activate(act, gr[j]);
    }
  });
  return absl::OkStatus();
}

absl::Status L2Normalize(const ExecContext&, const TensorView& x, int64_t group, float eps,
                         const TensorView& y) {
  ForEachGroup(x, y, group, [&](const float* xr, float* yr, int64_t, int64_t) {
    const float inv = 1.0f / std::sqrt(Dot(xr, xr, group) + eps);
    for (int64_t j = 0; j < group; ++j) yr[j] = xr[j] * inv;
  });
  return absl::OkStatus();
}

absl::Status SumNormalize(const ExecContext&, const TensorView& x, int64_t group, float eps,
                          const TensorView& y) {
  ForEachGroup(x, y, group, [&](const float* xr, float* yr, int64_t, int64_t) {
    float s = 0.0f;
    for (int64_t j = 0; j < group; ++j) s += xr[j];
    for (int64_t j = 0; j < group; ++j) yr[j] = xr[j] / (s + eps);
  });
  return absl::OkStatus();
}

}  // namespace linfer::cpu
