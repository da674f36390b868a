// Token-mixer factories, one per fla family (models/families/<family>.cc), and the output
// norm/gate stage several families share.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/norm.h"
#include "models/config.h"
#include "models/mixer.h"
#include "models/weights.h"

namespace linfer {

absl::StatusOr<std::unique_ptr<TokenMixer>> CreateGatedDeltaNetMixer(const ModelConfig& config,
                                                                     int layer, WeightStore& store);
absl::StatusOr<std::unique_ptr<TokenMixer>> CreateDeltaNetMixer(const ModelConfig& config,
                                                                int layer, WeightStore& store);
absl::StatusOr<std::unique_ptr<TokenMixer>> CreateGlaMixer(const ModelConfig& config, int layer,
                                                           WeightStore& store);
absl::StatusOr<std::unique_ptr<TokenMixer>> CreateRetNetMixer(const ModelConfig& config, int layer,
                                                              WeightStore& store);
absl::StatusOr<std::unique_ptr<TokenMixer>> CreateLinearAttnMixer(const ModelConfig& config,
                                                                  int layer, WeightStore& store);
// RWKV-7's time mix (layer 0 publishes its v in `links` for the value residual of the others)
// and its channel mix, the block's stateful feed-forward (models/families/rwkv7.cc).
absl::StatusOr<std::unique_ptr<TokenMixer>> CreateRwkv7Mixer(const ModelConfig& config, int layer,
                                                             WeightStore& store, LayerLinks* links);
absl::StatusOr<std::unique_ptr<TokenMixer>> CreateRwkv7ChannelMix(const ModelConfig& config,
                                                                  int layer, WeightStore& store);
// Mamba2's mixer, both config flavours (models/families/mamba2.cc).
absl::StatusOr<std::unique_ptr<TokenMixer>> CreateMamba2Mixer(const ModelConfig& config, int layer,
                                                              WeightStore& store);
// Qwen3.5/3.6's Gated DeltaNet layers (models/families/qwen3_5.cc).
absl::StatusOr<std::unique_ptr<TokenMixer>> CreateQwen3_5GdnMixer(const ModelConfig& config,
                                                                  int layer, WeightStore& store);
// The softmax-attention layers of hybrids, fla's and Qwen3.5's (models/families/attention.cc).
absl::StatusOr<std::unique_ptr<TokenMixer>> CreateAttentionMixer(const ModelConfig& config,
                                                                 int layer, WeightStore& store);

// Per-head RMSNorm over dv, optionally times act(g_proj(x)) (fla FusedRMSNormGated, or
// RMSNorm then gate). The weight is `<norm_name>.weight` [dv] unless `affine` is false.
class OutputNormGate {
 public:
  static absl::StatusOr<OutputNormGate> Load(WeightStore& store, int layer,
                                             absl::string_view norm_name, bool affine, bool gated,
                                             int64_t dv, int64_t value_dim, int64_t hidden,
                                             double eps, Activation act);
  // o [T, value_dim] in place; x [T, D] is the mixer input (for the gate projection).
  absl::Status Apply(const ExecContext& ctx, const TensorView& x, const TensorView& o) const;
  // o ← RmsNorm(o) ⊙ act(g) with the gate's projection g [T, value_dim] computed by the caller (a
  // mixer that stacks g_proj into its input projection loads this with gated = false).
  absl::Status ApplyGate(const ExecContext& ctx, const TensorView& g, const TensorView& o) const;

 private:
  NormParams Params() const { return {static_cast<float>(eps_), dv_}; }
  Tensor weight_;  // [dv] or empty
  Tensor g_proj_;  // [value_dim, D] or empty
  bool gated_ = false;
  int64_t dv_ = 0;
  double eps_ = 1e-6;
  Activation act_ = Activation::kSilu;
};

}  // namespace linfer
