// Feature maps (kernels/feature_map.h), x [rows, d] → y [rows, d·e]:
//   DPFP (e = 8): r = [relu(x), −relu(x)] (2d); y[(j−1)·2d + i] = r[i]·r[(i − j) mod 2d], j = 1..4
//   hedgehog (e = 2): y = softmax([2x, −2x]) over the 2d entries (max-shifted by max|2x|)
//   Taylor / quadratic: [1, x/d^¼]? ++ x_i²·c_diag ++ x_i x_j·c_off (i < j, row-major)
// Mapping: one warp per row; lanes stride over the output (DPFP), over d with a warp-shuffle
// max and sum (hedgehog), or over i writing row i's pairs (quadratic). Memory-bound.
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/ops.h"

namespace linfer::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;

struct MapArgs {
  Mat x, y;
  int64_t rows, d;
};

__global__ void DpfpKernel(MapArgs p) {
  PdlEnter();
  const int64_t r = blockIdx.x * int64_t{kWarpsPerBlock} + threadIdx.x / 32;
  if (r >= p.rows) return;
  const int lane = threadIdx.x % 32;
  const int64_t n = 2 * p.d;
  auto rv = [&](int64_t i) {  // r[i] of the doubled relu vector
    const float x = p.x(r, i < p.d ? i : i - p.d);
    const float v = x < 0.0f ? 0.0f : x;  // as the CPU twin's std::max(x, 0): NaN stays NaN
    return i < p.d ? v : -v;
  };
  for (int64_t o = lane; o < 4 * n; o += 32) {
    const int64_t j = o / n + 1, i = o % n;
    p.y(r, o) = rv(i) * rv(((i - j) % n + n) % n);
  }
}

__global__ void HedgehogKernel(MapArgs p) {
  PdlEnter();
  const int64_t r = blockIdx.x * int64_t{kWarpsPerBlock} + threadIdx.x / 32;
  if (r >= p.rows) return;
  const int lane = threadIdx.x % 32;
  float mx = -INFINITY;
  for (int64_t i = lane; i < p.d; i += 32) mx = fmaxf(mx, fabsf(2.0f * p.x(r, i)));
  mx = WarpMax(mx);
  float sum = 0.0f;
  for (int64_t i = lane; i < p.d; i += 32) {
    const float z = 2.0f * p.x(r, i);
    sum += expf(z - mx) + expf(-z - mx);
  }
  const float inv = 1.0f / WarpSum(sum);
  for (int64_t i = lane; i < p.d; i += 32) {
    const float z = 2.0f * p.x(r, i);
    p.y(r, i) = expf(z - mx) * inv;
    p.y(r, p.d + i) = expf(-z - mx) * inv;
  }
}

__global__ void QuadraticKernel(MapArgs p, bool taylor) {
  PdlEnter();
  const int64_t r = blockIdx.x * int64_t{kWarpsPerBlock} + threadIdx.x / 32;
  if (r >= p.rows) return;
  const int lane = threadIdx.x % 32;
  const int64_t d = p.d;
  const float sd = sqrtf(static_cast<float>(d));
  const float c_diag = taylor ? 1.0f / (sqrtf(2.0f) * sd) : 1.0f / sd;
  const float c_off = taylor ? 1.0f / sd : sqrtf(2.0f / static_cast<float>(d));
  const int64_t head = taylor ? 1 + d : 0, off0 = head + d;
  if (taylor && lane == 0) p.y(r, 0) = 1.0f;
  for (int64_t i = lane; i < d; i += 32) {
    const float xi = p.x(r, i);
    if (taylor) p.y(r, 1 + i) = xi * rsqrtf(sd);
    p.y(r, head + i) = xi * xi * c_diag;
    // Row i's pairs follow the i·(d−1) − i(i−1)/2 pairs of the rows before it.
    const int64_t base = off0 + i * (d - 1) - i * (i - 1) / 2;
    for (int64_t j = i + 1; j < d; ++j) p.y(r, base + j - i - 1) = xi * p.x(r, j) * c_off;
  }
}

}  // namespace

absl::Status FeatureMap(const ExecContext& ctx, FeatureMapKind kind, const TensorView& x,
                        const TensorView& y) {
  const MapArgs p{AsMat(x), AsMat(y), x.dim(0), x.dim(1)};
  if (p.rows == 0 || p.d == 0) return absl::OkStatus();
  const unsigned blocks = static_cast<unsigned>(CeilDiv(p.rows, kWarpsPerBlock));
  switch (kind) {
    case FeatureMapKind::kDpfp:
      LaunchKernel(DpfpKernel, blocks, 32 * kWarpsPerBlock, 0, Stream(ctx), p);
      return CheckLaunch("DpfpKernel");
    case FeatureMapKind::kHedgehog:
      LaunchKernel(HedgehogKernel, blocks, 32 * kWarpsPerBlock, 0, Stream(ctx), p);
      return CheckLaunch("HedgehogKernel");
    case FeatureMapKind::kTaylor:
    case FeatureMapKind::kQuadratic:
      LaunchKernel(QuadraticKernel, blocks, 32 * kWarpsPerBlock, 0, Stream(ctx), p,
                   kind == FeatureMapKind::kTaylor);
      return CheckLaunch("QuadraticKernel");
  }
  return absl::InvalidArgumentError("FeatureMap: unknown kind");
}

}  // namespace linfer::cuda
