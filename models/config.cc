// Shared config.json parsing and validation.
#include "models/config.h"

#include <cmath>
#include <fstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "kernels/status_macros.h"

namespace linfer {
namespace {

absl::Status TypeError(absl::string_view key, absl::string_view want, const nlohmann::json& v) {
  return absl::InvalidArgumentError(
      absl::StrCat("config.json: field '", key, "' must be ", want, ", got ", v.dump()));
}

struct FamilyDefaults {
  Family family;
  int64_t layers;
  double hidden_ratio;
};

absl::StatusOr<FamilyDefaults> DefaultsFor(absl::string_view model_type) {
  if (model_type == "gated_deltanet") return FamilyDefaults{Family::kGatedDeltaNet, 21, 4};
  if (model_type == "delta_net") return FamilyDefaults{Family::kDeltaNet, 24, 4};
  if (model_type == "gla") return FamilyDefaults{Family::kGla, 24, 4};
  if (model_type == "retnet") return FamilyDefaults{Family::kRetNet, 24, 2};
  if (model_type == "linear_attn") return FamilyDefaults{Family::kLinearAttn, 24, 4};
  return absl::InvalidArgumentError(
      absl::StrCat("config.json: unsupported model_type '", model_type,
                   "' (supported: gated_deltanet, delta_net, gla, retnet, linear_attn)"));
}

}  // namespace

absl::string_view FamilyName(Family family) {
  switch (family) {
    case Family::kGatedDeltaNet:
      return "gated_deltanet";
    case Family::kDeltaNet:
      return "delta_net";
    case Family::kGla:
      return "gla";
    case Family::kRetNet:
      return "retnet";
    case Family::kLinearAttn:
      return "linear_attn";
  }
  return "?";
}

bool ConfigFields::Has(absl::string_view key) const {
  auto it = j_.find(std::string(key));
  return it != j_.end() && !it->is_null();
}

absl::StatusOr<std::optional<int64_t>> ConfigFields::OptionalInt(absl::string_view key) const {
  if (!Has(key)) return std::nullopt;
  const auto& v = *j_.find(std::string(key));
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>()) {
    return static_cast<int64_t>(v.get<double>());
  }
  return TypeError(key, "an integer", v);
}

absl::StatusOr<int64_t> ConfigFields::Int(absl::string_view key, int64_t def) const {
  ASSIGN_OR_RETURN(std::optional<int64_t> v, OptionalInt(key));
  return v.value_or(def);
}

absl::StatusOr<std::optional<double>> ConfigFields::OptionalFloat(absl::string_view key) const {
  if (!Has(key)) return std::nullopt;
  const auto& v = *j_.find(std::string(key));
  if (!v.is_number()) return TypeError(key, "a number", v);
  return v.get<double>();
}

absl::StatusOr<double> ConfigFields::Float(absl::string_view key, double def) const {
  ASSIGN_OR_RETURN(std::optional<double> v, OptionalFloat(key));
  return v.value_or(def);
}

absl::StatusOr<bool> ConfigFields::Bool(absl::string_view key, bool def) const {
  if (!Has(key)) return def;
  const auto& v = *j_.find(std::string(key));
  if (!v.is_boolean()) return TypeError(key, "true or false", v);
  return v.get<bool>();
}

absl::StatusOr<std::optional<std::string>> ConfigFields::OptionalString(
    absl::string_view key) const {
  if (!Has(key)) return std::nullopt;
  const auto& v = *j_.find(std::string(key));
  if (!v.is_string()) return TypeError(key, "a string", v);
  return v.get<std::string>();
}

absl::StatusOr<std::string> ConfigFields::String(absl::string_view key,
                                                 absl::string_view def) const {
  ASSIGN_OR_RETURN(std::optional<std::string> v, OptionalString(key));
  return v.value_or(std::string(def));
}

int64_t DefaultIntermediateSize(int64_t hidden_size, double hidden_ratio) {
  const int64_t raw = static_cast<int64_t>(hidden_size * hidden_ratio * 2.0 / 3.0);
  return (raw + 255) / 256 * 256;
}

absl::StatusOr<ModelConfig> ParseModelConfig(const nlohmann::json& j) {
  if (!j.is_object()) return absl::InvalidArgumentError("config.json is not a JSON object");
  ConfigFields f(j);
  ModelConfig c;
  ASSIGN_OR_RETURN(std::optional<std::string> model_type, f.OptionalString("model_type"));
  if (!model_type) return absl::InvalidArgumentError("config.json: missing 'model_type'");
  c.model_type = *model_type;
  ASSIGN_OR_RETURN(FamilyDefaults d, DefaultsFor(c.model_type));
  c.family = d.family;
  ASSIGN_OR_RETURN(c.hidden_size, f.Int("hidden_size", 2048));
  ASSIGN_OR_RETURN(c.num_hidden_layers, f.Int("num_hidden_layers", d.layers));
  ASSIGN_OR_RETURN(c.vocab_size, f.Int("vocab_size", 32000));
  ASSIGN_OR_RETURN(c.norm_eps, f.Float("norm_eps", 1e-6));
  ASSIGN_OR_RETURN(c.tie_word_embeddings, f.Bool("tie_word_embeddings", false));
  ASSIGN_OR_RETURN(c.hidden_act, f.String("hidden_act", "swish"));
  ASSIGN_OR_RETURN(double hidden_ratio, f.Float("hidden_ratio", d.hidden_ratio));
  ASSIGN_OR_RETURN(std::optional<int64_t> inter, f.OptionalInt("intermediate_size"));
  ASSIGN_OR_RETURN(c.bos_token_id, f.OptionalInt("bos_token_id"));
  ASSIGN_OR_RETURN(c.eos_token_id, f.OptionalInt("eos_token_id"));
  ASSIGN_OR_RETURN(c.pad_token_id, f.OptionalInt("pad_token_id"));
  for (const auto& [key, value] : {std::pair{"hidden_size", c.hidden_size},
                                   {"num_hidden_layers", c.num_hidden_layers},
                                   {"vocab_size", c.vocab_size}}) {
    if (value <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("config.json: '", key, "' must be positive, got ", value));
    }
  }
  if (!(hidden_ratio > 0)) {
    return absl::InvalidArgumentError("config.json: 'hidden_ratio' must be positive");
  }
  if (!(c.norm_eps >= 0)) return absl::InvalidArgumentError("config.json: 'norm_eps' < 0");
  c.intermediate_size = inter ? *inter : DefaultIntermediateSize(c.hidden_size, hidden_ratio);
  if (c.intermediate_size <= 0) {
    return absl::InvalidArgumentError("config.json: 'intermediate_size' must be positive");
  }
  if (c.hidden_act != "swish" && c.hidden_act != "silu") {
    return absl::UnimplementedError(absl::StrCat("config.json: hidden_act '", c.hidden_act,
                                                 "' is not supported (the MLP needs swish)"));
  }
  if (f.Has("attn")) {
    return absl::UnimplementedError(
        "config.json: hybrid softmax-attention layers ('attn') are not supported yet");
  }
  if (f.Has("attnres_block_size")) {
    return absl::UnimplementedError(
        "config.json: 'attnres_block_size' (attention residuals) is not supported");
  }
  c.raw = j;
  return c;
}

absl::StatusOr<ModelConfig> LoadModelConfig(const std::filesystem::path& dir) {
  const auto path = dir / "config.json";
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path.string()));
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return absl::InvalidArgumentError(absl::StrCat(path.string(), " is not valid JSON"));
  }
  absl::StatusOr<ModelConfig> c = ParseModelConfig(j);
  if (!c.ok()) {
    return absl::Status(c.status().code(), absl::StrCat(path.string(), ": ", c.status().message()));
  }
  return c;
}

}  // namespace linfer
