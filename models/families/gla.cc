// gla (fla GatedLinearAttention, MODELS.md §3): q, k, v projections (optionally through short
// convs with silu), the feature map on q and k, per key channel log-decay
//   gk = max(logsigmoid(x W0ᵀ W1ᵀ + b1)/16, clamp_min),  S ← diag(e^{gk}) S + k vᵀ,
//   o = Sᵀ(q·dk^-½), then RMSNorm(o) ⊙ act(x W_g) and o W_o.
// State: recurrent [H, dk, dv], and (with short conv) conv states q [H·dk, W], k [H_kv·dk, W],
// v [H_kv·dv, W].
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"
#include "kernels/gates.h"
#include "kernels/gemm.h"
#include "models/families/families.h"
#include "models/families/gla_style.h"

namespace linfer {
namespace {

constexpr int64_t kGateLowRank = 16;
constexpr float kGateNormalizer = 16.0f;

class GlaMixer : public TokenMixer {
 public:
  absl::Status Init(const ModelConfig& config, int layer, WeightStore& store);
  std::vector<StateSpec> state_specs() const override;
  absl::Status Forward(const ExecContext& ctx, const TensorView& x, const Segments& segs,
                       absl::Span<const TensorView> states, const MixerOptions& options,
                       const TensorView& out) override;

 private:
  GlaStyleLayer g_;
  int64_t conv_size_ = 0;
  bool use_conv_ = false;
  float clamp_min_ = -std::numeric_limits<float>::infinity();
  Tensor gk0_, gk1_, gk1_bias_, q_conv_, k_conv_, v_conv_;
};

absl::Status GlaMixer::Init(const ModelConfig& config, int layer, WeightStore& store) {
  ASSIGN_OR_RETURN(g_, LoadGlaStyleLayer(config, layer, store, {0.5, 1.0, 4}));
  ConfigFields f(config.raw);
  ASSIGN_OR_RETURN(use_conv_, f.Bool("use_short_conv", false));
  ASSIGN_OR_RETURN(conv_size_, f.Size("conv_size", 4));
  ASSIGN_OR_RETURN(std::optional<double> clamp_min, f.OptionalFloat("clamp_min"));
  if (clamp_min) clamp_min_ = static_cast<float>(*clamp_min);
  if (use_conv_ && conv_size_ <= 0) {
    return absl::InvalidArgumentError("config.json: conv_size must be positive");
  }
  auto load = [&](absl::string_view name, Shape shape) {
    return store.Load(AttnName(layer, name), shape);
  };
  ASSIGN_OR_RETURN(gk0_,
                   store.LoadMatrix(AttnName(layer, "gk_proj.0.weight"), {kGateLowRank, g_.d}));
  ASSIGN_OR_RETURN(
      gk1_, store.LoadMatrix(AttnName(layer, "gk_proj.1.weight"), {g_.kv_key_dim(), kGateLowRank}));
  ASSIGN_OR_RETURN(gk1_bias_, load("gk_proj.1.bias", {g_.kv_key_dim()}));
  if (use_conv_) {
    ASSIGN_OR_RETURN(q_conv_, load("q_conv1d.weight", {g_.key_dim, conv_size_}));
    ASSIGN_OR_RETURN(k_conv_, load("k_conv1d.weight", {g_.kv_key_dim(), conv_size_}));
    ASSIGN_OR_RETURN(v_conv_, load("v_conv1d.weight", {g_.kv_value_dim(), conv_size_}));
  }
  return absl::OkStatus();
}

std::vector<StateSpec> GlaMixer::state_specs() const {
  std::vector<StateSpec> specs = {{"recurrent", {g_.h, g_.dk, g_.dv}}};
  if (use_conv_) {
    specs.push_back(ConvStateSpec("conv_q", g_.key_dim, conv_size_));
    specs.push_back(ConvStateSpec("conv_k", g_.kv_key_dim(), conv_size_));
    specs.push_back(ConvStateSpec("conv_v", g_.kv_value_dim(), conv_size_));
  }
  return specs;
}

absl::Status GlaMixer::Forward(const ExecContext& ctx, const TensorView& x, const Segments& segs,
                               absl::Span<const TensorView> states, const MixerOptions& options,
                               const TensorView& out) {
  const int64_t t = x.dim(0);
  ASSIGN_OR_RETURN(TensorView q, Scratch(ctx, t, g_.key_dim));
  ASSIGN_OR_RETURN(TensorView k, Scratch(ctx, t, g_.kv_key_dim()));
  ASSIGN_OR_RETURN(TensorView v, Scratch(ctx, t, g_.kv_value_dim()));
  ASSIGN_OR_RETURN(TensorView o, Scratch(ctx, t, g_.value_dim));
  ASSIGN_OR_RETURN(TensorView low, Scratch(ctx, t, kGateLowRank));
  ASSIGN_OR_RETURN(TensorView gk, Scratch(ctx, t, g_.kv_key_dim()));
  const TensorView none;
  const Activation act = use_conv_ ? Activation::kSilu : Activation::kIdentity;
  RETURN_IF_ERROR(ProjectConv(ctx, x, g_.q_proj.view(), q_conv_.view(), segs,
                              use_conv_ ? states[1] : none, act, q));
  RETURN_IF_ERROR(ProjectConv(ctx, x, g_.k_proj.view(), k_conv_.view(), segs,
                              use_conv_ ? states[2] : none, act, k));
  RETURN_IF_ERROR(ProjectConv(ctx, x, g_.v_proj.view(), v_conv_.view(), segs,
                              use_conv_ ? states[3] : none, act, v));
  RETURN_IF_ERROR(Linear(ctx, x, gk0_.view(), low));
  RETURN_IF_ERROR(Linear(ctx, low, gk1_.view(), gk, &gk1_bias_.view()));
  RETURN_IF_ERROR(GlaDecay(ctx, gk, kGateNormalizer, clamp_min_, gk));
  RETURN_IF_ERROR(Activate(ctx, g_.feature_map, q, q));
  RETURN_IF_ERROR(Activate(ctx, g_.feature_map, k, k));
  const RecurrenceSpec spec{static_cast<int>(g_.dk), static_cast<int>(g_.dv), DecayKind::kVector,
                            /*delta_rule=*/false,    /*normalize=*/false,     QueryScale(g_.dk)};
  RecurrenceInputs in;
  in.q = q;
  in.k = k;
  in.v = v;
  in.g = gk;
  RETURN_IF_ERROR(Recurrence(ctx, spec, in, segs, states[0], none, options, o));
  RETURN_IF_ERROR(g_.norm->Apply(ctx, x, o));
  return Linear(ctx, o, g_.o_proj.view(), out);
}

}  // namespace

absl::StatusOr<std::unique_ptr<TokenMixer>> CreateGlaMixer(const ModelConfig& config, int layer,
                                                           WeightStore& store) {
  auto m = std::make_unique<GlaMixer>();
  RETURN_IF_ERROR(m->Init(config, layer, store));
  return m;
}

}  // namespace linfer
