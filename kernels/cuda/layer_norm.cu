// LayerNorm over groups of contiguous columns (kernels/norm.h), f32:
//   y = (x − mean) · rsqrt(var + eps) · w + b   (biased variance; w, b: [group] or [N] or none)
// Mapping: one warp per (row, group); lanes stride over the group's columns, two warp-shuffle
// reductions (mean, then the centred variance), then the same lanes write y (y may alias x).
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/ops.h"

namespace linfer::cuda {
namespace {

struct LayerNormArgs {
  Mat x, y;
  const float *w, *b;   // null when absent
  bool w_cols, b_cols;  // indexed by column (N values) instead of by position in the group
  int64_t rows, group, groups_per_row;
  float eps;
};

constexpr int kWarpsPerBlock = 8;

__global__ void LayerNormKernel(LayerNormArgs p) {
  PdlEnter();
  const int64_t item = blockIdx.x * int64_t{kWarpsPerBlock} + threadIdx.x / 32;
  if (item >= p.rows * p.groups_per_row) return;
  const int lane = threadIdx.x % 32;
  const int64_t r = item / p.groups_per_row, c0 = (item % p.groups_per_row) * p.group;
  const float* xr = &p.x(r, c0);
  float sum = 0.0f;
  for (int64_t j = lane; j < p.group; j += 32) sum += xr[j];
  const float mean = WarpSum(sum) / static_cast<float>(p.group);
  float var = 0.0f;
  for (int64_t j = lane; j < p.group; j += 32) var += (xr[j] - mean) * (xr[j] - mean);
  const float inv = rsqrtf(WarpSum(var) / static_cast<float>(p.group) + p.eps);
  float* yr = &p.y(r, c0);
  for (int64_t j = lane; j < p.group; j += 32) {
    const float w = p.w != nullptr ? p.w[p.w_cols ? c0 + j : j] : 1.0f;
    const float b = p.b != nullptr ? p.b[p.b_cols ? c0 + j : j] : 0.0f;
    yr[j] = (xr[j] - mean) * inv * w + b;
  }
}

}  // namespace

absl::Status LayerNorm(const ExecContext& ctx, const TensorView& x, const TensorView& w,
                       const TensorView& b, const NormParams& np, const TensorView& y) {
  LayerNormArgs p{};
  p.x = AsMat(x);
  p.y = AsMat(y);
  p.w = w.empty() ? nullptr : w.data<const float>();
  p.b = b.empty() ? nullptr : b.data<const float>();
  p.w_cols = !w.empty() && w.numel() != np.group;
  p.b_cols = !b.empty() && b.numel() != np.group;
  p.rows = x.dim(0);
  p.group = np.group;
  p.groups_per_row = x.dim(1) / np.group;
  p.eps = np.eps;
  const int64_t items = p.rows * p.groups_per_row;
  if (items == 0) return absl::OkStatus();
  LaunchKernel(LayerNormKernel, static_cast<unsigned>(CeilDiv(items, kWarpsPerBlock)),
               32 * kWarpsPerBlock, 0, Stream(ctx), p);
  return CheckLaunch("LayerNormKernel");
}

}  // namespace linfer::cuda
