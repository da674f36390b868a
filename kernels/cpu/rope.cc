// Rotary embedding (CPU); angles in double precision, per segment from its start position. And
// HeadNormRope as the two ops it stands for.
#include <algorithm>
#include <cmath>
#include <vector>

#include "common/status_macros.h"
#include "kernels/cpu/ops.h"

namespace linfer::cpu {

absl::Status Rope(const ExecContext&, const TensorView& x, const Segments& segs,
                  const RopeParams& p) {
  const int half = p.rotary_dim / 2;
  std::vector<double> inv_freq(half);
  for (int i = 0; i < half; ++i) inv_freq[i] = std::pow(p.base, -2.0 * i / p.rotary_dim);
  std::vector<float> cs(half), sn(half);
  for (const Segment& s : segs.host) {
    for (int64_t r = 0; r < s.num_tokens; ++r) {
      const double pos = static_cast<double>(s.position + r);
      for (int i = 0; i < half; ++i) {
        cs[i] = static_cast<float>(std::cos(pos * inv_freq[i]));
        sn[i] = static_cast<float>(std::sin(pos * inv_freq[i]));
      }
      float* row = x.data<float>() + (s.row_begin + r) * x.row_stride();
      for (int h = 0; h < p.heads; ++h) {
        float* v = row + int64_t{h} * p.head_dim;
        for (int i = 0; i < half; ++i) {
          const float a = v[i], b = v[i + half];
          v[i] = a * cs[i] - b * sn[i];
          v[i + half] = b * cs[i] + a * sn[i];
        }
      }
    }
  }
  return absl::OkStatus();
}

// The composition itself: the heads copied into y (unless in place), RmsNorm per head, Rope.
absl::Status HeadNormRope(const ExecContext& ctx, const TensorView& x, const TensorView& w,
                          const Segments& segs, const HeadNormRopeParams& p, const TensorView& y) {
  const int64_t d = p.rope.head_dim;
  if (x.raw() != y.raw()) {
    for (int64_t r = 0; r < x.dim(0); ++r) {
      const float* src = x.data<const float>() + r * x.row_stride();
      float* dst = y.data<float>() + r * y.row_stride();
      for (int h = 0; h < p.rope.heads; ++h) std::copy_n(src + h * p.x_head_stride, d, dst + h * d);
    }
  }
  RETURN_IF_ERROR(cpu::RmsNorm(ctx, y, w, p.norm, y));
  return cpu::Rope(ctx, y, segs, p.rope);
}

}  // namespace linfer::cpu
