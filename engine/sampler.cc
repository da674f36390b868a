// Greedy and temperature sampling.
#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace linfer {

int32_t Sampler::Sample(absl::Span<const float> logits) {
  const auto argmax = std::max_element(logits.begin(), logits.end());
  if (params_.temperature <= 0.0f) return static_cast<int32_t>(argmax - logits.begin());
  // Softmax of logits / T in double, then inverse-CDF with one uniform draw.
  std::vector<double> p(logits.size());
  double sum = 0.0;
  for (size_t i = 0; i < logits.size(); ++i) {
    p[i] = std::exp((static_cast<double>(logits[i]) - *argmax) / params_.temperature);
    sum += p[i];
  }
  const double u = std::uniform_real_distribution<double>(0.0, sum)(rng_);
  double acc = 0.0;
  for (size_t i = 0; i < p.size(); ++i) {
    acc += p[i];
    if (u < acc) return static_cast<int32_t>(i);
  }
  return static_cast<int32_t>(argmax - logits.begin());
}

}  // namespace linfer
