// RMSNorm, gated RMSNorm and l2norm (CPU).
#include "kernels/norm.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/small_gemm.h"

namespace linfer {
namespace {

absl::Status CheckGroups(const TensorView& x, const TensorView& w, int64_t group,
                         const TensorView& y) {
  if (x.dtype() != DType::kF32 || y.dtype() != DType::kF32 || x.rank() != 2 ||
      x.shape() != y.shape()) {
    return absl::InvalidArgumentError(absl::StrCat("norm needs equal 2-D f32 x and y, got ",
                                                   x.DebugString(), " and ", y.DebugString()));
  }
  if (group <= 0 || x.dim(1) % group != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("norm group ", group, " does not divide ", x.DebugString()));
  }
  if (w.raw() != nullptr && (w.dtype() != DType::kF32 || w.numel() != group)) {
    return absl::InvalidArgumentError(
        absl::StrCat("norm weight must be f32 [", group, "], got ", w.DebugString()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RmsNorm(const TensorView& x, const TensorView& w, float eps, int64_t group,
                     const TensorView& y) {
  if (absl::Status s = CheckGroups(x, w, group, y); !s.ok()) return s;
  const int64_t groups = x.numel() / group;
  const float* xs = x.data<const float>();
  const float* ws = w.data<const float>();
  float* ys = y.data<float>();
  cpu::ParallelFor(groups, groups > 256, [&](int64_t r) {
    const float* xr = xs + r * group;
    float* yr = ys + r * group;
    const float inv = 1.0f / std::sqrt(cpu::Dot(xr, xr, group) / group + eps);
    for (int64_t j = 0; j < group; ++j) yr[j] = xr[j] * inv * (ws ? ws[j] : 1.0f);
  });
  return absl::OkStatus();
}

absl::Status GatedRmsNorm(const TensorView& x, const TensorView& gate, const TensorView& w,
                          float eps, int64_t group, Activation act, const TensorView& y) {
  if (absl::Status s = CheckGroups(x, w, group, y); !s.ok()) return s;
  if (gate.dtype() != DType::kF32 || gate.shape() != x.shape()) {
    return absl::InvalidArgumentError(
        absl::StrCat("gate ", gate.DebugString(), " does not match x ", x.DebugString()));
  }
  const int64_t groups = x.numel() / group;
  const float* xs = x.data<const float>();
  const float* gs = gate.data<const float>();
  const float* ws = w.data<const float>();
  float* ys = y.data<float>();
  cpu::ParallelFor(groups, groups > 256, [&](int64_t r) {
    const float* xr = xs + r * group;
    const float* gr = gs + r * group;
    float* yr = ys + r * group;
    const float inv = 1.0f / std::sqrt(cpu::Dot(xr, xr, group) / group + eps);
    for (int64_t j = 0; j < group; ++j) {
      yr[j] = xr[j] * inv * (ws ? ws[j] : 1.0f) * Activate(act, gr[j]);
    }
  });
  return absl::OkStatus();
}

void L2NormalizeRows(float* x, int64_t rows, int64_t stride, int64_t dim, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    float* xr = x + r * stride;
    const float inv = 1.0f / std::sqrt(cpu::Dot(xr, xr, dim) + eps);
    for (int64_t j = 0; j < dim; ++j) xr[j] *= inv;
  }
}

}  // namespace linfer
