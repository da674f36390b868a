// The temperature draw's arithmetic (sampling_math.h). Compiled with -ffp-contract=off
// (kernels/CMakeLists.txt): no multiply-add is fused, so the CUDA twin's __fmul_rn / __fadd_rn
// sequence gives the same bits.
#include "kernels/sampling_math.h"

#include <bit>

namespace linfer {
namespace {

// exp(c) for c in [kSampleExpMin, 0] (Cephes' expf), exactly 0 at kSampleExpMin. Branch-free to
// vectorise. kernels/cuda/presample.cu SampleWeight repeats it operation for operation.
inline float ExpClamped(float c) {
  const float n = (c * 1.44269504f + 12582912.0f) - 12582912.0f;  // round(c / ln 2)
  const float r = (c - n * 0.693359375f) + n * 2.12194440e-4f;    // c − n ln 2, in two steps
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const int32_t keep = -static_cast<int32_t>(c > kSampleExpMin);        // all ones, or 0
  const int32_t bits = ((static_cast<int32_t>(n) + 127) << 23) & keep;  // 2ⁿ or 0
  return (p * r * r + r + 1.0f) * std::bit_cast<float>(bits);
}

}  // namespace

double UniformFromBits(uint64_t bits) {
  return static_cast<double>(bits & ((uint64_t{1} << 53) - 1)) * 0x1.0p-53;
}

void SampleWeights(absl::Span<const float> x, float max, float inv_t, float* w) {
#pragma omp simd
  for (size_t i = 0; i < x.size(); ++i) {
    const float t = (x[i] - max) * inv_t;
    w[i] = t < kSampleExpMin ? kSampleExpMin : t;  // −inf: kSampleExpMin
  }
#pragma omp simd
  for (size_t i = 0; i < x.size(); ++i) w[i] = ExpClamped(w[i]);
}

double SumWeights(const float* w, size_t n) {
  double acc[8] = {};
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) acc[j] += w[i + j];
  }
  double tail = 0.0;
  for (; i < n; ++i) tail += w[i];
  return (((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]))) + tail;
}

int32_t DrawFromWeights(absl::Span<const float> w, double u) {
  constexpr size_t kBlock = 256;
  const double target = u * SumWeights(w.data(), w.size());
  double acc = 0.0;
  size_t i = 0;
  for (; i + kBlock <= w.size(); i += kBlock) {
    const double block = SumWeights(w.data() + i, kBlock);
    if (target < acc + block) break;
    acc += block;
  }
  for (; i < w.size(); ++i) {
    acc += w[i];
    if (target < acc) return static_cast<int32_t>(i);
  }
  size_t last = w.size() - 1;  // target within rounding of the total: the last possible token
  while (last > 0 && !(w[last] > 0.0f)) --last;
  return static_cast<int32_t>(last);
}

}  // namespace linfer
