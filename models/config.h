// config.json of an fla-format checkpoint: the fields every family shares, parsed with the
// family's defaults (MODELS.md §0), plus typed access to the family's own fields.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "models/fp8.h"
#include "nlohmann/json.hpp"

namespace linfer {

enum class Family {
  kGatedDeltaNet,
  kDeltaNet,
  kGla,
  kRetNet,
  kLinearAttn,
  kQwen3_5,
  kRwkv7,
  kMamba2
};

absl::string_view FamilyName(Family family);  // the model_type string

// Bounds on the shared sizes, so that products of two of them fit in int64 with room to spare.
inline constexpr int64_t kMaxModelDim = int64_t{1} << 24;  // hidden_size, intermediate_size
inline constexpr int64_t kMaxModelLayers = int64_t{1} << 16;
// A mixer's head counts, head sizes and convolution widths.
inline constexpr int64_t kMaxHeadSize = int64_t{1} << 16;
inline constexpr int64_t kMaxVocabSize = INT32_MAX;  // token ids are int32

// Typed, defaulted reads of config.json fields. Errors name the field and the wrong type.
// base · ratio (hidden_size · expand_k, head_dim · expand_v, ...) as a size in [1, max], checked
// before the conversion: a ratio of 1e300, or NaN, is an error naming `what`, never undefined
// behaviour.
absl::StatusOr<int64_t> ScaledSize(absl::string_view what, int64_t base, double ratio,
                                   int64_t max = kMaxModelDim);

class ConfigFields {
 public:
  explicit ConfigFields(const nlohmann::json& j) : j_(j) {}
  bool Has(absl::string_view key) const;  // present and not null
  absl::StatusOr<int64_t> Int(absl::string_view key, int64_t def) const;
  absl::StatusOr<std::optional<int64_t>> OptionalInt(absl::string_view key) const;
  // An integer size in [1, max] (`def` when absent), or an error naming the key and the bounds.
  absl::StatusOr<int64_t> Size(absl::string_view key, int64_t def,
                               int64_t max = kMaxHeadSize) const;
  absl::StatusOr<double> Float(absl::string_view key, double def) const;
  absl::StatusOr<std::optional<double>> OptionalFloat(absl::string_view key) const;
  absl::StatusOr<bool> Bool(absl::string_view key, bool def) const;
  absl::StatusOr<std::string> String(absl::string_view key, absl::string_view def) const;
  absl::StatusOr<std::optional<std::string>> OptionalString(absl::string_view key) const;

 private:
  const nlohmann::json& j_;
};

// A softmax-attention layer of a hybrid model (fla's `attn` option, Qwen3.5's full attention).
struct AttentionLayerConfig {
  int64_t num_heads = 0, num_kv_heads = 0, head_dim = 0;
  int64_t window = 0;  // 0: full causal attention (paged KV cache); > 0: sliding window (ring)
  double rope_theta = 10000.0;
  int64_t rotary_dim = 0;  // RoPE on the first rotary_dim features of each head
  bool qkv_bias = false;
  // Qwen3.5 gated attention: q_proj interleaves each head's query and gate, zero-centred q/k
  // RMSNorms before RoPE, output · sigmoid(gate).
  bool qwen_gated = false;
};

// The MLP of every block as a mixture of experts (Qwen3.5/3.6 MoE, kernels/moe.h): `experts`
// SwiGLU experts of width `intermediate`, `top_k` of them per token, plus one shared expert of
// width `shared_intermediate` behind a sigmoid gate. experts = 0: a dense MLP.
// Qwen3-Next also keeps a dense MLP (of intermediate_size) in the layers listed in
// mlp_only_layers and those off its decoder_sparse_step, and may leave the top k's weights as
// their softmax probabilities (norm_topk_prob false).
struct MoeConfig {
  int64_t experts = 0, top_k = 0, intermediate = 0, shared_intermediate = 0;
  bool normalize = true;              // norm_topk_prob
  int64_t sparse_step = 1;            // decoder_sparse_step: MoE where (layer + 1) % step == 0
  std::vector<int64_t> dense_layers;  // mlp_only_layers
};

// `quantization_config`: fp8 checkpoints (models/fp8.h) are what linfer loads; their weights are
// dequantized on load to the weight dtype linfer computes with.
struct QuantizationConfig {
  std::string method;             // "" (not quantized), "fp8" or "compressed-tensors"
  Fp8Scheme fp8;                  // how the fp8 tensors are scaled
  std::string activation_scheme;  // "dynamic" or "static" (activations stay unquantized)
};

struct ModelConfig {
  Family family = Family::kGatedDeltaNet;
  std::string model_type;
  int64_t hidden_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t vocab_size = 0;
  int64_t intermediate_size = 0;  // resolved with the family's hidden_ratio rule when null; 0
                                  // for Mamba2 (no MLP) and MoE models (moe.intermediate)
  MoeConfig moe;
  // Qwen3-Next's Gated DeltaNet: in_proj_qkvz and in_proj_ba fused per key head (instead of
  // Qwen3.5's in_proj_qkv, in_proj_z, in_proj_b, in_proj_a).
  bool fused_gdn_projections = false;
  double norm_eps = 1e-6;
  bool tie_word_embeddings = false;
  std::string hidden_act;
  std::optional<int64_t> bos_token_id, eos_token_id, pad_token_id;
  nlohmann::json raw;   // the whole config.json
  nlohmann::json text;  // the text model's fields (== raw, except Qwen3.5's `text_config`)
  // Checkpoint layout: tensor names start with weight_prefix ("model.", or
  // "model.language_model." in Qwen3.5's multimodal layout). qwen_layout: transformers' names
  // (embed_tokens, input_layernorm, post_attention_layernorm, linear_attn / self_attn) and
  // zero-centred RMSNorms; otherwise fla's (embeddings, attn_norm, mlp_norm, attn).
  std::string weight_prefix = "model.";
  bool qwen_layout = false;
  std::map<int64_t, AttentionLayerConfig> attention_layers;  // hybrid layers by index
  int64_t max_position_embeddings = 0;                       // 0: not given
  QuantizationConfig quantization;
};

// MLP width rule (MODELS.md §0.4): int(D · ratio · 2/3) rounded up to a multiple of 256.
// D · ratio must be finite and at most kMaxModelDim (ParseModelConfig checks it).
int64_t DefaultIntermediateSize(int64_t hidden_size, double hidden_ratio);

// Whether block `layer`'s MLP is the mixture of experts (else the dense SwiGLU MLP).
bool IsMoeLayer(const ModelConfig& config, int64_t layer);

// Parses the shared fields and refuses what linfer does not run (unknown model_type,
// attnres_block_size, non-swish MLPs, sizes outside [1, kMax*], special token ids outside the
// vocabulary, norm_eps outside [0, 1], numbers beyond the 64-bit range, quantization methods
// other than fp8).
absl::StatusOr<ModelConfig> ParseModelConfig(const nlohmann::json& j);
// Parses the text of a config.json (what LoadModelConfig reads); errors start with `source`.
absl::StatusOr<ModelConfig> ParseModelConfigText(absl::string_view text,
                                                 absl::string_view source = "config.json");
// Hybrid configs (models/hybrid_config.cc): fla's `attn` option, and Qwen3.5 / Qwen3.6
// (`qwen3_5_text`, or `qwen3_5` with its `text_config`; the MoE variants `qwen3_5_moe_text` and
// `qwen3_5_moe`) and Qwen3-Next (`qwen3_next`).
absl::Status ParseFlaHybridAttention(const nlohmann::json& attn, ModelConfig* config);
absl::Status ParseQwen3_5Config(const nlohmann::json& j, ModelConfig* config);

// Reads and parses DIR/config.json.
absl::StatusOr<ModelConfig> LoadModelConfig(const std::filesystem::path& dir);

}  // namespace linfer
