// DPFP and hedgehog feature maps (CPU).
#include "kernels/feature_map.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace linfer {

void DpfpFeatureMap(const float* x, int d, float* out) {
  const int n = 2 * d;
  std::vector<float> r(n);
  for (int i = 0; i < d; ++i) {
    r[i] = std::max(x[i], 0.0f);
    r[d + i] = -r[i];
  }
  for (int j = 1; j <= 4; ++j) {
    float* o = out + (j - 1) * n;
    for (int i = 0; i < n; ++i) o[i] = r[i] * r[((i - j) % n + n) % n];
  }
}

void HedgehogFeatureMap(const float* z, int d, float* out) {
  float mx = -INFINITY;
  for (int i = 0; i < d; ++i) mx = std::max(mx, std::abs(2.0f * z[i]));
  double sum = 0.0;
  for (int i = 0; i < d; ++i) {
    out[i] = std::exp(2.0f * z[i] - mx);
    out[d + i] = std::exp(-2.0f * z[i] - mx);
    sum += out[i] + out[d + i];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int i = 0; i < 2 * d; ++i) out[i] *= inv;
}

}  // namespace linfer
