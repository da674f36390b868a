// A model directory's generation_config.json (Hugging Face): the sampling defaults a request
// gets for the fields it leaves unset, as vLLM applies them (--generation-config auto), and the
// end-of-sequence ids.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"

namespace linfer {

struct GenerationDefaults {
  std::optional<float> temperature, top_p, min_p, repetition_penalty;
  std::optional<int32_t> top_k;
  std::optional<int32_t> max_new_tokens;
  std::vector<int32_t> eos_token_ids;  // may hold several (Qwen: <|im_end|>, <|endoftext|>)
};

// Reads DIR/generation_config.json; an absent file gives empty defaults. A malformed file or a
// field of the wrong type is an InvalidArgument naming the file and field.
absl::StatusOr<GenerationDefaults> LoadGenerationDefaults(const std::filesystem::path& dir);

}  // namespace linfer
