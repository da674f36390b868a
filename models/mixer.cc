// Mixer factory and shared helpers.
#include "models/mixer.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/gemm.h"
#include "kernels/short_conv.h"
#include "models/families/families.h"

namespace linfer {

absl::StatusOr<std::unique_ptr<TokenMixer>> CreateMixer(const ModelConfig& config, int layer,
                                                        WeightStore& store, LayerLinks* links) {
  if (config.attention_layers.contains(layer)) return CreateAttentionMixer(config, layer, store);
  switch (config.family) {
    case Family::kGatedDeltaNet:
      return CreateGatedDeltaNetMixer(config, layer, store);
    case Family::kDeltaNet:
      return CreateDeltaNetMixer(config, layer, store);
    case Family::kGla:
      return CreateGlaMixer(config, layer, store);
    case Family::kRetNet:
      return CreateRetNetMixer(config, layer, store);
    case Family::kLinearAttn:
      return CreateLinearAttnMixer(config, layer, store);
    case Family::kQwen3_5:
      return CreateQwen3_5GdnMixer(config, layer, store);
    case Family::kRwkv7:
      return CreateRwkv7Mixer(config, layer, store, links);
    case Family::kMamba2:
      return CreateMamba2Mixer(config, layer, store);
  }
  return absl::InternalError("unknown family");
}

std::string LayerPrefix(const ModelConfig& config, int layer) {
  return absl::StrCat(config.weight_prefix, "layers.", layer, ".");
}

std::string AttnName(int layer, absl::string_view name) {
  return absl::StrCat("model.layers.", layer, ".attn.", name);
}

absl::StatusOr<TensorView> Scratch(const ExecContext& ctx, int64_t rows, int64_t cols) {
  return Scratch(ctx, DType::kF32, {rows, cols});
}

StateSpec ConvStateSpec(std::string name, int64_t channels, int64_t width) {
  return {std::move(name), {channels, width}, DType::kF32, StateKind::kFixed};
}

absl::Status ProjectConv(const ExecContext& ctx, const TensorView& x, const TensorView& w,
                         const TensorView& conv, const Segments& segs, const TensorView& conv_state,
                         Activation act, const TensorView& y) {
  TensorView raw = y;  // the activation runs in place; the conv needs its input apart
  if (!conv.empty()) {
    ASSIGN_OR_RETURN(raw, Scratch(ctx, y.dim(0), y.dim(1)));
  }
  RETURN_IF_ERROR(Linear(ctx, x, w, raw));
  return ConvOrActivate(ctx, raw, conv, segs, conv_state, act, y);
}

absl::Status ConvOrActivate(const ExecContext& ctx, const TensorView& raw, const TensorView& conv,
                            const Segments& segs, const TensorView& conv_state, Activation act,
                            const TensorView& y) {
  if (conv.empty()) return Activate(ctx, act, raw, y);
  return ShortConv(ctx, raw, conv, segs, conv_state, act, y);
}

}  // namespace linfer
