// gated_deltanet (fla GatedDeltaNet, MODELS.md §1): per v-head h,
//   q,k,v = silu(conv(x W)); q,k ← l2norm; β = σ(x W_b)(×2); g = −e^{A_log}·softplus(x W_a +
//   dt_bias) S ← e^{g} S;  S ← S + β k (v − Sᵀk)ᵀ;  o = Sᵀ(q·dk^-½);  o ← RMSNorm(o) ⊙ silu(x W_g);
//   o W_o
// State: recurrent [HV, dk, dv] (K-first; fla stores it V-first), and the q, k, v conv states
// [key_dim, W], [key_dim, W], [value_dim, W].
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"
#include "kernels/activation.h"
#include "kernels/gemm.h"
#include "kernels/short_conv.h"
#include "models/families/families.h"

namespace linfer {
namespace {

class GatedDeltaNetMixer : public TokenMixer {
 public:
  absl::Status Init(const ModelConfig& config, int layer, WeightStore& store);
  std::vector<StateSpec> state_specs() const override;
  absl::Status Forward(const ExecContext& ctx, const TensorView& x, const Segments& segs,
                       absl::Span<const TensorView> states, const MixerOptions& options,
                       const TensorView& out) override;

 private:
  int64_t d_ = 0, h_ = 0, hv_ = 0, dk_ = 0, dv_ = 0, key_dim_ = 0, value_dim_ = 0;
  int64_t conv_size_ = 0;
  bool use_conv_ = true, allow_neg_eigval_ = false, use_gate_ = true;
  Tensor in_proj_;  // q_proj, k_proj, v_proj, a_proj, b_proj (, g_proj) stacked by rows: one GEMM
  Tensor a_log_, dt_bias_;
  Tensor q_conv_, k_conv_, v_conv_, o_proj_;
  std::optional<OutputNormGate> norm_;
};

absl::Status GatedDeltaNetMixer::Init(const ModelConfig& config, int layer, WeightStore& store) {
  ConfigFields f(config.raw);
  d_ = config.hidden_size;
  ASSIGN_OR_RETURN(dk_, f.Size("head_dim", 256));
  ASSIGN_OR_RETURN(h_, f.Size("num_heads", 6));
  ASSIGN_OR_RETURN(hv_, f.Size("num_v_heads", h_));
  ASSIGN_OR_RETURN(double expand_v, f.Float("expand_v", 2.0));
  ASSIGN_OR_RETURN(use_gate_, f.Bool("use_gate", true));
  ASSIGN_OR_RETURN(use_conv_, f.Bool("use_short_conv", true));
  ASSIGN_OR_RETURN(allow_neg_eigval_, f.Bool("allow_neg_eigval", false));
  ASSIGN_OR_RETURN(conv_size_, f.Size("conv_size", 4));
  ASSIGN_OR_RETURN(dv_, ScaledSize("head_dim · expand_v", dk_, expand_v, kMaxHeadSize));
  if (dk_ <= 0 || h_ <= 0 || hv_ <= 0 || dv_ <= 0 || conv_size_ <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.json: gated_deltanet needs positive head_dim, num_heads, num_v_heads, expand_v, "
        "conv_size (got head_dim=",
        dk_, " num_heads=", h_, " num_v_heads=", hv_, " head_v_dim=", dv_,
        " conv_size=", conv_size_, ")"));
  }
  if (hv_ % h_ != 0) {
    return absl::InvalidArgumentError(absl::StrCat("config.json: num_v_heads (", hv_,
                                                   ") must be a multiple of num_heads (", h_, ")"));
  }
  key_dim_ = h_ * dk_;
  value_dim_ = hv_ * dv_;
  auto load = [&](absl::string_view name, Shape shape) {
    return store.Load(AttnName(layer, name), shape);
  };
  auto matrix = [&](absl::string_view name, Shape shape) {
    return store.LoadMatrix(AttnName(layer, name), shape);
  };
  std::vector<std::pair<std::string, Shape>> parts = {
      {AttnName(layer, "q_proj.weight"), {key_dim_, d_}},
      {AttnName(layer, "k_proj.weight"), {key_dim_, d_}},
      {AttnName(layer, "v_proj.weight"), {value_dim_, d_}},
      {AttnName(layer, "a_proj.weight"), {hv_, d_}},
      {AttnName(layer, "b_proj.weight"), {hv_, d_}}};
  // The output gate's projection of the same input joins the stack: one GEMM for all six.
  if (use_gate_) parts.push_back({AttnName(layer, "g_proj.weight"), {value_dim_, d_}});
  ASSIGN_OR_RETURN(in_proj_, store.LoadStacked(parts));
  ASSIGN_OR_RETURN(a_log_, load("A_log", {hv_}));
  ASSIGN_OR_RETURN(dt_bias_, load("dt_bias", {hv_}));
  if (use_conv_) {
    ASSIGN_OR_RETURN(q_conv_, load("q_conv1d.weight", {key_dim_, conv_size_}));
    ASSIGN_OR_RETURN(k_conv_, load("k_conv1d.weight", {key_dim_, conv_size_}));
    ASSIGN_OR_RETURN(v_conv_, load("v_conv1d.weight", {value_dim_, conv_size_}));
  }
  ASSIGN_OR_RETURN(o_proj_, matrix("o_proj.weight", {d_, value_dim_}));
  ASSIGN_OR_RETURN(norm_, OutputNormGate::Load(store, layer, "o_norm", true, /*gated=*/false, dv_,
                                               value_dim_, d_, config.norm_eps, Activation::kSilu));
  return absl::OkStatus();
}

std::vector<StateSpec> GatedDeltaNetMixer::state_specs() const {
  std::vector<StateSpec> specs = {{"recurrent", {hv_, dk_, dv_}}};
  if (use_conv_) {
    specs.push_back(ConvStateSpec("conv_q", key_dim_, conv_size_));
    specs.push_back(ConvStateSpec("conv_k", key_dim_, conv_size_));
    specs.push_back(ConvStateSpec("conv_v", value_dim_, conv_size_));
  }
  return specs;
}

absl::Status GatedDeltaNetMixer::Forward(const ExecContext& ctx, const TensorView& x,
                                         const Segments& segs, absl::Span<const TensorView> states,
                                         const MixerOptions& options, const TensorView& out) {
  const int64_t t = x.dim(0);
  ASSIGN_OR_RETURN(TensorView proj, Scratch(ctx, t, in_proj_.dim(0)));
  // q, k, v side by side: one conv launch for all three.
  ASSIGN_OR_RETURN(TensorView qkv, Scratch(ctx, t, 2 * key_dim_ + value_dim_));
  const TensorView q = qkv.Cols(0, key_dim_), k = qkv.Cols(key_dim_, key_dim_),
                   v = qkv.Cols(2 * key_dim_, value_dim_);
  ASSIGN_OR_RETURN(TensorView o, Scratch(ctx, t, value_dim_));
  RETURN_IF_ERROR(Linear(ctx, x, in_proj_.view(), proj));
  const int64_t gates = 2 * key_dim_ + value_dim_;
  const TensorView a = proj.Cols(gates, hv_), b = proj.Cols(gates + hv_, hv_);
  const TensorView none;
  if (use_conv_) {
    const ConvGroup convs[] = {{proj.Cols(0, key_dim_), q_conv_.view(), states[1], q},
                               {proj.Cols(key_dim_, key_dim_), k_conv_.view(), states[2], k},
                               {proj.Cols(2 * key_dim_, value_dim_), v_conv_.view(), states[3], v}};
    RETURN_IF_ERROR(ShortConvs(ctx, convs, segs, Activation::kSilu));
  } else {
    RETURN_IF_ERROR(Activate(ctx, Activation::kSilu, proj.Cols(0, gates), qkv));
  }
  const RecurrenceSpec spec{static_cast<int>(dk_), static_cast<int>(dv_), DecayKind::kScalar,
                            /*delta_rule=*/true,   /*normalize=*/false,   QueryScale(dk_)};
  // q, k and the gates a, b go in raw: the recurrence normalises q and k and forms g, β (GdnPrep;
  // in a decode step on CUDA, inside its step kernel).
  RecurrenceInputs in;
  in.q = q;
  in.k = k;
  in.v = v;
  in.g = a;
  in.beta = b;
  in.gdn = GdnPrep{a_log_.view(), dt_bias_.view(), allow_neg_eigval_ ? 2.0f : 1.0f, 1e-6f};
  RETURN_IF_ERROR(Recurrence(ctx, spec, in, segs, states[0], none, options, o));
  if (use_gate_) {
    RETURN_IF_ERROR(norm_->ApplyGate(ctx, proj.Cols(gates + 2 * hv_, value_dim_), o));
  } else {
    RETURN_IF_ERROR(norm_->Apply(ctx, x, o));
  }
  return Linear(ctx, o, o_proj_.view(), out);
}

}  // namespace

absl::StatusOr<std::unique_ptr<TokenMixer>> CreateGatedDeltaNetMixer(const ModelConfig& config,
                                                                     int layer,
                                                                     WeightStore& store) {
  auto m = std::make_unique<GatedDeltaNetMixer>();
  RETURN_IF_ERROR(m->Init(config, layer, store));
  return m;
}

}  // namespace linfer
