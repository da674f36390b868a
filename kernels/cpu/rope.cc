// Rotary embedding (CPU); angles in double precision.
#include "kernels/rope.h"

#include <cmath>
#include <vector>

namespace linfer {

void ApplyRope(float* x, int64_t rows, int64_t row_stride, int heads, int head_dim,
               int64_t start_pos, double base) {
  const int half = head_dim / 2;
  std::vector<double> inv_freq(half);
  for (int i = 0; i < half; ++i) inv_freq[i] = std::pow(base, -2.0 * i / head_dim);
  std::vector<float> cs(half), sn(half);
  for (int64_t r = 0; r < rows; ++r) {
    const double pos = static_cast<double>(start_pos + r);
    for (int i = 0; i < half; ++i) {
      cs[i] = static_cast<float>(std::cos(pos * inv_freq[i]));
      sn[i] = static_cast<float>(std::sin(pos * inv_freq[i]));
    }
    for (int h = 0; h < heads; ++h) {
      float* v = x + r * row_stride + int64_t{h} * head_dim;
      for (int i = 0; i < half; ++i) {
        const float a = v[i], b = v[i + half];
        v[i] = a * cs[i] - b * sn[i];
        v[i + half] = b * cs[i] + a * sn[i];
      }
    }
  }
}

}  // namespace linfer
