// What gla and retnet share (fla GatedLinearAttention / MultiScaleRetention): q [H·dk],
// k [H_kv·dk], v [H_kv·dv] projections (query head h uses kv head h / (H/H_kv)), an optional
// feature map on q and k, and the output stage RMSNorm(o) ⊙ act(x W_g) then o W_o.
#pragma once

#include <cstdint>
#include <optional>

#include "absl/status/statusor.h"
#include "kernels/activation.h"
#include "models/config.h"
#include "models/families/families.h"
#include "models/weights.h"

namespace linfer {

struct GlaStyleLayer {
  int64_t d = 0, h = 0, groups = 1, dk = 0, dv = 0, key_dim = 0, value_dim = 0;
  int64_t kv_key_dim() const { return key_dim / groups; }
  int64_t kv_value_dim() const { return value_dim / groups; }
  Activation feature_map = Activation::kIdentity;
  Tensor q_proj, k_proj, v_proj, o_proj;
  std::optional<OutputNormGate> norm;
};

struct GlaStyleDefaults {
  double expand_k = 0.5, expand_v = 1.0;
  int64_t num_heads = 4;
};

// Parses the shared config fields with the family's defaults and loads the shared weights.
absl::StatusOr<GlaStyleLayer> LoadGlaStyleLayer(const ModelConfig& config, int layer,
                                                WeightStore& store,
                                                const GlaStyleDefaults& defaults);

}  // namespace linfer
