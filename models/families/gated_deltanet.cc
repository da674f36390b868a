// gated_deltanet (fla GatedDeltaNet, MODELS.md §1): per v-head h,
//   q,k,v = silu(conv(x W)); q,k ← l2norm; β = σ(x W_b)(×2); g = −e^{A_log}·softplus(x W_a +
//   dt_bias) S ← e^{g} S;  S ← S + β k (v − Sᵀk)ᵀ;  o = Sᵀ(q·dk^-½);  o ← RMSNorm(o) ⊙ silu(x W_g);
//   o W_o
// State block: recurrent [HV, dk, dv] (K-first; fla stores it V-first), then the q, k, v conv
// states [key_dim, W], [key_dim, W], [value_dim, W].
#include <cmath>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "kernels/gemm.h"
#include "kernels/norm.h"
#include "kernels/status_macros.h"
#include "models/families/families.h"

namespace linfer {
namespace {

class GatedDeltaNetMixer : public TokenMixer {
 public:
  absl::Status Init(const ModelConfig& config, int layer, WeightStore& store);
  int64_t state_floats() const override {
    return hv_ * dk_ * dv_ + (use_conv_ ? (2 * key_dim_ + value_dim_) * conv_size_ : 0);
  }
  absl::Status Forward(const TensorView& x, absl::Span<const MixerSegment> segments,
                       const MixerOptions& options, const TensorView& out) override;

 private:
  int64_t d_ = 0, h_ = 0, hv_ = 0, dk_ = 0, dv_ = 0, key_dim_ = 0, value_dim_ = 0;
  int64_t conv_size_ = 0;
  bool use_conv_ = true, allow_neg_eigval_ = false;
  Tensor q_proj_, k_proj_, v_proj_, a_proj_, b_proj_, a_log_, dt_bias_;
  Tensor q_conv_, k_conv_, v_conv_, o_proj_;
  std::optional<OutputNormGate> norm_;
};

absl::Status GatedDeltaNetMixer::Init(const ModelConfig& config, int layer, WeightStore& store) {
  ConfigFields f(config.raw);
  d_ = config.hidden_size;
  ASSIGN_OR_RETURN(dk_, f.Int("head_dim", 256));
  ASSIGN_OR_RETURN(h_, f.Int("num_heads", 6));
  ASSIGN_OR_RETURN(std::optional<int64_t> hv, f.OptionalInt("num_v_heads"));
  hv_ = hv.value_or(h_);
  ASSIGN_OR_RETURN(double expand_v, f.Float("expand_v", 2.0));
  ASSIGN_OR_RETURN(bool use_gate, f.Bool("use_gate", true));
  ASSIGN_OR_RETURN(use_conv_, f.Bool("use_short_conv", true));
  ASSIGN_OR_RETURN(allow_neg_eigval_, f.Bool("allow_neg_eigval", false));
  ASSIGN_OR_RETURN(conv_size_, f.Int("conv_size", 4));
  dv_ = static_cast<int64_t>(dk_ * expand_v);
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
  ASSIGN_OR_RETURN(q_proj_, load("q_proj.weight", {key_dim_, d_}));
  ASSIGN_OR_RETURN(k_proj_, load("k_proj.weight", {key_dim_, d_}));
  ASSIGN_OR_RETURN(v_proj_, load("v_proj.weight", {value_dim_, d_}));
  ASSIGN_OR_RETURN(a_proj_, load("a_proj.weight", {hv_, d_}));
  ASSIGN_OR_RETURN(b_proj_, load("b_proj.weight", {hv_, d_}));
  ASSIGN_OR_RETURN(a_log_, load("A_log", {hv_}));
  ASSIGN_OR_RETURN(dt_bias_, load("dt_bias", {hv_}));
  if (use_conv_) {
    ASSIGN_OR_RETURN(q_conv_, load("q_conv1d.weight", {key_dim_, conv_size_}));
    ASSIGN_OR_RETURN(k_conv_, load("k_conv1d.weight", {key_dim_, conv_size_}));
    ASSIGN_OR_RETURN(v_conv_, load("v_conv1d.weight", {value_dim_, conv_size_}));
  }
  ASSIGN_OR_RETURN(o_proj_, load("o_proj.weight", {d_, value_dim_}));
  ASSIGN_OR_RETURN(norm_, OutputNormGate::Load(store, layer, "o_norm", true, use_gate, dv_,
                                               value_dim_, d_, config.norm_eps, Activation::kSilu));
  return absl::OkStatus();
}

absl::Status GatedDeltaNetMixer::Forward(const TensorView& x,
                                         absl::Span<const MixerSegment> segments,
                                         const MixerOptions& options, const TensorView& out) {
  const int64_t t = x.dim(0);
  ASSIGN_OR_RETURN(Tensor q, Scratch(t, key_dim_));
  ASSIGN_OR_RETURN(Tensor k, Scratch(t, key_dim_));
  ASSIGN_OR_RETURN(Tensor v, Scratch(t, value_dim_));
  ASSIGN_OR_RETURN(Tensor a, Scratch(t, hv_));
  ASSIGN_OR_RETURN(Tensor b, Scratch(t, hv_));
  ASSIGN_OR_RETURN(Tensor o, Scratch(t, value_dim_));
  RETURN_IF_ERROR(Linear(x, a_proj_.view(), a.view()));
  RETURN_IF_ERROR(Linear(x, b_proj_.view(), b.view()));
  const int64_t recurrent = hv_ * dk_ * dv_;
  struct Proj {
    const Tensor& w;
    const Tensor& conv;
    Tensor& y;
    int64_t conv_offset;
  };
  for (const Proj& p : {Proj{q_proj_, q_conv_, q, recurrent},
                        Proj{k_proj_, k_conv_, k, recurrent + key_dim_ * conv_size_},
                        Proj{v_proj_, v_conv_, v, recurrent + 2 * key_dim_ * conv_size_}}) {
    RETURN_IF_ERROR(ProjectConv(x, p.w, use_conv_ ? &p.conv : nullptr, segments, p.conv_offset,
                                Activation::kSilu, p.y));
  }
  L2NormalizeRows(q.data<float>(), t * h_, dk_, dk_);
  L2NormalizeRows(k.data<float>(), t * h_, dk_, dk_);
  // Gates in place: a ← g (log-decay), b ← β.
  float* ga = a.data<float>();
  float* gb = b.data<float>();
  for (int64_t i = 0; i < t; ++i) {
    for (int64_t h = 0; h < hv_; ++h) {
      const int64_t j = i * hv_ + h;
      ga[j] = -std::exp(a_log_.data<float>()[h]) * Softplus(ga[j] + dt_bias_.data<float>()[h]);
      gb[j] = Sigmoid(gb[j]) * (allow_neg_eigval_ ? 2.0f : 1.0f);
    }
  }
  const RecurrenceSpec spec{static_cast<int>(dk_), static_cast<int>(dv_), DecayKind::kScalar,
                            /*delta_rule=*/true,   /*normalize=*/false,   QueryScale(dk_)};
  const int64_t group = hv_ / h_;
  const PackedHeads qh{q.data<float>(), key_dim_, dk_}, kh{k.data<float>(), key_dim_, dk_};
  const PackedHeads vh{v.data<float>(), value_dim_, dv_}, oh{o.data<float>(), value_dim_, dv_};
  const PackedHeads gates{ga, hv_, 1}, betas{gb, hv_, 1};
  ForEachSegmentHead(segments.size(), static_cast<int>(hv_), RecurrenceWork(t, hv_, dk_, dv_),
                     [&](int64_t s, int hv) {
                       const MixerSegment& seg = segments[s];
                       const int64_t r = seg.row_begin;
                       HeadSequence hs =
                           PackedHeadSequence(qh, kh, vh, oh, r, hv / group, hv / group, hv, hv);
                       hs.g = gates.At(r, hv);
                       hs.g_stride = gates.width;
                       hs.beta = betas.At(r, hv);
                       hs.beta_stride = betas.width;
                       hs.state = seg.state + hv * dk_ * dv_;
                       RunRecurrence(spec, hs, seg.num_tokens, options);
                     });
  RETURN_IF_ERROR(norm_->Apply(x, o.view()));
  return Linear(o.view(), o_proj_.view(), out);
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
