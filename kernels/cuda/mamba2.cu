// Mamba2 pointwise ops (kernels/mamba2.h), f32:
//   Mamba2Gates  Δ = clamp(softplus(dt + dt_bias[h]), lo, hi), g = −exp(A_log[h])·Δ
//   ScaleGroups  y (+)= x · s[(t,) c / w]
//   BiasActivate y = act(x + b[c])
// Mapping: one thread per element over a grid-stride loop on the flattened [T, N] index (column
// fastest: coalesced reads for any row stride). Memory-bound.
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/ops.h"

namespace linfer::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void GatesKernel(Mat dt, const float* bias, const float* a_log, float lo, float hi,
                            Mat delta, Mat g, int64_t rows, int64_t heads) {
  PdlEnter();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < rows * heads;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = i / heads, h = i % heads;
    const float x = dt(t, h) + bias[h];
    // A clamp that keeps NaN, as the CPU twin's std::clamp (fminf/fmaxf would drop it).
    const float sp = x > 20.0f ? x : log1pf(expf(x));
    const float v = sp < lo ? lo : (hi < sp ? hi : sp);
    delta(t, h) = v;
    g(t, h) = -expf(a_log[h]) * v;
  }
}

__global__ void ScaleKernel(Mat x, Mat s, bool per_row, bool accumulate, Mat y, int64_t rows,
                            int64_t cols, int64_t w) {
  PdlEnter();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < rows * cols;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = i / cols, c = i % cols;
    const float v = x(t, c) * s(per_row ? t : 0, c / w);
    y(t, c) = accumulate ? y(t, c) + v : v;
  }
}

__global__ void BiasActKernel(Mat x, const float* b, int act, Mat y, int64_t rows, int64_t cols) {
  PdlEnter();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < rows * cols;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = i / cols, c = i % cols;
    y(t, c) = DeviceActivate(act, x(t, c) + b[c]);
  }
}

}  // namespace

absl::Status Mamba2Gates(const ExecContext& ctx, const TensorView& dt, const TensorView& dt_bias,
                         const TensorView& a_log, float lo, float hi, const TensorView& delta,
                         const TensorView& g) {
  const int64_t rows = dt.dim(0), heads = dt.dim(1);
  if (rows * heads == 0) return absl::OkStatus();
  LaunchKernel(GatesKernel, GridFor(rows * heads, kThreads), kThreads, 0, Stream(ctx), AsMat(dt),
               dt_bias.data<const float>(), a_log.data<const float>(), lo, hi, AsMat(delta),
               AsMat(g), rows, heads);
  return CheckLaunch("Mamba2GatesKernel");
}

absl::Status ScaleGroups(const ExecContext& ctx, const TensorView& x, const TensorView& s,
                         bool accumulate, const TensorView& y) {
  const int64_t rows = x.dim(0), cols = x.dim(1), groups = s.dim(-1);
  if (rows * cols == 0) return absl::OkStatus();
  const bool per_row = s.rank() == 2 && s.dim(0) == rows && rows != 1;
  const Mat sm{s.data<float>(), per_row ? s.row_stride() : 0};
  LaunchKernel(ScaleKernel, GridFor(rows * cols, kThreads), kThreads, 0, Stream(ctx), AsMat(x), sm,
               per_row, accumulate, AsMat(y), rows, cols, cols / groups);
  return CheckLaunch("ScaleGroupsKernel");
}

absl::Status BiasActivate(const ExecContext& ctx, const TensorView& x, const TensorView& b,
                          Activation act, const TensorView& y) {
  const int64_t rows = x.dim(0), cols = x.dim(1);
  if (rows * cols == 0) return absl::OkStatus();
  LaunchKernel(BiasActKernel, GridFor(rows * cols, kThreads), kThreads, 0, Stream(ctx), AsMat(x),
               b.data<const float>(), static_cast<int>(act), AsMat(y), rows, cols);
  return CheckLaunch("BiasActivateKernel");
}

}  // namespace linfer::cuda
