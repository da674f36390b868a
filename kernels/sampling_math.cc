// The temperature draw's arithmetic (sampling_math.h). Compiled with -ffp-contract=off
// (kernels/CMakeLists.txt): no multiply-add is fused, so the CUDA twin's __fmul_rn / __fadd_rn
// sequence gives the same bits.
#include "kernels/sampling_math.h"

#include <algorithm>
#include <bit>
#include <cmath>

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

int64_t WeightSegment(int64_t vocab) {
  const int64_t chunks = (vocab + 255) / 256;
  return 256 * std::max<int64_t>(1, (chunks + 2047) / 2048);
}

double SegmentSum(const float* w, size_t n) {
  double lane[32] = {};
  size_t base = 0;
  for (; base + 32 <= n; base += 32) {
    for (int l = 0; l < 32; ++l) lane[l] += w[base + l];
  }
  for (size_t i = base; i < n; ++i) lane[i - base] += w[i];
  for (int o = 16; o > 0; o >>= 1) {
    double next[32];
    for (int l = 0; l < 32; ++l) next[l] = lane[l] + lane[l ^ o];
    std::copy(next, next + 32, lane);
  }
  return lane[0];
}

double SumWeights(const float* w, size_t n) {
  const size_t segment = static_cast<size_t>(WeightSegment(static_cast<int64_t>(n)));
  double total = 0.0;
  for (size_t i = 0; i < n; i += segment) total += SegmentSum(w + i, std::min(segment, n - i));
  return total;
}

int32_t DrawFromWeights(absl::Span<const float> w, double u, double* total) {
  const size_t n = w.size(), segment = static_cast<size_t>(WeightSegment(static_cast<int64_t>(n)));
  const double sum = SumWeights(w.data(), n), target = u * sum;
  if (total != nullptr) *total = sum;
  double acc = 0.0;
  size_t i = 0;
  for (; i < n; i += segment) {
    const double s = SegmentSum(w.data() + i, std::min(segment, n - i));
    if (target < acc + s) break;
    acc += s;
  }
  for (; i < n; ++i) {
    acc += w[i];
    if (target < acc) return static_cast<int32_t>(i);
  }
  size_t last = n - 1;  // target within rounding of the total: the last possible token
  while (last > 0 && !(w[last] > 0.0f)) --last;
  return static_cast<int32_t>(last);
}

float PenalizedLogit(float x, const LogitAdjustment& a) {
  if (a.has_bias) x = x + a.bias;
  if (a.in_context && a.repetition != 1.0f) x = x > 0.0f ? x / a.repetition : x * a.repetition;
  if (a.count > 0 && (a.frequency != 0.0f || a.presence != 0.0f)) {
    x = std::fma(-a.frequency, static_cast<float>(a.count), x);
    x = x - a.presence;
  }
  return x;
}

}  // namespace linfer
