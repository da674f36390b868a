// Rotary embedding in place (kernels/rope.h), GPT-NeoX "rotate halves" on the first R features:
//   θ_i = pos · base^(−2i/R);  x[i], x[i+R/2] ← x[i]cosθ_i − x[i+R/2]sinθ_i, x[i+R/2]cosθ_i +
//   x[i]sinθ_i
// with pos = segment position + row offset (from the device segment table). Angles in double, as
// the CPU twin computes them (positions up to 1e6 keep their phase).
// Mapping: blockIdx.y = segment, a 2-D block tile of (rows × rotary pairs); each thread computes
// one angle and rotates that pair in every head of its row. HeadNormRope (a per-head RMSNorm, then
// the same rotation, in one launch) below.
#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/ops.h"

namespace linfer::cuda {
namespace {

struct RopeArgs {
  Mat x;
  const int64_t* segs;
  int heads, head_dim, half;
  double log_base_over_r;  // log(base) · 2 / R
};

constexpr int kPairs = 32;  // threadIdx.x: rotary pairs
constexpr int kRows = 8;    // threadIdx.y: rows

__global__ void RopeKernel(RopeArgs p) {
  PdlEnter();
  const Row4 seg = LoadSegment(p.segs, blockIdx.y);
  for (int64_t t = blockIdx.x * int64_t{kRows} + threadIdx.y; t < seg.num_tokens;
       t += int64_t{gridDim.x} * kRows) {
    const double pos = static_cast<double>(seg.position + t);
    float* row = &p.x(seg.row_begin + t, 0);
    for (int i = threadIdx.x; i < p.half; i += kPairs) {
      double s, c;
      sincos(pos * exp(-p.log_base_over_r * i), &s, &c);
      const float cs = static_cast<float>(c), sn = static_cast<float>(s);
      for (int h = 0; h < p.heads; ++h) {
        float* v = row + int64_t{h} * p.head_dim;
        const float a = v[i], b = v[i + p.half];
        v[i] = a * cs - b * sn;
        v[i + p.half] = b * cs + a * sn;
      }
    }
  }
}

// HeadNormRope: one warp per (row, head) of segment blockIdx.y. The head's features are summed
// as NormKernel sums them (lane-strided, then a warp shuffle), normalised and weighted with its
// formula, and staged in the warp's row of shared memory, so that each lane then rotates whole
// pairs (i, i + R/2) with RopeKernel's angles and formula: the values of RmsNorm then Rope. A warp
// reads its head whole before it writes, so y may be x (in place).
struct HeadArgs {
  Mat x, y;
  const float* w;  // [head_dim] or null
  const int64_t* segs;
  int heads, head_dim, half;
  int64_t x_head_stride;
  float eps, shift;
  double log_base_over_r;
};

constexpr int kHeadWarps = 8;
constexpr int kStagedDim = kHeadNormRopeMaxDim + 1;

__global__ void __launch_bounds__(32 * kHeadWarps) HeadNormRopeKernel(HeadArgs p) {
  PdlEnter();
  __shared__ float staged[kHeadWarps][kStagedDim];
  const int lane = static_cast<int>(threadIdx.x & 31), warp = static_cast<int>(threadIdx.x >> 5);
  const Row4 seg = LoadSegment(p.segs, blockIdx.y);
  const int64_t unit = blockIdx.x * int64_t{kHeadWarps} + warp;  // (row of the segment, head)
  if (unit >= seg.num_tokens * p.heads) return;                  // warp-uniform
  const int64_t t = unit / p.heads, row = seg.row_begin + t;
  const int h = static_cast<int>(unit % p.heads);
  const float* src = &p.x(row, h * p.x_head_stride);
  float* s = staged[warp];
  float acc = 0.0f;
  for (int i = lane; i < p.head_dim; i += 32) {
    const float v = src[i];
    s[i] = v;
    acc += v * v;
  }
  acc = WarpSum(acc);
  const float inv = rsqrtf(acc / static_cast<float>(p.head_dim) + p.eps);
  for (int i = lane; i < p.head_dim; i += 32) {
    float v = s[i] * inv;
    if (p.w != nullptr) v *= p.w[i] + p.shift;
    s[i] = v;
  }
  __syncwarp();
  const double pos = static_cast<double>(seg.position + t);
  float* dst = &p.y(row, int64_t{h} * p.head_dim);
  for (int i = lane; i < p.half; i += 32) {
    double sn, cs;
    sincos(pos * exp(-p.log_base_over_r * i), &sn, &cs);
    const float c = static_cast<float>(cs), si = static_cast<float>(sn);
    const float a = s[i], b = s[i + p.half];
    dst[i] = a * c - b * si;
    dst[i + p.half] = b * c + a * si;
  }
  for (int i = 2 * p.half + lane; i < p.head_dim; i += 32) dst[i] = s[i];
}

}  // namespace

absl::Status Rope(const ExecContext& ctx, const TensorView& x, const Segments& segs,
                  const RopeParams& rp) {
  int64_t max_tokens = 0;
  for (const Segment& s : segs.host) max_tokens = std::max(max_tokens, s.num_tokens);
  if (max_tokens == 0) return absl::OkStatus();
  const RopeArgs p{AsMat(x),          segs.device.data<const int64_t>(),      rp.heads, rp.head_dim,
                   rp.rotary_dim / 2, std::log(rp.base) * 2.0 / rp.rotary_dim};
  const dim3 grid(GridFor(max_tokens, kRows, 65535), static_cast<unsigned>(segs.host.size()));
  LaunchKernel(RopeKernel, grid, dim3(kPairs, kRows), 0, Stream(ctx), p);
  return CheckLaunch("RopeKernel");
}

absl::Status HeadNormRope(const ExecContext& ctx, const TensorView& x, const TensorView& w,
                          const Segments& segs, const HeadNormRopeParams& hp, const TensorView& y) {
  const RopeParams& rp = hp.rope;
  if (rp.head_dim > kHeadNormRopeMaxDim) {
    return absl::UnimplementedError(absl::StrCat("HeadNormRope (CUDA): head_dim ", rp.head_dim,
                                                 " exceeds ", kHeadNormRopeMaxDim));
  }
  int64_t max_tokens = 0;
  for (const Segment& s : segs.host) max_tokens = std::max(max_tokens, s.num_tokens);
  if (max_tokens == 0) return absl::OkStatus();
  const HeadArgs p{AsMat(x),
                   AsMat(y),
                   w.empty() ? nullptr : w.data<const float>(),
                   segs.device.data<const int64_t>(),
                   rp.heads,
                   rp.head_dim,
                   rp.rotary_dim / 2,
                   hp.x_head_stride,
                   hp.norm.eps,
                   hp.norm.zero_centered ? 1.0f : 0.0f,
                   std::log(rp.base) * 2.0 / rp.rotary_dim};
  const int64_t blocks = CeilDiv(max_tokens * rp.heads, kHeadWarps);
  if (blocks > (int64_t{1} << 31) - 1 || segs.host.size() > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("HeadNormRope: ", segs.host.size(),
                                                   " segments of up to ", max_tokens,
                                                   " rows exceed a grid"));
  }
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(segs.host.size()));
  LaunchKernel(HeadNormRopeKernel, grid, 32 * kHeadWarps, 0, Stream(ctx), p);
  return CheckLaunch("HeadNormRopeKernel");
}

}  // namespace linfer::cuda
