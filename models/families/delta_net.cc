// delta_net (fla DeltaNet, MODELS.md §2): per head,
//   q,k = act(conv(x W)) (silu only when qk_activation is silu), v = silu(conv(x W_v));
//   q,k ← relu / elu+1 / identity per qk_activation; l2 or sum normalisation;
//   β = σ(x W_b)(×2) or 1;  S ← S + β k (v − Sᵀk)ᵀ;  o = Sᵀ(q·dk^-½);  o_norm (gated if use_gate)
// State block: recurrent [H, dk, dv], then conv states q [key_dim, W], k [key_dim, W], v
// [value_dim, W].
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

class DeltaNetMixer : public TokenMixer {
 public:
  absl::Status Init(const ModelConfig& config, int layer, WeightStore& store);
  int64_t state_floats() const override {
    return h_ * dk_ * dv_ + (use_conv_ ? (2 * key_dim_ + value_dim_) * conv_size_ : 0);
  }
  absl::Status Forward(const TensorView& x, absl::Span<const MixerSegment> segments,
                       const MixerOptions& options, const TensorView& out) override;

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
  ASSIGN_OR_RETURN(h_, f.Int("num_heads", 16));
  ASSIGN_OR_RETURN(bool use_gate, f.Bool("use_gate", false));
  ASSIGN_OR_RETURN(use_conv_, f.Bool("use_short_conv", true));
  ASSIGN_OR_RETURN(use_beta_, f.Bool("use_beta", true));
  ASSIGN_OR_RETURN(allow_neg_eigval_, f.Bool("allow_neg_eigval", false));
  ASSIGN_OR_RETURN(conv_size_, f.Int("conv_size", 4));
  ASSIGN_OR_RETURN(std::string qk_norm, f.String("qk_norm", "l2"));
  ASSIGN_OR_RETURN(qk_activation_, f.String("qk_activation", "silu"));
  key_dim_ = static_cast<int64_t>(d_ * expand_k);
  value_dim_ = static_cast<int64_t>(d_ * expand_v);
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
  ASSIGN_OR_RETURN(q_proj_, load("q_proj.weight", {key_dim_, d_}));
  ASSIGN_OR_RETURN(k_proj_, load("k_proj.weight", {key_dim_, d_}));
  ASSIGN_OR_RETURN(v_proj_, load("v_proj.weight", {value_dim_, d_}));
  if (use_beta_) {
    ASSIGN_OR_RETURN(b_proj_, load("b_proj.weight", {h_, d_}));
  }
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

absl::Status DeltaNetMixer::Forward(const TensorView& x, absl::Span<const MixerSegment> segments,
                                    const MixerOptions& options, const TensorView& out) {
  const int64_t t = x.dim(0);
  ASSIGN_OR_RETURN(Tensor q, Scratch(t, key_dim_));
  ASSIGN_OR_RETURN(Tensor k, Scratch(t, key_dim_));
  ASSIGN_OR_RETURN(Tensor v, Scratch(t, value_dim_));
  ASSIGN_OR_RETURN(Tensor beta, Scratch(t, h_));
  ASSIGN_OR_RETURN(Tensor o, Scratch(t, value_dim_));
  const Activation qk_act = qk_activation_ == "silu" ? Activation::kSilu : Activation::kIdentity;
  const int64_t recurrent = h_ * dk_ * dv_;
  struct Proj {
    const Tensor& w;
    const Tensor& conv;
    Tensor& y;
    int64_t conv_offset;
    Activation act;
  };
  for (const Proj& p :
       {Proj{q_proj_, q_conv_, q, recurrent, qk_act},
        Proj{k_proj_, k_conv_, k, recurrent + key_dim_ * conv_size_, qk_act},
        Proj{v_proj_, v_conv_, v, recurrent + 2 * key_dim_ * conv_size_, Activation::kSilu}}) {
    RETURN_IF_ERROR(
        ProjectConv(x, p.w, use_conv_ ? &p.conv : nullptr, segments, p.conv_offset, p.act, p.y));
  }
  const Activation extra = qk_activation_ == "relu"  ? Activation::kRelu
                           : qk_activation_ == "elu" ? Activation::kEluPlusOne
                                                     : Activation::kIdentity;
  for (Tensor* m : {&q, &k}) {
    float* p = m->data<float>();
    ActivateInPlace(extra, p, m->numel());
    if (sum_norm_) {
      for (int64_t r = 0; r < t * h_; ++r) {
        float s = 0.0f;
        for (int64_t j = 0; j < dk_; ++j) s += p[r * dk_ + j];
        for (int64_t j = 0; j < dk_; ++j) p[r * dk_ + j] /= s;
      }
    } else {
      L2NormalizeRows(p, t * h_, dk_, dk_);
    }
  }
  float* bp = beta.data<float>();
  if (use_beta_) {
    RETURN_IF_ERROR(Linear(x, b_proj_.view(), beta.view()));
    for (int64_t i = 0; i < t * h_; ++i) bp[i] = Sigmoid(bp[i]) * (allow_neg_eigval_ ? 2.0f : 1.0f);
  } else {
    std::fill_n(bp, t * h_, 1.0f);
  }
  const RecurrenceSpec spec{static_cast<int>(dk_), static_cast<int>(dv_), DecayKind::kNone,
                            /*delta_rule=*/true,   /*normalize=*/false,   QueryScale(dk_)};
  const PackedHeads qh{q.data<float>(), key_dim_, dk_}, kh{k.data<float>(), key_dim_, dk_};
  const PackedHeads vh{v.data<float>(), value_dim_, dv_}, oh{o.data<float>(), value_dim_, dv_};
  const PackedHeads betas{bp, h_, 1};
  ForEachSegmentHead(segments.size(), static_cast<int>(h_), RecurrenceWork(t, h_, dk_, dv_),
                     [&](int64_t s, int h) {
                       const MixerSegment& seg = segments[s];
                       const int64_t r = seg.row_begin;
                       HeadSequence hs = PackedHeadSequence(qh, kh, vh, oh, r, h, h, h, h);
                       hs.beta = betas.At(r, h);
                       hs.beta_stride = betas.width;
                       hs.state = seg.state + h * dk_ * dv_;
                       RunRecurrence(spec, hs, seg.num_tokens, options);
                     });
  RETURN_IF_ERROR(norm_->Apply(x, o.view()));
  return Linear(o.view(), o_proj_.view(), out);
}

}  // namespace

absl::StatusOr<std::unique_ptr<TokenMixer>> CreateDeltaNetMixer(const ModelConfig& config,
                                                                int layer, WeightStore& store) {
  auto m = std::make_unique<DeltaNetMixer>();
  RETURN_IF_ERROR(m->Init(config, layer, store));
  return m;
}

}  // namespace linfer
