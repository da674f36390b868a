// config.json of an fla-format checkpoint: the fields every family shares, parsed with the
// family's defaults (MODELS.md §0), plus typed access to the family's own fields.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace linfer {

enum class Family { kGatedDeltaNet, kDeltaNet, kGla, kRetNet, kLinearAttn };

absl::string_view FamilyName(Family family);  // the model_type string

// Typed, defaulted reads of config.json fields. Errors name the field and the wrong type.
class ConfigFields {
 public:
  explicit ConfigFields(const nlohmann::json& j) : j_(j) {}
  bool Has(absl::string_view key) const;  // present and not null
  absl::StatusOr<int64_t> Int(absl::string_view key, int64_t def) const;
  absl::StatusOr<std::optional<int64_t>> OptionalInt(absl::string_view key) const;
  absl::StatusOr<double> Float(absl::string_view key, double def) const;
  absl::StatusOr<std::optional<double>> OptionalFloat(absl::string_view key) const;
  absl::StatusOr<bool> Bool(absl::string_view key, bool def) const;
  absl::StatusOr<std::string> String(absl::string_view key, absl::string_view def) const;
  absl::StatusOr<std::optional<std::string>> OptionalString(absl::string_view key) const;

 private:
  const nlohmann::json& j_;
};

struct ModelConfig {
  Family family = Family::kGatedDeltaNet;
  std::string model_type;
  int64_t hidden_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t vocab_size = 0;
  int64_t intermediate_size = 0;  // resolved with the hidden_ratio rule when null
  double norm_eps = 1e-6;
  bool tie_word_embeddings = false;
  std::string hidden_act;
  std::optional<int64_t> bos_token_id, eos_token_id, pad_token_id;
  nlohmann::json raw;  // the whole config.json, for the family's own fields
};

// MLP width rule (MODELS.md §0.4): int(D · ratio · 2/3) rounded up to a multiple of 256.
int64_t DefaultIntermediateSize(int64_t hidden_size, double hidden_ratio);

// Parses the shared fields and refuses what linfer does not run (unknown model_type, hybrid
// `attn` layers, attnres_block_size, non-swish MLPs, non-positive dims).
absl::StatusOr<ModelConfig> ParseModelConfig(const nlohmann::json& j);
absl::StatusOr<ModelConfig> LoadModelConfig(const std::filesystem::path& dir);

}  // namespace linfer
