// mamba2 (transformers Mamba2ForCausalLM and fla's mamba2, MODELS.md §8,
// tests/models/reference/NOTES_families.md "Mamba2"): per token,
//   [z | xBC | dt] = x W_in (+b);  xBC = silu(conv(xBC) + b_conv);  [x | B | C] = xBC;
//   Δ = clamp(softplus(dt + dt_bias), lo, hi);  per head h of group g = h / (H / n_groups):
//   S_h ← exp(Δ_h·A_h) S_h + B_g (Δ_h x_h)ᵀ with A = −exp(A_log);  y_h = S_hᵀ C_g + D_h x_h;
//   y = RMSNorm_group(y ⊙ silu(z))·w (or RMSNorm(y)·w ⊙ silu(z) with fla's norm_before_gate, or
//   y ⊙ silu(z) without fla's rmsnorm), groups of Din / n_groups;  out = y W_out (+b).
// The scan is the shared scalar-decay recurrence with q = C, k = B, v = Δ·x, scale 1.
// State: recurrent [H, state_size, head_dim] (K-first) and the conv state [conv_dim, K].
#include "kernels/mamba2.h"

#include <algorithm>
#include <cfloat>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"
#include "kernels/gemm.h"
#include "kernels/norm.h"
#include "kernels/short_conv.h"
#include "models/families/families.h"

namespace linfer {
namespace {

class Mamba2Mixer : public TokenMixer {
 public:
  absl::Status Init(const ModelConfig& config, int layer, WeightStore& store);
  std::vector<StateSpec> state_specs() const override {
    return {{"recurrent", {h_, n_, p_}}, ConvStateSpec("conv", conv_dim_, k_)};
  }
  absl::Status Forward(const ExecContext& ctx, const TensorView& x, const Segments& segs,
                       absl::Span<const TensorView> states, const MixerOptions& options,
                       const TensorView& out) override;

 private:
  absl::Status ParseConfig(const ModelConfig& config);
  absl::Status GatedNorm(const ExecContext& ctx, const TensorView& z, const TensorView& y) const;

  int64_t d_ = 0, din_ = 0, h_ = 0, p_ = 0, g_ = 1, n_ = 0, k_ = 0, conv_dim_ = 0;
  float lo_ = 0.0f, hi_ = FLT_MAX;
  double eps_ = 1e-5;
  bool use_norm_ = true, norm_before_gate_ = false, d_has_hdim_ = false;
  Tensor in_proj_, in_bias_, conv_w_, conv_b_, dt_bias_, a_log_, d_skip_, norm_w_, out_proj_,
      out_bias_;
};

// The two config flavours share model_type and tensors but not keys (NOTES_families.md §3).
absl::Status Mamba2Mixer::ParseConfig(const ModelConfig& config) {
  ConfigFields f(config.raw);
  const bool hf = f.Has("layer_norm_epsilon") || f.Has("time_step_limit") || f.Has("rms_norm") ||
                  f.Has("time_step_rank");
  const bool fla = f.Has("norm_eps") || f.Has("dt_limit") || f.Has("rmsnorm") ||
                   f.Has("norm_before_gate") || f.Has("D_has_hdim");
  if (hf && fla) {
    return absl::InvalidArgumentError(
        "config.json: mamba2 config mixes transformers keys (layer_norm_epsilon, "
        "time_step_limit, ...) with fla keys (norm_eps, dt_limit, ...)");
  }
  d_ = config.hidden_size;
  eps_ = config.norm_eps;
  ASSIGN_OR_RETURN(double expand, f.Float("expand", 2));
  ASSIGN_OR_RETURN(p_, f.Size("head_dim", 64));
  ASSIGN_OR_RETURN(n_, f.Size("state_size", 128));
  ASSIGN_OR_RETURN(g_, f.Size("n_groups", hf ? 8 : 1));
  ASSIGN_OR_RETURN(k_, f.Size("conv_kernel", 4, 1024));
  ASSIGN_OR_RETURN(std::optional<int64_t> num_heads, f.OptionalInt("num_heads"));
  ASSIGN_OR_RETURN(din_, ScaledSize("expand · hidden_size", d_, expand));
  if (p_ <= 0 || n_ <= 0 || g_ <= 0 || k_ <= 0 || din_ <= 0 || din_ > kMaxModelDim ||
      din_ % p_ != 0 || n_ > kMaxModelDim || k_ > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: mamba2 needs expand·hidden_size (", din_,
                     ") a positive multiple of head_dim (", p_, "), and positive state_size (", n_,
                     "), n_groups (", g_, "), conv_kernel (", k_, ")"));
  }
  h_ = din_ / p_;
  if (num_heads && *num_heads != 0 && *num_heads != h_) {
    return absl::InvalidArgumentError(absl::StrCat("config.json: mamba2 num_heads ", *num_heads,
                                                   " · head_dim ", p_, " != expand · hidden_size ",
                                                   din_));
  }
  if (h_ % g_ != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: mamba2 num_heads ", h_, " is not a multiple of n_groups ", g_));
  }
  conv_dim_ = din_ + 2 * g_ * n_;
  const char* limit_key = hf ? "time_step_limit" : "dt_limit";
  if (f.Has(limit_key)) {
    const nlohmann::json& lim = config.raw[limit_key];
    if (!lim.is_array() || lim.size() != 2 || !lim[0].is_number() || !lim[1].is_number() ||
        !(lim[0].get<double>() <= lim[1].get<double>())) {
      return absl::InvalidArgumentError(absl::StrCat("config.json: mamba2 '", limit_key,
                                                     "' must be [low, high], got ", lim.dump()));
    }
    lo_ = static_cast<float>(std::clamp(lim[0].get<double>(), -double{FLT_MAX}, double{FLT_MAX}));
    hi_ = static_cast<float>(std::clamp(lim[1].get<double>(), -double{FLT_MAX}, double{FLT_MAX}));
  }
  // transformers always normalises and gates first; fla can do neither or gate after the norm.
  if (!hf) {
    ASSIGN_OR_RETURN(use_norm_, f.Bool("rmsnorm", true));
    ASSIGN_OR_RETURN(norm_before_gate_, f.Bool("norm_before_gate", false));
    ASSIGN_OR_RETURN(d_has_hdim_, f.Bool("D_has_hdim", false));
  }
  return absl::OkStatus();
}

absl::Status Mamba2Mixer::Init(const ModelConfig& config, int layer, WeightStore& store) {
  RETURN_IF_ERROR(ParseConfig(config));
  ConfigFields f(config.raw);
  ASSIGN_OR_RETURN(bool use_bias, f.Bool("use_bias", false));
  ASSIGN_OR_RETURN(bool conv_bias, f.Bool("use_conv_bias", true));
  const std::string p = LayerPrefix(config, layer) + "mixer.";
  const int64_t nproj = 2 * din_ + 2 * g_ * n_ + h_;
  ASSIGN_OR_RETURN(in_proj_, store.LoadMatrix(p + "in_proj.weight", {nproj, d_}));
  if (use_bias) {
    ASSIGN_OR_RETURN(in_bias_, store.Load(p + "in_proj.bias", {nproj}));
    ASSIGN_OR_RETURN(out_bias_, store.Load(p + "out_proj.bias", {d_}));
  }
  ASSIGN_OR_RETURN(conv_w_, store.Load(p + "conv1d.weight", {conv_dim_, 1, k_}));
  if (conv_bias) {
    ASSIGN_OR_RETURN(conv_b_, store.Load(p + "conv1d.bias", {conv_dim_}));
  }
  ASSIGN_OR_RETURN(dt_bias_, store.Load(p + "dt_bias", {h_}));
  ASSIGN_OR_RETURN(a_log_, store.Load(p + "A_log", {h_}));
  ASSIGN_OR_RETURN(d_skip_, store.Load(p + "D", {d_has_hdim_ ? din_ : h_}));
  if (use_norm_) {
    ASSIGN_OR_RETURN(norm_w_, store.Load(p + "norm.weight", {din_}));
  }
  ASSIGN_OR_RETURN(out_proj_, store.LoadMatrix(p + "out_proj.weight", {d_, din_}));
  return absl::OkStatus();
}

absl::Status Mamba2Mixer::GatedNorm(const ExecContext& ctx, const TensorView& z,
                                    const TensorView& y) const {
  ASSIGN_OR_RETURN(TensorView gate, Scratch(ctx, z.dim(0), din_));
  RETURN_IF_ERROR(Activate(ctx, Activation::kSilu, z, gate));
  if (!use_norm_) return Mul(ctx, y, gate, y);
  const NormParams norm{static_cast<float>(eps_), din_ / g_};
  if (!norm_before_gate_) RETURN_IF_ERROR(Mul(ctx, y, gate, y));
  // The weight is per channel over all groups: RMSNorm without weight, then scale.
  RETURN_IF_ERROR(RmsNorm(ctx, y, TensorView(), norm, y));
  RETURN_IF_ERROR(ScaleGroups(ctx, y, norm_w_.view(), /*accumulate=*/false, y));
  return norm_before_gate_ ? Mul(ctx, y, gate, y) : absl::OkStatus();
}

absl::Status Mamba2Mixer::Forward(const ExecContext& ctx, const TensorView& x, const Segments& segs,
                                  absl::Span<const TensorView> states, const MixerOptions& options,
                                  const TensorView& out) {
  const int64_t t = x.dim(0), gn = g_ * n_;
  ASSIGN_OR_RETURN(TensorView zx, Scratch(ctx, t, 2 * din_ + 2 * gn + h_));
  ASSIGN_OR_RETURN(TensorView xbc, Scratch(ctx, t, conv_dim_));
  ASSIGN_OR_RETURN(TensorView delta, Scratch(ctx, t, h_));
  ASSIGN_OR_RETURN(TensorView g, Scratch(ctx, t, h_));
  ASSIGN_OR_RETURN(TensorView v, Scratch(ctx, t, din_));
  ASSIGN_OR_RETURN(TensorView y, Scratch(ctx, t, din_));
  RETURN_IF_ERROR(
      Linear(ctx, x, in_proj_.view(), zx, in_bias_.rank() > 0 ? &in_bias_.view() : nullptr));
  const TensorView z = zx.Cols(0, din_), dt = zx.Cols(din_ + conv_dim_, h_);
  const bool bias = conv_b_.rank() > 0;
  RETURN_IF_ERROR(ShortConv(ctx, zx.Cols(din_, conv_dim_), conv_w_.view(), segs, states[1],
                            bias ? Activation::kIdentity : Activation::kSilu, xbc));
  if (bias) RETURN_IF_ERROR(BiasActivate(ctx, xbc, conv_b_.view(), Activation::kSilu, xbc));
  const TensorView xs = xbc.Cols(0, din_);
  RETURN_IF_ERROR(Mamba2Gates(ctx, dt, dt_bias_.view(), a_log_.view(), lo_, hi_, delta, g));
  RETURN_IF_ERROR(ScaleGroups(ctx, xs, delta, /*accumulate=*/false, v));
  const RecurrenceSpec spec{static_cast<int>(n_), static_cast<int>(p_), DecayKind::kScalar,
                            /*delta_rule=*/false, /*normalize=*/false,  1.0f};
  RecurrenceInputs in;
  in.q = xbc.Cols(din_ + gn, gn);  // C
  in.k = xbc.Cols(din_, gn);       // B
  in.v = v;
  in.g = g;
  RETURN_IF_ERROR(Recurrence(ctx, spec, in, segs, states[0], TensorView(), options, y));
  RETURN_IF_ERROR(ScaleGroups(ctx, xs, d_skip_.view(), /*accumulate=*/true, y));
  RETURN_IF_ERROR(GatedNorm(ctx, z, y));
  return Linear(ctx, y, out_proj_.view(), out, out_bias_.rank() > 0 ? &out_bias_.view() : nullptr);
}

}  // namespace

absl::StatusOr<std::unique_ptr<TokenMixer>> CreateMamba2Mixer(const ModelConfig& config, int layer,
                                                              WeightStore& store) {
  auto m = std::make_unique<Mamba2Mixer>();
  RETURN_IF_ERROR(m->Init(config, layer, store));
  return m;
}

}  // namespace linfer
