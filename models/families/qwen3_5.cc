// Qwen3.5 / Qwen3.6 Gated DeltaNet layer (transformers Qwen3_5GatedDeltaNet, MODELS.md §17 rule
// 5), with H key heads and HV value heads (value head h reads key head h / (HV/H)):
//   [q|k|v] = act(conv(x W_qkv))   one depthwise conv over the concatenated [2·H·dk + HV·dv]
//   z = x W_z,  β = σ(x W_b),  g = −e^{A_log}·softplus(x W_a + dt_bias)
//   q, k ← l2norm (eps 1e-6);  S ← e^g S;  δ = β(v − Sᵀk);  S ← S + k δᵀ;  o = Sᵀ(q·dk^-½)
//   o ← RMSNorm(o; w) ⊙ silu(z) per value head over dv (plain w, eps rms_norm_eps);  out = o W_out
// Weights `<prefix>layers.{l}.linear_attn.{in_proj_qkv,in_proj_z,in_proj_b,in_proj_a,conv1d,
// dt_bias,A_log,norm,out_proj}`. State: recurrent [HV, dk, dv] and conv [2·H·dk + HV·dv, W].
// Qwen3-Next (modeling_qwen3_next.py fix_query_key_value_ordering) stores the input projections
// fused per key head g instead: in_proj_qkvz rows [q_g | k_g | v of value heads g·r … g·r+r−1 |
// z of the same], in_proj_ba rows [b_g (r) | a_g (r)], r = HV/H; they are picked apart on load
// into the layout above (the conv runs over [all q | all k | all v] in both).
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/gemm.h"
#include "kernels/norm.h"
#include "kernels/short_conv.h"
#include "models/families/families.h"
#include "models/stacked_weight.h"

namespace linfer {
namespace {

class Qwen3_5GdnMixer : public TokenMixer {
 public:
  absl::Status Init(const ModelConfig& config, int layer, WeightStore& store);
  std::vector<StateSpec> state_specs() const override {
    return {{"recurrent", {hv_, dk_, dv_}}, ConvStateSpec("conv", conv_dim_, conv_size_)};
  }
  // x feeds in_proj only.
  DType InputDType(const ExecContext& ctx) const override { return in_proj_.InputDType(ctx); }
  absl::Status Forward(const ExecContext& ctx, const TensorView& x, const Segments& segs,
                       absl::Span<const TensorView> states, const MixerOptions& options,
                       const TensorView& out) override {
    return Run(ctx, x, nullptr, segs, states, options, out);
  }
  // The block's norm folds into in_proj (one product reads x).
  bool FoldsInputNorm(const ExecContext& ctx, int64_t rows) const override {
    return in_proj_.FoldsInputNorm(ctx, rows);
  }
  absl::Status ForwardNormed(const ExecContext& ctx, const TensorView& h, const InputNorm& norm,
                             const Segments& segs, absl::Span<const TensorView> states,
                             const MixerOptions& options, const TensorView& out) override {
    return Run(ctx, h, &norm, segs, states, options, out);
  }

 private:
  int64_t h_ = 0, hv_ = 0, dk_ = 0, dv_ = 0, key_dim_ = 0, value_dim_ = 0, conv_dim_ = 0;
  int64_t conv_size_ = 0;
  double eps_ = 1e-6;
  Activation act_ = Activation::kSilu;
  // in_proj_qkv, in_proj_z, in_proj_b and in_proj_a stacked by rows: one GEMM for all four (two
  // where fp8 qkv/z are kept beside bf16 b/a).
  StackedWeight in_proj_;
  Tensor conv_, dt_bias_, a_log_, norm_, out_proj_;

  // Qwen3-Next's in_proj_qkvz and in_proj_ba, picked apart into [q | k | v | z | b | a].
  absl::StatusOr<std::vector<Tensor>> LoadFused(WeightStore& store, const std::string& p,
                                                int64_t d) const;
  // Forward, with x un-normalised when `input_norm` is given (ForwardNormed).
  absl::Status Run(const ExecContext& ctx, const TensorView& x, const InputNorm* input_norm,
                   const Segments& segs, absl::Span<const TensorView> states,
                   const MixerOptions& options, const TensorView& out);
};

absl::Status Qwen3_5GdnMixer::Init(const ModelConfig& config, int layer, WeightStore& store) {
  ConfigFields f(config.text);
  ASSIGN_OR_RETURN(h_, f.Int("linear_num_key_heads", 16));
  ASSIGN_OR_RETURN(hv_, f.Int("linear_num_value_heads", 32));
  ASSIGN_OR_RETURN(dk_, f.Int("linear_key_head_dim", 128));
  ASSIGN_OR_RETURN(dv_, f.Int("linear_value_head_dim", 128));
  ASSIGN_OR_RETURN(conv_size_, f.Int("linear_conv_kernel_dim", 4));
  constexpr int64_t kMax = 1 << 16;
  for (auto [name, v] : {std::pair{"linear_num_key_heads", h_},
                         {"linear_num_value_heads", hv_},
                         {"linear_key_head_dim", dk_},
                         {"linear_value_head_dim", dv_},
                         {"linear_conv_kernel_dim", conv_size_}}) {
    if (v < 1 || v > kMax) {
      return absl::InvalidArgumentError(
          absl::StrCat("config.json: '", name, "' must be in [1, ", kMax, "], got ", v));
    }
  }
  if (hv_ % h_ != 0) {
    return absl::InvalidArgumentError(absl::StrCat("config.json: linear_num_value_heads (", hv_,
                                                   ") must be a multiple of linear_num_key_heads (",
                                                   h_, ")"));
  }
  key_dim_ = h_ * dk_;
  value_dim_ = hv_ * dv_;
  conv_dim_ = 2 * key_dim_ + value_dim_;
  eps_ = config.norm_eps;
  ASSIGN_OR_RETURN(act_, ParseActivation(config.hidden_act));
  const int64_t d = config.hidden_size;
  const std::string p = absl::StrCat(LayerPrefix(config, layer), "linear_attn.");
  if (config.fused_gdn_projections) {
    ASSIGN_OR_RETURN(std::vector<Tensor> runs, LoadFused(store, p, d));
    in_proj_ = StackedWeight(std::move(runs));
  } else {
    ASSIGN_OR_RETURN(std::vector<Tensor> runs,
                     store.LoadStackedRuns({{p + "in_proj_qkv.weight", {conv_dim_, d}},
                                            {p + "in_proj_z.weight", {value_dim_, d}},
                                            {p + "in_proj_b.weight", {hv_, d}},
                                            {p + "in_proj_a.weight", {hv_, d}}}));
    in_proj_ = StackedWeight(std::move(runs));
  }
  ASSIGN_OR_RETURN(conv_, store.Load(p + "conv1d.weight", {conv_dim_, conv_size_}));
  ASSIGN_OR_RETURN(dt_bias_, store.Load(p + "dt_bias", {hv_}));
  ASSIGN_OR_RETURN(a_log_, store.Load(p + "A_log", {hv_}));
  ASSIGN_OR_RETURN(norm_, store.Load(p + "norm.weight", {dv_}));
  ASSIGN_OR_RETURN(out_proj_, store.LoadMatrix(p + "out_proj.weight", {d, value_dim_}));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Tensor>> Qwen3_5GdnMixer::LoadFused(WeightStore& store,
                                                               const std::string& p,
                                                               int64_t d) const {
  const int64_t r = hv_ / h_, group = 2 * dk_ + 2 * r * dv_;
  const std::string qkvz = p + "in_proj_qkvz.weight", ba = p + "in_proj_ba.weight";
  const Shape qkvz_shape{h_ * group, d}, ba_shape{2 * hv_, d};
  // Rows [begin, begin + n) of each key head's group of `width` rows, head after head.
  auto pick = [&](const std::string& name, const Shape& shape, int64_t begin, int64_t n,
                  int64_t width) { return WeightStore::RowPick{name, shape, begin, n, h_, width}; };
  return store.LoadPickedRuns({pick(qkvz, qkvz_shape, 0, dk_, group),
                               pick(qkvz, qkvz_shape, dk_, dk_, group),
                               pick(qkvz, qkvz_shape, 2 * dk_, r * dv_, group),
                               pick(qkvz, qkvz_shape, 2 * dk_ + r * dv_, r * dv_, group),
                               pick(ba, ba_shape, 0, r, 2 * r), pick(ba, ba_shape, r, r, 2 * r)});
}

absl::Status Qwen3_5GdnMixer::Run(const ExecContext& ctx, const TensorView& x,
                                  const InputNorm* input_norm, const Segments& segs,
                                  absl::Span<const TensorView> states, const MixerOptions& options,
                                  const TensorView& out) {
  const int64_t t = x.dim(0);
  ASSIGN_OR_RETURN(TensorView proj, Scratch(ctx, t, in_proj_.rows()));
  ASSIGN_OR_RETURN(TensorView qkv, Scratch(ctx, t, conv_dim_));
  ASSIGN_OR_RETURN(TensorView o, Scratch(ctx, t, value_dim_));
  RETURN_IF_ERROR(input_norm != nullptr
                      ? in_proj_.RmsNormLinear(ctx, x, input_norm->w, input_norm->params, proj)
                      : in_proj_.Linear(ctx, x, proj));
  const TensorView raw = proj.Cols(0, conv_dim_), z = proj.Cols(conv_dim_, value_dim_);
  const TensorView b = proj.Cols(conv_dim_ + value_dim_, hv_),
                   a = proj.Cols(conv_dim_ + value_dim_ + hv_, hv_);
  RETURN_IF_ERROR(ShortConv(ctx, raw, conv_.view(), segs, states[1], act_, qkv));
  const RecurrenceSpec spec{static_cast<int>(dk_), static_cast<int>(dv_), DecayKind::kScalar,
                            /*delta_rule=*/true,   /*normalize=*/false,   QueryScale(dk_)};
  // q, k and the gates a, b go in raw: the recurrence normalises q and k and forms g, β (GdnPrep;
  // in a decode step on CUDA, inside its step kernel).
  RecurrenceInputs in;
  in.q = qkv.Cols(0, key_dim_);
  in.k = qkv.Cols(key_dim_, key_dim_);
  in.v = qkv.Cols(2 * key_dim_, value_dim_);
  in.g = a;
  in.beta = b;
  in.gdn = GdnPrep{a_log_.view(), dt_bias_.view(), /*beta_scale=*/1.0f, /*l2_eps=*/1e-6f};
  RETURN_IF_ERROR(Recurrence(ctx, spec, in, segs, states[0], TensorView(), options, o));
  // The gated norm writes out_proj's input in the dtype it takes (bf16: no conversion pass).
  TensorView normed = o;
  if (MatmulInputDType(ctx, out_proj_.view()) == DType::kBF16) {
    ASSIGN_OR_RETURN(normed, Scratch(ctx, DType::kBF16, {t, value_dim_}));
  }
  RETURN_IF_ERROR(GatedRmsNorm(ctx, o, z, norm_.view(), {static_cast<float>(eps_), dv_},
                               Activation::kSilu, normed));
  return Linear(ctx, normed, out_proj_.view(), out);
}

}  // namespace

absl::StatusOr<std::unique_ptr<TokenMixer>> CreateQwen3_5GdnMixer(const ModelConfig& config,
                                                                  int layer, WeightStore& store) {
  auto m = std::make_unique<Qwen3_5GdnMixer>();
  RETURN_IF_ERROR(m->Init(config, layer, store));
  return m;
}

}  // namespace linfer
