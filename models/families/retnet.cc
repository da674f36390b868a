// retnet (fla MultiScaleRetention, MODELS.md §4): q [H·dk], k [H_kv·dk], v [H_kv·dv] projections
// (no conv: retnet's config has use_short_conv, but its layer never receives it), the feature map
// on q and k, RoPE on q and k at absolute positions, and a fixed decay per head:
//   S ← γ_h S + k vᵀ,  γ_h = 1 − 2^{−5−h},  o = Sᵀ(q·dk^-½),
// then RMSNorm(o) ⊙ act(x W_g) and o W_o. State: recurrent [H, dk, dv].
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/gemm.h"
#include "kernels/rope.h"
#include "models/families/families.h"
#include "models/families/gla_style.h"

namespace linfer {
namespace {

class RetNetMixer : public TokenMixer {
 public:
  absl::Status Init(const ModelConfig& config, int layer, WeightStore& store);
  std::vector<StateSpec> state_specs() const override {
    return {{"recurrent", {g_.h, g_.dk, g_.dv}}};
  }
  absl::Status Forward(const ExecContext& ctx, const TensorView& x, const Segments& segs,
                       absl::Span<const TensorView> states, const MixerOptions& options,
                       const TensorView& out) override;

 private:
  GlaStyleLayer g_;
  Tensor log_decay_;  // [H] log(1 − 2^(−5−h)), on the model's device
};

absl::Status RetNetMixer::Init(const ModelConfig& config, int layer, WeightStore& store) {
  ASSIGN_OR_RETURN(g_, LoadGlaStyleLayer(config, layer, store, {1.0, 2.0, 8}));
  if (g_.dk > 256 || g_.dk % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: retnet head key dim must be even and ≤ 256, got ", g_.dk));
  }
  ASSIGN_OR_RETURN(Tensor host, Tensor::Empty(DType::kF32, {g_.h}));
  for (int64_t h = 0; h < g_.h; ++h) {
    host.data<float>()[h] =
        static_cast<float>(std::log1p(-std::exp2(-5.0 - static_cast<double>(h))));
  }
  ASSIGN_OR_RETURN(log_decay_, store.Constant(std::move(host)));
  return absl::OkStatus();
}

absl::Status RetNetMixer::Forward(const ExecContext& ctx, const TensorView& x, const Segments& segs,
                                  absl::Span<const TensorView> states, const MixerOptions& options,
                                  const TensorView& out) {
  const int64_t t = x.dim(0);
  ASSIGN_OR_RETURN(TensorView q, Scratch(ctx, t, g_.key_dim));
  ASSIGN_OR_RETURN(TensorView k, Scratch(ctx, t, g_.kv_key_dim()));
  ASSIGN_OR_RETURN(TensorView v, Scratch(ctx, t, g_.kv_value_dim()));
  ASSIGN_OR_RETURN(TensorView o, Scratch(ctx, t, g_.value_dim));
  RETURN_IF_ERROR(Linear(ctx, x, g_.q_proj.view(), q));
  RETURN_IF_ERROR(Linear(ctx, x, g_.k_proj.view(), k));
  RETURN_IF_ERROR(Linear(ctx, x, g_.v_proj.view(), v));
  RETURN_IF_ERROR(Activate(ctx, g_.feature_map, q, q));
  RETURN_IF_ERROR(Activate(ctx, g_.feature_map, k, k));
  const int dk = static_cast<int>(g_.dk);
  RETURN_IF_ERROR(Rope(ctx, q, segs, {static_cast<int>(g_.h), dk, dk}));
  RETURN_IF_ERROR(Rope(ctx, k, segs, {static_cast<int>(g_.h / g_.groups), dk, dk}));
  const RecurrenceSpec spec{dk,
                            static_cast<int>(g_.dv),
                            DecayKind::kScalar,
                            /*delta_rule=*/false,
                            /*normalize=*/false,
                            QueryScale(g_.dk)};
  RecurrenceInputs in;
  in.q = q;
  in.k = k;
  in.v = v;
  in.head_log_decay = log_decay_.view();
  RETURN_IF_ERROR(Recurrence(ctx, spec, in, segs, states[0], TensorView(), options, o));
  RETURN_IF_ERROR(g_.norm->Apply(ctx, x, o));
  return Linear(ctx, o, g_.o_proj.view(), out);
}

}  // namespace

absl::StatusOr<std::unique_ptr<TokenMixer>> CreateRetNetMixer(const ModelConfig& config, int layer,
                                                              WeightStore& store) {
  auto m = std::make_unique<RetNetMixer>();
  RETURN_IF_ERROR(m->Init(config, layer, store));
  return m;
}

}  // namespace linfer
