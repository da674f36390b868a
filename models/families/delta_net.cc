// delta_net (fla DeltaNet, MODELS.md §2): per head,
//   q,k = act(conv(x W)) (silu only when qk_activation is silu), v = silu(conv(x W_v));
//   q,k ← relu / elu+1 / identity per qk_activation; l2 or sum normalisation;
//   β = σ(x W_b)(×2) or 1;  S ← S + β k (v − Sᵀk)ᵀ;  o = Sᵀ(q·dk^-½);  o_norm (gated if use_gate)
// State: recurrent [H, dk, dv], and conv states q [key_dim, W], k [key_dim, W], v [value_dim, W].
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"
#include "kernels/gates.h"
#include "kernels/gemm.h"
#include "kernels/norm.h"
#include "models/families/families.h"

namespace linfer {
namespace {

class DeltaNetMixer : public TokenMixer {
 public:
  absl::Status Init(const ModelConfig& config, int layer, WeightStore& store);
  std::vector<StateSpec> state_specs() const override;
  absl::Status Forward(const ExecContext& ctx, const TensorView& x, const Segments& segs,
                       absl::Span<const TensorView> states, const MixerOptions& options,
                       const TensorView& out) override;

 private:
  int64_t d_ = 0, h_ = 0, dk_ = 0, dv_ = 0, key_dim_ = 0, value_dim_ = 0, conv_size_ = 0;
  bool use_conv_ = true, use_beta_ = true, allow_neg_eigval_ = false, sum_norm_ = false;
  std::string qk_activation_;
  Tensor q_proj_, k_proj_, v_proj_, b_proj_, q_conv_, k_conv_, v_conv_, o_proj_;
  std::optional<OutputNormGate> norm_;
};

absl::Status DeltaNetMixer::Init(const ModelConfig& config, int layer, WeightStore& store) {
  ConfigFields f(config.raw);
  d_ = config.hidden_size;
  ASSIGN_OR_RETURN(double expand_k, f.Float("expand_k", 1.0));
  ASSIGN_OR_RETURN(double expand_v, f.Float("expand_v", 1.0));
  ASSIGN_OR_RETURN(h_, f.Size("num_heads", 16));
  ASSIGN_OR_RETURN(bool use_gate, f.Bool("use_gate", false));
  ASSIGN_OR_RETURN(use_conv_, f.Bool("use_short_conv", true));
  ASSIGN_OR_RETURN(use_beta_, f.Bool("use_beta", true));
  ASSIGN_OR_RETURN(allow_neg_eigval_, f.Bool("allow_neg_eigval", false));
  ASSIGN_OR_RETURN(conv_size_, f.Size("conv_size", 4));
  ASSIGN_OR_RETURN(std::string qk_norm, f.String("qk_norm", "l2"));
  ASSIGN_OR_RETURN(qk_activation_, f.String("qk_activation", "silu"));
  ASSIGN_OR_RETURN(key_dim_, ScaledSize("hidden_size · expand_k", d_, expand_k));
  ASSIGN_OR_RETURN(value_dim_, ScaledSize("hidden_size · expand_v", d_, expand_v));
  if (h_ <= 0 || key_dim_ <= 0 || value_dim_ <= 0 || key_dim_ % h_ != 0 || value_dim_ % h_ != 0 ||
      conv_size_ <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: delta_net key_dim (", key_dim_, ") and value_dim (", value_dim_,
                     ") must be positive multiples of num_heads (", h_, ")"));
  }
  if (qk_norm != "l2" && qk_norm != "sum") {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: qk_norm must be 'l2' or 'sum', got '", qk_norm, "'"));
  }
  sum_norm_ = qk_norm == "sum";
  if (qk_activation_ != "silu" && qk_activation_ != "relu" && qk_activation_ != "elu" &&
      qk_activation_ != "identity") {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: qk_activation must be silu, relu, elu or identity, got '",
                     qk_activation_, "'"));
  }
  dk_ = key_dim_ / h_;
  dv_ = value_dim_ / h_;
  auto load = [&](absl::string_view name, Shape shape) {
    return store.Load(AttnName(layer, name), shape);
  };
  auto matrix = [&](absl::string_view name, Shape shape) {
    return store.LoadMatrix(AttnName(layer, name), shape);
  };
  ASSIGN_OR_RETURN(q_proj_, matrix("q_proj.weight", {key_dim_, d_}));
  ASSIGN_OR_RETURN(k_proj_, matrix("k_proj.weight", {key_dim_, d_}));
  ASSIGN_OR_RETURN(v_proj_, matrix("v_proj.weight", {value_dim_, d_}));
  if (use_beta_) {
    ASSIGN_OR_RETURN(b_proj_, matrix("b_proj.weight", {h_, d_}));
  }
  if (use_conv_) {
    ASSIGN_OR_RETURN(q_conv_, load("q_conv1d.weight", {key_dim_, conv_size_}));
    ASSIGN_OR_RETURN(k_conv_, load("k_conv1d.weight", {key_dim_, conv_size_}));
    ASSIGN_OR_RETURN(v_conv_, load("v_conv1d.weight", {value_dim_, conv_size_}));
  }
  ASSIGN_OR_RETURN(o_proj_, matrix("o_proj.weight", {d_, value_dim_}));
  ASSIGN_OR_RETURN(norm_, OutputNormGate::Load(store, layer, "o_norm", true, use_gate, dv_,
                                               value_dim_, d_, config.norm_eps, Activation::kSilu));
  return absl::OkStatus();
}

std::vector<StateSpec> DeltaNetMixer::state_specs() const {
  std::vector<StateSpec> specs = {{"recurrent", {h_, dk_, dv_}}};
  if (use_conv_) {
    specs.push_back(ConvStateSpec("conv_q", key_dim_, conv_size_));
    specs.push_back(ConvStateSpec("conv_k", key_dim_, conv_size_));
    specs.push_back(ConvStateSpec("conv_v", value_dim_, conv_size_));
  }
  return specs;
}

absl::Status DeltaNetMixer::Forward(const ExecContext& ctx, const TensorView& x,
                                    const Segments& segs, absl::Span<const TensorView> states,
                                    const MixerOptions& options, const TensorView& out) {
  const int64_t t = x.dim(0);
  ASSIGN_OR_RETURN(TensorView q, Scratch(ctx, t, key_dim_));
  ASSIGN_OR_RETURN(TensorView k, Scratch(ctx, t, key_dim_));
  ASSIGN_OR_RETURN(TensorView v, Scratch(ctx, t, value_dim_));
  ASSIGN_OR_RETURN(TensorView beta, Scratch(ctx, t, h_));
  ASSIGN_OR_RETURN(TensorView o, Scratch(ctx, t, value_dim_));
  const Activation qk_act = qk_activation_ == "silu" ? Activation::kSilu : Activation::kIdentity;
  const TensorView none;
  RETURN_IF_ERROR(ProjectConv(ctx, x, q_proj_.view(), q_conv_.view(), segs,
                              use_conv_ ? states[1] : none, qk_act, q));
  RETURN_IF_ERROR(ProjectConv(ctx, x, k_proj_.view(), k_conv_.view(), segs,
                              use_conv_ ? states[2] : none, qk_act, k));
  RETURN_IF_ERROR(ProjectConv(ctx, x, v_proj_.view(), v_conv_.view(), segs,
                              use_conv_ ? states[3] : none, Activation::kSilu, v));
  const Activation extra = qk_activation_ == "relu"  ? Activation::kRelu
                           : qk_activation_ == "elu" ? Activation::kEluPlusOne
                                                     : Activation::kIdentity;
  for (const TensorView& m : {q, k}) {
    RETURN_IF_ERROR(Activate(ctx, extra, m, m));
    RETURN_IF_ERROR(sum_norm_ ? SumNormalize(ctx, m, dk_, 0.0f, m)
                              : L2Normalize(ctx, m, dk_, 1e-6f, m));
  }
  if (use_beta_) {
    RETURN_IF_ERROR(Linear(ctx, x, b_proj_.view(), beta));
    RETURN_IF_ERROR(SigmoidScale(ctx, beta, allow_neg_eigval_ ? 2.0f : 1.0f, beta));
  } else {
    RETURN_IF_ERROR(Fill(ctx, 1.0f, beta));
  }
  const RecurrenceSpec spec{static_cast<int>(dk_), static_cast<int>(dv_), DecayKind::kNone,
                            /*delta_rule=*/true,   /*normalize=*/false,   QueryScale(dk_)};
  RecurrenceInputs in;
  in.q = q;
  in.k = k;
  in.v = v;
  in.beta = beta;
  RETURN_IF_ERROR(Recurrence(ctx, spec, in, segs, states[0], none, options, o));
  RETURN_IF_ERROR(norm_->Apply(ctx, x, o));
  return Linear(ctx, o, o_proj_.view(), out);
}

}  // namespace

absl::StatusOr<std::unique_ptr<TokenMixer>> CreateDeltaNetMixer(const ModelConfig& config,
                                                                int layer, WeightStore& store) {
  auto m = std::make_unique<DeltaNetMixer>();
  RETURN_IF_ERROR(m->Init(config, layer, store));
  return m;
}

}  // namespace linfer
