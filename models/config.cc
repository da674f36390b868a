// Shared config.json parsing and validation.
#include "models/config.h"

#include <cmath>
#include <tuple>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/file_util.h"
#include "common/json_depth.h"
#include "common/status_macros.h"

namespace linfer {
namespace {

constexpr int64_t kMaxConfigBytes = 16 << 20;

// At most 64 bytes of `text` (cut on a character boundary) for an error message: a field may
// hold megabytes.
std::string Excerpt(absl::string_view text) {
  constexpr size_t kMax = 64;
  if (text.size() <= kMax) return std::string(text);
  size_t n = kMax;
  while (n > 0 && (static_cast<unsigned char>(text[n]) & 0xC0) == 0x80) --n;
  return absl::StrCat(text.substr(0, n), "... (", text.size(), " bytes)");
}

absl::Status TypeError(absl::string_view key, absl::string_view want, const nlohmann::json& v) {
  return absl::InvalidArgumentError(
      absl::StrCat("config.json: field '", key, "' must be ", want, ", got ", Excerpt(v.dump())));
}

// `value` of field `key` must lie in [1, max].
absl::Status CheckSize(absl::string_view key, int64_t value, int64_t max) {
  if (value < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: '", key, "' must be positive, got ", value));
  }
  if (value > max) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: '", key, "' must be at most ", max, ", got ", value));
  }
  return absl::OkStatus();
}

// An optional token id must index the vocabulary (the engine compares it with int32 tokens).
absl::Status CheckTokenId(absl::string_view key, const std::optional<int64_t>& id,
                          int64_t vocab_size) {
  if (!id || (*id >= 0 && *id < vocab_size)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "config.json: '", key, "' must be a token id in [0, ", vocab_size, "), got ", *id));
}

struct FamilyDefaults {
  Family family;
  int64_t layers;
  double hidden_ratio;
  double norm_eps = 1e-6;
  absl::string_view hidden_act = "swish";
};

absl::StatusOr<FamilyDefaults> DefaultsFor(absl::string_view model_type) {
  if (model_type == "gated_deltanet") return FamilyDefaults{Family::kGatedDeltaNet, 21, 4};
  if (model_type == "delta_net") return FamilyDefaults{Family::kDeltaNet, 24, 4};
  if (model_type == "gla") return FamilyDefaults{Family::kGla, 24, 4};
  if (model_type == "retnet") return FamilyDefaults{Family::kRetNet, 24, 2};
  if (model_type == "linear_attn") return FamilyDefaults{Family::kLinearAttn, 24, 4};
  if (model_type == "rwkv7") return FamilyDefaults{Family::kRwkv7, 24, 4, 1e-5, "sqrelu"};
  if (model_type == "mamba2") return FamilyDefaults{Family::kMamba2, 48, 0, 1e-5, "silu"};
  return absl::InvalidArgumentError(absl::StrCat(
      "config.json: unsupported model_type '", Excerpt(model_type),
      "' (supported: gated_deltanet, delta_net, gla, retnet, linear_attn, "
      "rwkv7, mamba2, qwen3_5_text, qwen3_5, qwen3_5_moe_text, qwen3_5_moe, qwen3_next)"));
}

// Python's json (and so transformers' save_pretrained) writes float('inf') as the bare token
// Infinity, which JSON lacks (Mamba2's time_step_limit [0.0, Infinity]): outside strings it
// becomes the largest double, which every limit compares as unbounded.
std::string ReplaceInfinity(absl::string_view text) {
  constexpr absl::string_view kInf = "Infinity";
  std::string out;
  out.reserve(text.size());
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      out.push_back(c);
      if (c == '\\' && i + 1 < text.size()) {
        out.push_back(text[++i]);
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
      out.push_back(c);
    } else if (text.substr(i, kInf.size()) == kInf) {
      out += "1.7976931348623157e308";
      i += kInf.size() - 1;
    } else {
      out.push_back(c);
    }
  }
  return out;
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
    case Family::kQwen3_5:
      return "qwen3_5";
    case Family::kRwkv7:
      return "rwkv7";
    case Family::kMamba2:
      return "mamba2";
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
  if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() <= uint64_t{INT64_MAX}) return static_cast<int64_t>(v.get<uint64_t>());
  } else if (v.is_number_integer()) {
    return v.get<int64_t>();
  } else if (v.is_number_float()) {
    // Only an integral value in [-2^63, 2^63) converts; anything else is undefined behaviour.
    const double d = v.get<double>();
    if (std::floor(d) == d && d >= -0x1p63 && d < 0x1p63) return static_cast<int64_t>(d);
  }
  return TypeError(key, "an integer in the 64-bit range", v);
}

absl::StatusOr<int64_t> ConfigFields::Int(absl::string_view key, int64_t def) const {
  ASSIGN_OR_RETURN(std::optional<int64_t> v, OptionalInt(key));
  return v.value_or(def);
}

absl::StatusOr<int64_t> ConfigFields::Size(absl::string_view key, int64_t def, int64_t max) const {
  ASSIGN_OR_RETURN(const int64_t v, Int(key, def));
  RETURN_IF_ERROR(CheckSize(key, v, max));
  return v;
}

absl::StatusOr<int64_t> ScaledSize(absl::string_view what, int64_t base, double ratio,
                                   int64_t max) {
  const double v = static_cast<double>(base) * ratio;
  if (!(v >= 1 && v < static_cast<double>(max) + 1)) {
    return absl::InvalidArgumentError(absl::StrCat("config.json: ", what, " (", base, " · ", ratio,
                                                   ") must be in [1, ", max, "]"));
  }
  return static_cast<int64_t>(v);
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

bool IsMoeLayer(const ModelConfig& config, int64_t layer) {
  const MoeConfig& m = config.moe;
  if (m.experts == 0 || (layer + 1) % m.sparse_step != 0) return false;
  for (int64_t l : m.dense_layers) {
    if (l == layer) return false;
  }
  return true;
}

int64_t DefaultIntermediateSize(int64_t hidden_size, double hidden_ratio) {
  const int64_t raw = static_cast<int64_t>(hidden_size * hidden_ratio * 2.0 / 3.0);
  return (raw + 255) / 256 * 256;
}

namespace {

// compressed-tensors' older spelling of a block_structure, "ROWSxCOLUMNS", as [ROWS, COLUMNS]
// (a part that is not a number stays a string, for ParseBlock to refuse); anything else as given.
nlohmann::json BlockStructure(const nlohmann::json& given) {
  if (!given.is_string()) return given;
  nlohmann::json block = nlohmann::json::array();
  for (absl::string_view part : absl::StrSplit(given.get<std::string>(), 'x')) {
    uint64_t v = 0;
    const bool digits =
        !part.empty() && part.find_first_not_of("0123456789") == absl::string_view::npos;
    block.push_back(digits && absl::SimpleAtoi(part, &v) ? nlohmann::json(v)
                                                         : nlohmann::json(std::string(part)));
  }
  return block;
}

// [rows, columns] of positive integers up to kMaxModelDim, or an error naming `field`.
absl::StatusOr<std::pair<int64_t, int64_t>> ParseBlock(const nlohmann::json& block,
                                                       absl::string_view field) {
  if (!block.is_array() || block.size() != 2 || !block[0].is_number_unsigned() ||
      !block[1].is_number_unsigned() || block[0].get<uint64_t>() < 1 ||
      block[1].get<uint64_t>() < 1 || block[0].get<uint64_t>() > uint64_t{kMaxModelDim} ||
      block[1].get<uint64_t>() > uint64_t{kMaxModelDim}) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: ", field, " must be [rows, columns] of positive integers up to ",
                     kMaxModelDim, ", got ", Excerpt(block.dump())));
  }
  return std::pair<int64_t, int64_t>(block[0].get<int64_t>(), block[1].get<int64_t>());
}

// transformers' FineGrainedFP8Config as checkpoints carry it: {"quant_method": "fp8", "fmt":
// "e4m3", "weight_block_size": [128, 128], "activation_scheme": "dynamic",
// "modules_to_not_convert": [...]}; without weight_block_size, one scale a tensor (vLLM's Fp8Config
// for such checkpoints: `weight_scale`).
absl::Status ParseFp8Method(const nlohmann::json& q, QuantizationConfig* out) {
  ConfigFields f(q);
  ASSIGN_OR_RETURN(std::string fmt, f.String("fmt", "e4m3"));
  if (fmt != "e4m3") {
    return absl::UnimplementedError(absl::StrCat("config.json: quantization_config.fmt '",
                                                 Excerpt(fmt),
                                                 "' is not supported (fp8 weights must be e4m3)"));
  }
  ASSIGN_OR_RETURN(out->activation_scheme, f.String("activation_scheme", "dynamic"));
  if (out->activation_scheme != "dynamic" && out->activation_scheme != "static") {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: quantization_config.activation_scheme '",
                     Excerpt(out->activation_scheme), "' must be dynamic or static"));
  }
  if (!f.Has("weight_block_size")) {
    out->fp8.strategy = Fp8Scheme::Strategy::kTensor;
    out->fp8.scale_suffix = "_scale";
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(auto block,
                   ParseBlock(q["weight_block_size"], "quantization_config.weight_block_size"));
  out->fp8.strategy = Fp8Scheme::Strategy::kBlock;
  std::tie(out->fp8.block_rows, out->fp8.block_cols) = block;
  out->fp8.scale_suffix = "_scale_inv";
  return absl::OkStatus();
}

// compressed-tensors (llm-compressor's checkpoints): {"quant_method": "compressed-tensors",
// "format": "float-quantized", "config_groups": {"group_0": {"targets": ["Linear"], "weights":
// {"type": "float", "num_bits": 8, "symmetric": true, "strategy": "tensor" | "channel" | "block",
// "block_structure": [128, 128], ...}, "input_activations": {...}}}, "ignore": [...],
// "sparsity_config": {}, "transform_config": {}}. Symmetric fp8 weights only (an asymmetric one
// has a zero point), one scheme for every group, no sparsity and no transforms (rotations applied
// at inference); the scales are `weight_scale`.
absl::Status ParseCompressedTensors(const nlohmann::json& q, QuantizationConfig* out) {
  ConfigFields f(q);
  ASSIGN_OR_RETURN(std::optional<std::string> format, f.OptionalString("format"));
  for (const char* key : {"sparsity_config", "transform_config"}) {
    if (f.Has(key) && !q[key].is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat("config.json: quantization_config.", key, " must be an object"));
    }
  }
  if (f.Has("transform_config") && !q["transform_config"].empty()) {
    return absl::UnimplementedError(
        "config.json: compressed-tensors transform_config (rotations such as QuIP or SpinQuant, "
        "applied at inference) is not supported");
  }
  if (f.Has("sparsity_config")) {
    ASSIGN_OR_RETURN(std::string sparsity,
                     ConfigFields(q["sparsity_config"]).String("format", "dense"));
    if (sparsity != "dense") {
      return absl::UnimplementedError(
          absl::StrCat("config.json: compressed-tensors sparsity format '", Excerpt(sparsity),
                       "' is not supported (sparse weights)"));
    }
  }
  if (!f.Has("config_groups") || !q["config_groups"].is_object() || q["config_groups"].empty()) {
    return absl::InvalidArgumentError(
        "config.json: compressed-tensors quantization_config has no 'config_groups'");
  }
  std::optional<Fp8Scheme> scheme;
  out->activation_scheme = "dynamic";
  for (const auto& [group_name, group] : q["config_groups"].items()) {
    const std::string where =
        absl::StrCat("quantization_config.config_groups.", Excerpt(group_name));
    if (!group.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat("config.json: ", where, " is not an object"));
    }
    ConfigFields g(group);
    ASSIGN_OR_RETURN(std::optional<std::string> gformat, g.OptionalString("format"));
    const std::string fmt = gformat ? *gformat : format ? *format : "";
    if (fmt != "float-quantized") {
      return absl::UnimplementedError(
          absl::StrCat("config.json: compressed-tensors format '", Excerpt(fmt),
                       "' is not supported: linfer loads float-quantized (fp8) checkpoints"));
    }
    if (!g.Has("weights") || !group["weights"].is_object()) {
      return absl::InvalidArgumentError(absl::StrCat("config.json: ", where, " has no 'weights'"));
    }
    const nlohmann::json& w = group["weights"];
    ConfigFields wf(w);
    ASSIGN_OR_RETURN(std::string type, wf.String("type", "int"));
    ASSIGN_OR_RETURN(int64_t bits, wf.Int("num_bits", 8));
    if (type != "float" || bits != 8) {
      return absl::UnimplementedError(
          absl::StrCat("config.json: ", where, ".weights: ", bits, "-bit ", Excerpt(type),
                       " weights are not supported (fp8: 8-bit float)"));
    }
    ASSIGN_OR_RETURN(bool symmetric, wf.Bool("symmetric", true));
    if (!symmetric) {
      return absl::UnimplementedError(
          absl::StrCat("config.json: ", where,
                       ".weights: asymmetric fp8 weights (with zero points) are not supported"));
    }
    // No strategy: compressed-tensors infers it from group_size (-1: per channel, > 0: groups).
    ASSIGN_OR_RETURN(std::optional<std::string> named, wf.OptionalString("strategy"));
    ASSIGN_OR_RETURN(std::optional<int64_t> group_size, wf.OptionalInt("group_size"));
    const std::string strategy = named                             ? *named
                                 : group_size && *group_size == -1 ? "channel"
                                 : group_size && *group_size > 0   ? "group"
                                                                   : "tensor";
    Fp8Scheme s;
    s.scale_suffix = "_scale";
    if (strategy == "tensor") {
      s.strategy = Fp8Scheme::Strategy::kTensor;
    } else if (strategy == "channel") {
      s.strategy = Fp8Scheme::Strategy::kChannel;
    } else if (strategy == "block") {
      s.strategy = Fp8Scheme::Strategy::kBlock;
      ASSIGN_OR_RETURN(auto rc,
                       ParseBlock(BlockStructure(wf.Has("block_structure") ? w["block_structure"]
                                                                           : nlohmann::json()),
                                  where + ".weights.block_structure"));
      std::tie(s.block_rows, s.block_cols) = rc;
    } else {
      return absl::UnimplementedError(
          absl::StrCat("config.json: ", where, ".weights.strategy '", Excerpt(strategy),
                       "' is not supported (tensor, channel or block)"));
    }
    if (scheme && (scheme->strategy != s.strategy || scheme->block_rows != s.block_rows ||
                   scheme->block_cols != s.block_cols)) {
      return absl::UnimplementedError(
          "config.json: compressed-tensors config_groups with different weight schemes are not "
          "supported");
    }
    scheme = s;
    if (g.Has("input_activations") && group["input_activations"].is_object()) {
      ASSIGN_OR_RETURN(bool dynamic,
                       ConfigFields(group["input_activations"]).Bool("dynamic", true));
      if (!dynamic) out->activation_scheme = "static";
    }
  }
  out->fp8 = *scheme;
  return absl::OkStatus();
}

// quantization_config at the top level, or in a multimodal config's text_config. The modules a
// checkpoint leaves unquantized (`modules_to_not_convert`, `ignore`) need no list: their tensors
// are stored in another dtype.
absl::Status ParseQuantization(const nlohmann::json& j, ModelConfig* c) {
  const nlohmann::json* q = nullptr;
  const nlohmann::json* levels[] = {&j, &c->text};
  for (const nlohmann::json* level : levels) {
    if (q == nullptr && level->is_object() && level->contains("quantization_config") &&
        !(*level)["quantization_config"].is_null()) {
      q = &(*level)["quantization_config"];
    }
  }
  if (q == nullptr) return absl::OkStatus();
  if (!q->is_object()) {
    return absl::InvalidArgumentError("config.json: 'quantization_config' must be an object");
  }
  ASSIGN_OR_RETURN(std::optional<std::string> method,
                   ConfigFields(*q).OptionalString("quant_method"));
  if (!method) {
    return absl::InvalidArgumentError("config.json: 'quantization_config' has no 'quant_method'");
  }
  QuantizationConfig out;
  if (*method == "fp8") {
    RETURN_IF_ERROR(ParseFp8Method(*q, &out));
  } else if (*method == "compressed-tensors") {
    RETURN_IF_ERROR(ParseCompressedTensors(*q, &out));
  } else {
    return absl::UnimplementedError(
        absl::StrCat("config.json: quantization_config.quant_method '", Excerpt(*method),
                     "' is not supported: linfer loads fp8 checkpoints (quant_method \"fp8\", or "
                     "\"compressed-tensors\" with float-quantized weights) and unquantized ones"));
  }
  out.method = *method;
  c->quantization = std::move(out);
  return absl::OkStatus();
}

absl::StatusOr<ModelConfig> ParseModelFields(const nlohmann::json& j) {
  ConfigFields f(j);
  ModelConfig c;
  ASSIGN_OR_RETURN(std::optional<std::string> model_type, f.OptionalString("model_type"));
  if (!model_type) return absl::InvalidArgumentError("config.json: missing 'model_type'");
  c.model_type = *model_type;
  if (c.model_type == "qwen3_5" || c.model_type == "qwen3_5_text" ||
      c.model_type == "qwen3_5_moe" || c.model_type == "qwen3_5_moe_text" ||
      c.model_type == "qwen3_next") {
    RETURN_IF_ERROR(ParseQwen3_5Config(j, &c));
    c.raw = j;
    return c;
  }
  ASSIGN_OR_RETURN(FamilyDefaults d, DefaultsFor(c.model_type));
  c.family = d.family;
  ASSIGN_OR_RETURN(c.hidden_size, f.Int("hidden_size", 2048));
  ASSIGN_OR_RETURN(c.num_hidden_layers, f.Int("num_hidden_layers", d.layers));
  ASSIGN_OR_RETURN(c.vocab_size, f.Int("vocab_size", 32000));
  // transformers' Mamba2Config names the norm epsilon layer_norm_epsilon (fla: norm_eps).
  ASSIGN_OR_RETURN(
      c.norm_eps,
      f.Float(f.Has("layer_norm_epsilon") ? "layer_norm_epsilon" : "norm_eps", d.norm_eps));
  ASSIGN_OR_RETURN(c.tie_word_embeddings, f.Bool("tie_word_embeddings", false));
  ASSIGN_OR_RETURN(c.hidden_act, f.String("hidden_act", d.hidden_act));
  ASSIGN_OR_RETURN(double hidden_ratio, f.Float("hidden_ratio", d.hidden_ratio));
  ASSIGN_OR_RETURN(std::optional<int64_t> inter, f.OptionalInt("intermediate_size"));
  ASSIGN_OR_RETURN(c.bos_token_id, f.OptionalInt("bos_token_id"));
  ASSIGN_OR_RETURN(c.eos_token_id, f.OptionalInt("eos_token_id"));
  ASSIGN_OR_RETURN(c.pad_token_id, f.OptionalInt("pad_token_id"));
  ASSIGN_OR_RETURN(c.max_position_embeddings, f.Int("max_position_embeddings", 0));
  if (c.max_position_embeddings < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: 'max_position_embeddings' must not be negative, got ",
                     c.max_position_embeddings));
  }
  RETURN_IF_ERROR(CheckSize("hidden_size", c.hidden_size, kMaxModelDim));
  RETURN_IF_ERROR(CheckSize("num_hidden_layers", c.num_hidden_layers, kMaxModelLayers));
  RETURN_IF_ERROR(CheckSize("vocab_size", c.vocab_size, kMaxVocabSize));
  RETURN_IF_ERROR(CheckTokenId("bos_token_id", c.bos_token_id, c.vocab_size));
  RETURN_IF_ERROR(CheckTokenId("eos_token_id", c.eos_token_id, c.vocab_size));
  if (!(c.norm_eps >= 0 && c.norm_eps <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: 'norm_eps' must be in [0, 1], got ", c.norm_eps));
  }
  if (c.family == Family::kMamba2) {  // no MLP: the blocks are norm + mixer only
    if (c.hidden_act != "silu" && c.hidden_act != "swish") {
      return absl::UnimplementedError(absl::StrCat(
          "config.json: mamba2 hidden_act '", Excerpt(c.hidden_act), "' is not supported (silu)"));
    }
    c.weight_prefix = "backbone.";
    c.raw = j;
    c.text = j;
    return c;
  }
  if (!(hidden_ratio > 0)) {
    return absl::InvalidArgumentError("config.json: 'hidden_ratio' must be positive");
  }
  // The default MLP width converts hidden_size * hidden_ratio to an integer: bound it first.
  if (!inter && !(c.hidden_size * hidden_ratio * 2.0 / 3.0 <= kMaxModelDim)) {
    return absl::InvalidArgumentError(absl::StrCat("config.json: 'hidden_ratio' ", hidden_ratio,
                                                   " is too large: the MLP would be wider than ",
                                                   kMaxModelDim));
  }
  c.intermediate_size = inter ? *inter : DefaultIntermediateSize(c.hidden_size, hidden_ratio);
  if (c.family == Family::kRwkv7 && !inter) {  // fla RWKV7FeedForward: 32·ceil(D·ratio/32)
    c.intermediate_size = (static_cast<int64_t>(c.hidden_size * hidden_ratio) + 31) / 32 * 32;
  }
  RETURN_IF_ERROR(CheckSize("intermediate_size", c.intermediate_size, kMaxModelDim));
  if (c.family == Family::kRwkv7) {
    if (c.hidden_act != "sqrelu") {
      return absl::UnimplementedError(absl::StrCat("config.json: rwkv7 hidden_act '",
                                                   Excerpt(c.hidden_act),
                                                   "' is not supported (the channel mix needs "
                                                   "sqrelu)"));
    }
  } else if (c.hidden_act != "swish" && c.hidden_act != "silu") {
    return absl::UnimplementedError(absl::StrCat("config.json: hidden_act '", Excerpt(c.hidden_act),
                                                 "' is not supported (the MLP needs swish)"));
  }
  if (f.Has("attn")) RETURN_IF_ERROR(ParseFlaHybridAttention(j["attn"], &c));
  if (f.Has("attnres_block_size")) {
    return absl::UnimplementedError(
        "config.json: 'attnres_block_size' (attention residuals) is not supported");
  }
  c.raw = j;
  c.text = j;
  return c;
}

}  // namespace

absl::StatusOr<ModelConfig> ParseModelConfig(const nlohmann::json& j) {
  if (!j.is_object()) return absl::InvalidArgumentError("config.json is not a JSON object");
  ASSIGN_OR_RETURN(ModelConfig c, ParseModelFields(j));
  RETURN_IF_ERROR(ParseQuantization(j, &c));
  return c;
}

absl::StatusOr<ModelConfig> ParseModelConfigText(absl::string_view text, absl::string_view source) {
  // The parser keeps its own stack, but copying (ModelConfig::raw) and printing a value recurse
  // once per level: refuse deep documents first (serde_json's limit, 128, is far more than
  // any config needs).
  constexpr int kMaxDepth = 128;
  const std::string cleaned =
      text.find("Infinity") == absl::string_view::npos ? std::string() : ReplaceInfinity(text);
  const absl::string_view json = cleaned.empty() ? text : absl::string_view(cleaned);
  if (JsonDeeperThan(json, kMaxDepth)) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": JSON nested deeper than ", kMaxDepth, " levels"));
  }
  nlohmann::json j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return absl::InvalidArgumentError(absl::StrCat(source, " is not valid JSON"));
  }
  absl::StatusOr<ModelConfig> c = ParseModelConfig(j);
  if (!c.ok()) {
    return absl::Status(c.status().code(), absl::StrCat(source, ": ", c.status().message()));
  }
  return c;
}

absl::StatusOr<ModelConfig> LoadModelConfig(const std::filesystem::path& dir) {
  const std::string path = (dir / "config.json").string();
  ASSIGN_OR_RETURN(const std::string text, ReadFile(path, kMaxConfigBytes));
  return ParseModelConfigText(text, path);
}

}  // namespace linfer
