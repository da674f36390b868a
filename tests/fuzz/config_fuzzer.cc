// Fuzz target: config.json text through ParseModelConfigText, the path LoadModelConfig takes.
// Whatever it accepts must satisfy the documented bounds.
#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "kernels/moe.h"
#include "models/config.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using linfer::fuzz::Require;
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<linfer::ModelConfig> c = linfer::ParseModelConfigText(text);
  if (!c.ok()) {
    Require(!c.status().message().empty(), "an error without a message");
    return 0;
  }
  Require(c->hidden_size >= 1 && c->hidden_size <= linfer::kMaxModelDim, "hidden_size bound");
  // No dense MLP width: Mamba2 (no MLP) and the Qwen3.5 MoE (every layer's MLP is experts).
  const bool no_dense =
      c->family == linfer::Family::kMamba2 || (c->moe.experts > 0 && !c->fused_gdn_projections);
  Require(no_dense ? c->intermediate_size == 0
                   : c->intermediate_size >= 1 && c->intermediate_size <= linfer::kMaxModelDim,
          "intermediate_size bound");
  const linfer::MoeConfig& m = c->moe;
  if (m.experts > 0) {
    Require(m.experts <= linfer::kMaxMoeExperts && m.top_k >= 1 && m.top_k <= m.experts &&
                m.top_k <= linfer::kMaxMoeTopK,
            "experts and top_k bounds");
    Require(m.intermediate >= 1 && m.intermediate <= linfer::kMaxModelDim &&
                m.shared_intermediate >= 1 && m.shared_intermediate <= linfer::kMaxModelDim,
            "expert width bounds");
    Require(m.sparse_step >= 1, "decoder_sparse_step bound");
    for (int64_t l : m.dense_layers) {
      Require(l >= 0 && l < c->num_hidden_layers, "mlp_only_layers bound");
    }
  } else {
    Require(m.top_k == 0 && m.dense_layers.empty(), "no MoE fields without experts");
  }
  const linfer::QuantizationConfig& q = c->quantization;
  using Strategy = linfer::Fp8Scheme::Strategy;
  if (q.method.empty()) {
    Require(q.fp8.strategy == Strategy::kNone, "no fp8 scheme without a quantization method");
  } else {
    Require((q.method == "fp8" || q.method == "compressed-tensors") &&
                (q.fp8.scale_suffix == "_scale" || q.fp8.scale_suffix == "_scale_inv") &&
                (q.activation_scheme == "dynamic" || q.activation_scheme == "static"),
            "quantization: an fp8 method, its scale names, its activation scheme");
    Require(q.fp8.strategy == Strategy::kBlock
                ? q.fp8.block_rows >= 1 && q.fp8.block_rows <= linfer::kMaxModelDim &&
                      q.fp8.block_cols >= 1 && q.fp8.block_cols <= linfer::kMaxModelDim
                : q.fp8.strategy != Strategy::kNone,
            "quantization: bounded blocks, or channel or tensor scales");
  }
  Require(c->num_hidden_layers >= 1 && c->num_hidden_layers <= linfer::kMaxModelLayers,
          "num_hidden_layers bound");
  Require(c->vocab_size >= 1 && c->vocab_size <= linfer::kMaxVocabSize, "vocab_size bound");
  Require(c->norm_eps >= 0 && c->norm_eps <= 1, "norm_eps bound");
  for (const auto& id : {c->bos_token_id, c->eos_token_id}) {
    Require(!id || (*id >= 0 && *id < c->vocab_size), "special token id bound");
  }
  // Qwen3.5/3.6 (dense, MoE, multimodal) and Qwen3-Next share the family qwen3_5.
  Require(linfer::FamilyName(c->family) == c->model_type ||
              (c->family == linfer::Family::kQwen3_5 && c->model_type.starts_with("qwen3_")),
          "family matches model_type");
  return 0;
}
