// Writes fla-format gated_deltanet checkpoints with random weights (config.json +
// model.safetensors, f32), for benchmarks and tests that need a model of a given shape.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace linfer::testing_util {

struct GdnShape {
  int64_t hidden = 256, layers = 4, heads = 4, head_dim = 64, vocab = 4096;
  double expand_v = 2.0;
  int64_t intermediate = 0;  // 0: fla's rule from hidden_ratio 4
  uint64_t seed = 1;
};

// n token ids in [0, vocab) from a seeded generator (deterministic prompts).
std::vector<int32_t> RandomTokens(int n, int64_t vocab, uint32_t seed);

absl::Status WriteRandomGdnCheckpoint(const std::filesystem::path& dir, const GdnShape& shape);

// `dir` when it is not empty, else a default-shape random checkpoint written under the temp
// directory (the benchmarks' --model default).
absl::StatusOr<std::string> ModelDirOrRandom(const std::string& dir);

}  // namespace linfer::testing_util
