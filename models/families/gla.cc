// gla (fla GatedLinearAttention, MODELS.md §3) and retnet (fla MultiScaleRetention, §4): both
// project q [H·dk], k [H_kv·dk], v [H_kv·dv], query head h uses kv head h / (H/H_kv), and end in
// RMSNorm(o) ⊙ act(x W_g) then o W_o. They differ in the decay:
//   gla:    S ← diag(e^{gk}) S + k vᵀ,  gk = max(logsigmoid(x W0ᵀ W1ᵀ + b1)/16, clamp_min)
//   retnet: S ← γ_h S + k vᵀ,  γ_h = 1 − 2^{−5−h}, with RoPE on q and k (absolute positions)
// and o = Sᵀ(q·dk^-½). State block: recurrent [H, dk, dv], then (gla with short conv) conv states
// q [H·dk, W], k [H_kv·dk, W], v [H_kv·dv, W].
#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "kernels/gemm.h"
#include "kernels/rope.h"
#include "kernels/status_macros.h"
#include "models/families/families.h"

namespace linfer {
namespace {

constexpr int64_t kGateLowRank = 16;
constexpr float kGateNormalizer = 16.0f;

class GlaMixer : public TokenMixer {
 public:
  explicit GlaMixer(bool retnet) : retnet_(retnet) {}
  absl::Status Init(const ModelConfig& config, int layer, WeightStore& store);
  int64_t state_floats() const override {
    return h_ * dk_ * dv_ +
           (use_conv_ ? (key_dim_ + kv_key_dim() + kv_value_dim()) * conv_size_ : 0);
  }
  absl::Status Forward(const TensorView& x, absl::Span<const MixerSegment> segments,
                       const MixerOptions& options, const TensorView& out) override;

 private:
  int64_t kv_key_dim() const { return key_dim_ / groups_; }
  int64_t kv_value_dim() const { return value_dim_ / groups_; }

  bool retnet_;
  int64_t d_ = 0, h_ = 0, groups_ = 1, dk_ = 0, dv_ = 0, key_dim_ = 0, value_dim_ = 0;
  int64_t conv_size_ = 0;
  bool use_conv_ = false;
  std::optional<double> clamp_min_;
  Activation feature_map_ = Activation::kIdentity;
  Tensor q_proj_, k_proj_, v_proj_, gk0_, gk1_, gk1_bias_, q_conv_, k_conv_, v_conv_, o_proj_;
  std::vector<float> retention_;  // retnet: log-decay log(1 − 2^(−5−h)) per head
  std::optional<OutputNormGate> norm_;
};

absl::Status GlaMixer::Init(const ModelConfig& config, int layer, WeightStore& store) {
  ConfigFields f(config.raw);
  d_ = config.hidden_size;
  ASSIGN_OR_RETURN(double expand_k, f.Float("expand_k", retnet_ ? 1.0 : 0.5));
  ASSIGN_OR_RETURN(double expand_v, f.Float("expand_v", retnet_ ? 2.0 : 1.0));
  ASSIGN_OR_RETURN(h_, f.Int("num_heads", retnet_ ? 8 : 4));
  ASSIGN_OR_RETURN(int64_t kv_heads, f.Int("num_kv_heads", h_));
  ASSIGN_OR_RETURN(std::optional<std::string> fmap, f.OptionalString("feature_map"));
  ASSIGN_OR_RETURN(bool use_output_gate, f.Bool("use_output_gate", true));
  ASSIGN_OR_RETURN(bool affine, f.Bool("elementwise_affine", true));
  ASSIGN_OR_RETURN(bool fuse_norm, f.Bool("fuse_norm", true));
  if (!retnet_) {  // retnet's config has use_short_conv, but its layer never receives it.
    ASSIGN_OR_RETURN(use_conv_, f.Bool("use_short_conv", false));
    ASSIGN_OR_RETURN(conv_size_, f.Int("conv_size", 4));
    ASSIGN_OR_RETURN(clamp_min_, f.OptionalFloat("clamp_min"));
  }
  key_dim_ = static_cast<int64_t>(d_ * expand_k);
  value_dim_ = static_cast<int64_t>(d_ * expand_v);
  if (h_ <= 0 || kv_heads <= 0 || h_ % kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat("config.json: num_heads (", h_,
                                                   ") must be a positive multiple of "
                                                   "num_kv_heads (",
                                                   kv_heads, ")"));
  }
  groups_ = h_ / kv_heads;
  if (key_dim_ <= 0 || value_dim_ <= 0 || key_dim_ % h_ != 0 || value_dim_ % h_ != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.json: ", config.model_type, " key_dim (", key_dim_, ") and value_dim (", value_dim_,
        ") must be positive multiples of num_heads (", h_, ")"));
  }
  dk_ = key_dim_ / h_;
  dv_ = value_dim_ / h_;
  if (retnet_ && (dk_ > 256 || dk_ % 2 != 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: retnet head key dim must be even and ≤ 256, got ", dk_));
  }
  if (use_conv_ && conv_size_ <= 0) {
    return absl::InvalidArgumentError("config.json: conv_size must be positive");
  }
  if (fmap) {
    ASSIGN_OR_RETURN(feature_map_, ParseActivation(*fmap));
  }
  auto load = [&](absl::string_view name, Shape shape) {
    return store.Load(AttnName(layer, name), shape);
  };
  ASSIGN_OR_RETURN(q_proj_, load("q_proj.weight", {key_dim_, d_}));
  ASSIGN_OR_RETURN(k_proj_, load("k_proj.weight", {kv_key_dim(), d_}));
  ASSIGN_OR_RETURN(v_proj_, load("v_proj.weight", {kv_value_dim(), d_}));
  for (int64_t h = 0; retnet_ && h < h_; ++h) {
    retention_.push_back(static_cast<float>(std::log1p(-std::exp2(-5.0 - static_cast<double>(h)))));
  }
  if (!retnet_) {
    ASSIGN_OR_RETURN(gk0_, load("gk_proj.0.weight", {kGateLowRank, d_}));
    ASSIGN_OR_RETURN(gk1_, load("gk_proj.1.weight", {kv_key_dim(), kGateLowRank}));
    ASSIGN_OR_RETURN(gk1_bias_, load("gk_proj.1.bias", {kv_key_dim()}));
  }
  if (use_conv_) {
    ASSIGN_OR_RETURN(q_conv_, load("q_conv1d.weight", {key_dim_, conv_size_}));
    ASSIGN_OR_RETURN(k_conv_, load("k_conv1d.weight", {kv_key_dim(), conv_size_}));
    ASSIGN_OR_RETURN(v_conv_, load("v_conv1d.weight", {kv_value_dim(), conv_size_}));
  }
  ASSIGN_OR_RETURN(o_proj_, load("o_proj.weight", {d_, value_dim_}));
  ASSIGN_OR_RETURN(Activation gate_act, ParseActivation(config.hidden_act));
  const bool fused = config.hidden_act == "swish" && fuse_norm && use_output_gate;
  ASSIGN_OR_RETURN(
      norm_, OutputNormGate::Load(store, layer, fused ? "g_norm_swish_gate" : "g_norm", affine,
                                  use_output_gate, dv_, value_dim_, d_, config.norm_eps, gate_act));
  return absl::OkStatus();
}

absl::Status GlaMixer::Forward(const TensorView& x, absl::Span<const MixerSegment> segments,
                               const MixerOptions& options, const TensorView& out) {
  const int64_t t = x.dim(0);
  ASSIGN_OR_RETURN(Tensor q, Scratch(t, key_dim_));
  ASSIGN_OR_RETURN(Tensor k, Scratch(t, kv_key_dim()));
  ASSIGN_OR_RETURN(Tensor v, Scratch(t, kv_value_dim()));
  ASSIGN_OR_RETURN(Tensor o, Scratch(t, value_dim_));
  const int64_t recurrent = h_ * dk_ * dv_;
  struct Proj {
    const Tensor& w;
    const Tensor& conv;
    Tensor& y;
    int64_t conv_offset;
  };
  for (const Proj& p :
       {Proj{q_proj_, q_conv_, q, recurrent},
        Proj{k_proj_, k_conv_, k, recurrent + key_dim_ * conv_size_},
        Proj{v_proj_, v_conv_, v, recurrent + (key_dim_ + kv_key_dim()) * conv_size_}}) {
    RETURN_IF_ERROR(ProjectConv(x, p.w, use_conv_ ? &p.conv : nullptr, segments, p.conv_offset,
                                use_conv_ ? Activation::kSilu : Activation::kIdentity, p.y));
  }
  Tensor gk;  // [T, kv_key_dim] log-decay (gla)
  if (!retnet_) {
    ASSIGN_OR_RETURN(Tensor low, Scratch(t, kGateLowRank));
    ASSIGN_OR_RETURN(gk, Scratch(t, kv_key_dim()));
    RETURN_IF_ERROR(Linear(x, gk0_.view(), low.view()));
    RETURN_IF_ERROR(Linear(low.view(), gk1_.view(), gk.view(), &gk1_bias_.view()));
    float* g = gk.data<float>();
    for (int64_t i = 0; i < gk.numel(); ++i) {
      g[i] = LogSigmoid(g[i]) / kGateNormalizer;
      if (clamp_min_) g[i] = std::max(g[i], static_cast<float>(*clamp_min_));
    }
  }
  ActivateInPlace(feature_map_, q.data<float>(), q.numel());
  ActivateInPlace(feature_map_, k.data<float>(), k.numel());
  if (retnet_) {
    for (const MixerSegment& seg : segments) {
      ApplyRope(q.data<float>() + seg.row_begin * key_dim_, seg.num_tokens, key_dim_,
                static_cast<int>(h_), static_cast<int>(dk_), seg.position);
      ApplyRope(k.data<float>() + seg.row_begin * kv_key_dim(), seg.num_tokens, kv_key_dim(),
                static_cast<int>(h_ / groups_), static_cast<int>(dk_), seg.position);
    }
  }
  const RecurrenceSpec spec{static_cast<int>(dk_),
                            static_cast<int>(dv_),
                            retnet_ ? DecayKind::kScalar : DecayKind::kVector,
                            /*delta_rule=*/false,
                            /*normalize=*/false,
                            QueryScale(dk_)};
  const PackedHeads qh{q.data<float>(), key_dim_, dk_}, kh{k.data<float>(), kv_key_dim(), dk_};
  const PackedHeads vh{v.data<float>(), kv_value_dim(), dv_};
  const PackedHeads oh{o.data<float>(), value_dim_, dv_};
  const PackedHeads gates{gk.data<float>(), kv_key_dim(), dk_};  // GLA: per key channel
  ForEachSegmentHead(segments.size(), static_cast<int>(h_), RecurrenceWork(t, h_, dk_, dv_),
                     [&](int64_t s, int h) {
                       const MixerSegment& seg = segments[s];
                       const int64_t r = seg.row_begin;
                       const int64_t kvh = h / groups_;
                       HeadSequence hs = PackedHeadSequence(qh, kh, vh, oh, r, h, kvh, kvh, h);
                       if (retnet_) {
                         hs.g = &retention_[h];
                         hs.g_stride = 0;
                       } else {
                         hs.g = gates.At(r, kvh);
                         hs.g_stride = gates.width;
                       }
                       hs.state = seg.state + h * dk_ * dv_;
                       RunRecurrence(spec, hs, seg.num_tokens, options);
                     });
  RETURN_IF_ERROR(norm_->Apply(x, o.view()));
  return Linear(o.view(), o_proj_.view(), out);
}

}  // namespace

absl::StatusOr<std::unique_ptr<TokenMixer>> CreateGlaMixer(const ModelConfig& config, int layer,
                                                           WeightStore& store) {
  auto m = std::make_unique<GlaMixer>(/*retnet=*/false);
  RETURN_IF_ERROR(m->Init(config, layer, store));
  return m;
}

absl::StatusOr<std::unique_ptr<TokenMixer>> CreateRetNetMixer(const ModelConfig& config, int layer,
                                                              WeightStore& store) {
  auto m = std::make_unique<GlaMixer>(/*retnet=*/true);
  RETURN_IF_ERROR(m->Init(config, layer, store));
  return m;
}

}  // namespace linfer
