// Presample (CPU twin): a partial sort of the ids by (logit desc, id asc) and a double-precision
// log-sum-exp, row by row; the draws with the host sampler's own arithmetic (sampling_math.h).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/sampling_math.h"

namespace linfer::cpu {
namespace {

// Order-preserving key of a float (kernels/cuda/presample.cu uses the same): larger key = larger
// float; NaN is 0, below every number; −0 is +0.
uint32_t OrderKey(float x) {
  if (std::isnan(x)) return 0;
  if (x == 0.0f) x = 0.0f;
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  return (bits & 0x80000000u) ? ~bits : bits | 0x80000000u;
}

}  // namespace

absl::Status Presample(const ExecContext&, const TensorView& logits, const PresampleOutput& out,
                       const PresampleDraws* draws) {
  const int64_t vocab = logits.dim(1), k = out.top_ids.dim(1);
  std::vector<int32_t> ids(static_cast<size_t>(vocab));
  std::vector<float> w;
  for (int64_t r = 0; r < logits.dim(0); ++r) {
    const float* x = logits.data<const float>() + r * logits.row_stride();
    std::iota(ids.begin(), ids.end(), 0);
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [x](int32_t a, int32_t b) {
      const uint32_t ka = OrderKey(x[a]), kb = OrderKey(x[b]);
      return ka != kb ? ka > kb : a < b;
    });
    int32_t* top_ids = out.top_ids.data<int32_t>() + r * k;
    float* top_logits = out.top_logits.data<float>() + r * k;
    for (int64_t i = 0; i < k; ++i) {
      top_ids[i] = ids[i];
      top_logits[i] = x[ids[i]];
    }
    out.argmax.data<int32_t>()[r] = ids[0];
    float m = -INFINITY;
    for (int64_t v = 0; v < vocab; ++v) m = std::fmax(m, x[v]);  // fmax ignores NaN
    bool all_nan = true;
    for (int64_t v = 0; v < vocab && all_nan; ++v) all_nan = std::isnan(x[v]);
    float lse = all_nan ? NAN : m;
    if (!all_nan && std::isfinite(m)) {
      double s = 0;
      for (int64_t v = 0; v < vocab; ++v) {
        if (x[v] != -INFINITY) s += std::exp(double(x[v]) - m);  // NaN propagates
      }
      lse = static_cast<float>(m + std::log(s));
    }
    out.logsumexp.data<float>()[r] = lse;
    if (draws == nullptr) continue;
    const float inv_t = draws->inv_temperature.data<const float>()[r];
    double sum = 0.0;
    int32_t token = -1;
    if (inv_t > 0.0f && !std::isfinite(top_logits[0])) {
      token = ids[0];
    } else if (inv_t > 0.0f) {
      const absl::Span<const float> row(x, static_cast<size_t>(vocab));
      w.resize(row.size());
      SampleWeights(row, top_logits[0], inv_t, w.data());
      token = DrawFromWeights(
          w, UniformFromBits(static_cast<uint64_t>(draws->uniform_bits.data<const int64_t>()[r])),
          &sum);
      // No weight positive (1/temperature = ∞ makes the maximum's NaN and every other one 0):
      // the argmax, as the CUDA twin.
      if (!(w[static_cast<size_t>(token)] > 0.0f)) token = ids[0];
    }
    draws->weight_sum.data<double>()[r] = sum;
    draws->token.data<int32_t>()[r] = token;
    draws->logit.data<float>()[r] = token < 0 ? 0.0f : x[token];
  }
  return absl::OkStatus();
}

}  // namespace linfer::cpu
