// Rotary embedding in place (kernels/rope.h), GPT-NeoX "rotate halves" on the first R features:
//   θ_i = pos · base^(−2i/R);  x[i], x[i+R/2] ← x[i]cosθ_i − x[i+R/2]sinθ_i, x[i+R/2]cosθ_i +
//   x[i]sinθ_i
// with pos = segment position + row offset (from the device segment table). Angles in double, as
// the CPU twin computes them (positions up to 1e6 keep their phase).
// Mapping: blockIdx.y = segment, a 2-D block tile of (rows × rotary pairs); each thread computes
// one angle and rotates that pair in every head of its row.
#include <algorithm>
#include <cmath>

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

}  // namespace linfer::cuda
