// Turning a row of logits into a token. (The full sampler — top-k/p, min-p, penalties — comes
// with the engine; this is the part the CLI needs now.)
#pragma once

#include <cstdint>
#include <random>

#include "absl/types/span.h"

namespace linfer {

struct SamplingParams {
  float temperature = 0.0f;  // 0: greedy (argmax, lowest id on ties)
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {}
  // logits: [vocab] f32. Returns a token id in [0, vocab).
  int32_t Sample(absl::Span<const float> logits);

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
};

}  // namespace linfer
