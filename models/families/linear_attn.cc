// linear_attn (fla LinearAttention, MODELS.md §5): per head, feature maps φ on q and k
// (Hadamard "elementwise_product", hedgehog, t2r, dpfp, elu+1, relu, identity), optional
// q/(Σq+1e-4) and k/(Σk+1e-4), then S ← S + φk vᵀ, o = Sᵀ(φq·F^-½) (optionally divided by
// F^-½·φq·z + 1e-10 with z ← z + φk), then RMSNorm(o) and o W_o. No conv.
// State block: recurrent [H, F, dv], then (normaliser) z [H, F].
#include <algorithm>
#include <cmath>
#include <optional>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "kernels/feature_map.h"
#include "kernels/gemm.h"
#include "kernels/norm.h"
#include "kernels/status_macros.h"
#include "models/families/families.h"

namespace linfer {
namespace {

enum class MapKind { kHadamard, kHedgehog, kT2R, kDpfp, kEluPlusOne, kRelu, kIdentity };

struct LearnedMap {  // the linear layers of one learned feature map (weights [dk, dk])
  Tensor w1, b1, w2, b2;
};

class LinearAttnMixer : public TokenMixer {
 public:
  absl::Status Init(const ModelConfig& config, int layer, WeightStore& store);
  int64_t state_floats() const override { return h_ * f_ * dv_ + (normalize_ ? h_ * f_ : 0); }
  absl::Status Forward(const TensorView& x, absl::Span<const MixerSegment> segments,
                       const MixerOptions& options, const TensorView& out) override;

 private:
  absl::Status LoadMap(WeightStore& store, int layer, absl::string_view which, LearnedMap& m);
  // φ over rows×heads vectors of dk floats in `in` [rows, heads·dk] → out [rows, heads·F].
  absl::StatusOr<Tensor> Map(const Tensor& in, int64_t heads, const LearnedMap& m) const;

  int64_t d_ = 0, h_ = 0, groups_ = 1, dk_ = 0, dv_ = 0, f_ = 0, key_dim_ = 0, value_dim_ = 0;
  MapKind kind_ = MapKind::kHadamard;
  bool norm_q_ = false, norm_k_ = false, normalize_ = false;
  double eps_ = 1e-6;
  Tensor q_proj_, k_proj_, v_proj_, norm_w_, o_proj_;
  LearnedMap map_q_, map_k_;
};

absl::StatusOr<MapKind> ParseMap(absl::string_view name) {
  if (name == "elementwise_product" || name == "hadamard") return MapKind::kHadamard;
  if (name == "hedgehog") return MapKind::kHedgehog;
  if (name == "t2r") return MapKind::kT2R;
  if (name == "dpfp") return MapKind::kDpfp;
  if (name == "elu") return MapKind::kEluPlusOne;
  if (name == "relu") return MapKind::kRelu;
  if (name == "identity") return MapKind::kIdentity;
  return absl::InvalidArgumentError(
      absl::StrCat("config.json: unsupported linear_attn feature_map '", name,
                   "' (supported: elementwise_product, hedgehog, t2r, dpfp, elu, relu, identity)"));
}

absl::Status LinearAttnMixer::LoadMap(WeightStore& store, int layer, absl::string_view which,
                                      LearnedMap& m) {
  const std::string p = absl::StrCat("feature_map_", which, ".");
  auto load = [&](const std::string& name, Shape shape) {
    return store.Load(AttnName(layer, name), shape);
  };
  if (kind_ == MapKind::kHadamard) {
    ASSIGN_OR_RETURN(m.w1, load(p + "layer1.weight", {dk_, dk_}));
    ASSIGN_OR_RETURN(m.b1, load(p + "layer1.bias", {dk_}));
    ASSIGN_OR_RETURN(m.w2, load(p + "layer2.weight", {dk_, dk_}));
    ASSIGN_OR_RETURN(m.b2, load(p + "layer2.bias", {dk_}));
  } else if (kind_ == MapKind::kHedgehog || kind_ == MapKind::kT2R) {
    ASSIGN_OR_RETURN(m.w1, load(p + "layer.weight", {dk_, dk_}));
    if (kind_ == MapKind::kHedgehog) {
      ASSIGN_OR_RETURN(m.b1, load(p + "layer.bias", {dk_}));
    }
  }
  return absl::OkStatus();
}

absl::Status LinearAttnMixer::Init(const ModelConfig& config, int layer, WeightStore& store) {
  ConfigFields f(config.raw);
  d_ = config.hidden_size;
  eps_ = config.norm_eps;
  ASSIGN_OR_RETURN(double expand_k, f.Float("expand_k", 1.0));
  ASSIGN_OR_RETURN(double expand_v, f.Float("expand_v", 1.0));
  ASSIGN_OR_RETURN(h_, f.Int("num_heads", 4));
  ASSIGN_OR_RETURN(int64_t kv_heads, f.Int("num_kv_heads", h_));
  ASSIGN_OR_RETURN(std::string fmap, f.String("feature_map", "elementwise_product"));
  ASSIGN_OR_RETURN(bool tie, f.Bool("tie_feature_map_qk", false));
  ASSIGN_OR_RETURN(norm_q_, f.Bool("norm_q", false));
  ASSIGN_OR_RETURN(norm_k_, f.Bool("norm_k", false));
  ASSIGN_OR_RETURN(normalize_, f.Bool("norm_feature_map", false));
  ASSIGN_OR_RETURN(bool affine, f.Bool("elementwise_affine", true));
  ASSIGN_OR_RETURN(kind_, ParseMap(fmap));
  key_dim_ = static_cast<int64_t>(d_ * expand_k);
  value_dim_ = static_cast<int64_t>(d_ * expand_v);
  if (h_ <= 0 || kv_heads <= 0 || h_ % kv_heads != 0 || key_dim_ <= 0 || value_dim_ <= 0 ||
      key_dim_ % h_ != 0 || value_dim_ % h_ != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.json: linear_attn needs key_dim (", key_dim_, ") and value_dim (", value_dim_,
        ") divisible by num_heads (", h_, "), itself a multiple of num_kv_heads (", kv_heads, ")"));
  }
  groups_ = h_ / kv_heads;
  dk_ = key_dim_ / h_;
  dv_ = value_dim_ / h_;
  f_ = kind_ == MapKind::kHedgehog ? 2 * dk_ : kind_ == MapKind::kDpfp ? 8 * dk_ : dk_;
  auto load = [&](absl::string_view name, Shape shape) {
    return store.Load(AttnName(layer, name), shape);
  };
  ASSIGN_OR_RETURN(q_proj_, load("q_proj.weight", {key_dim_, d_}));
  ASSIGN_OR_RETURN(k_proj_, load("k_proj.weight", {key_dim_ / groups_, d_}));
  ASSIGN_OR_RETURN(v_proj_, load("v_proj.weight", {value_dim_ / groups_, d_}));
  if (affine) {
    ASSIGN_OR_RETURN(norm_w_, load("norm.weight", {dv_}));
  }
  ASSIGN_OR_RETURN(o_proj_, load("o_proj.weight", {d_, value_dim_}));
  // A tied map is one module: its checkpoint key may be saved under either name.
  const bool q_present = store.Has(AttnName(layer, "feature_map_q.layer.weight")) ||
                         store.Has(AttnName(layer, "feature_map_q.layer1.weight"));
  RETURN_IF_ERROR(LoadMap(store, layer, tie && !q_present ? "k" : "q", map_q_));
  RETURN_IF_ERROR(LoadMap(store, layer, tie && q_present ? "q" : "k", map_k_));
  return absl::OkStatus();
}

absl::StatusOr<Tensor> LinearAttnMixer::Map(const Tensor& in, int64_t heads,
                                            const LearnedMap& m) const {
  const int64_t rows = in.dim(0) * heads;
  TensorView flat(in.data<float>(), DType::kF32, {rows, dk_});
  ASSIGN_OR_RETURN(Tensor out, Scratch(in.dim(0), heads * f_));
  float* o = out.data<float>();
  switch (kind_) {
    case MapKind::kHadamard: {
      ASSIGN_OR_RETURN(Tensor a, Scratch(rows, dk_));
      RETURN_IF_ERROR(Linear(flat, m.w1.view(), a.view(), &m.b1.view()));
      RETURN_IF_ERROR(
          Linear(flat, m.w2.view(), TensorView(o, DType::kF32, {rows, dk_}), &m.b2.view()));
      for (int64_t i = 0; i < rows * dk_; ++i) o[i] *= a.data<float>()[i];
      break;
    }
    case MapKind::kHedgehog: {
      ASSIGN_OR_RETURN(Tensor z, Scratch(rows, dk_));
      RETURN_IF_ERROR(Linear(flat, m.w1.view(), z.view(), &m.b1.view()));
      for (int64_t r = 0; r < rows; ++r) {
        HedgehogFeatureMap(z.data<float>() + r * dk_, static_cast<int>(dk_), o + r * f_);
      }
      break;
    }
    case MapKind::kT2R:
      RETURN_IF_ERROR(Linear(flat, m.w1.view(), TensorView(o, DType::kF32, {rows, dk_})));
      ActivateInPlace(Activation::kRelu, o, rows * dk_);
      break;
    case MapKind::kDpfp:
      for (int64_t r = 0; r < rows; ++r) {
        DpfpFeatureMap(flat.data<float>() + r * dk_, static_cast<int>(dk_), o + r * f_);
      }
      break;
    case MapKind::kEluPlusOne:
    case MapKind::kRelu:
    case MapKind::kIdentity:
      std::copy_n(flat.data<float>(), rows * dk_, o);
      ActivateInPlace(kind_ == MapKind::kRelu         ? Activation::kRelu
                      : kind_ == MapKind::kEluPlusOne ? Activation::kEluPlusOne
                                                      : Activation::kIdentity,
                      o, rows * dk_);
      break;
  }
  return out;
}

absl::Status LinearAttnMixer::Forward(const TensorView& x, absl::Span<const MixerSegment> segments,
                                      const MixerOptions& options, const TensorView& out) {
  const int64_t t = x.dim(0);
  const int64_t kv_heads = h_ / groups_;
  ASSIGN_OR_RETURN(Tensor q_raw, Scratch(t, key_dim_));
  ASSIGN_OR_RETURN(Tensor k_raw, Scratch(t, key_dim_ / groups_));
  ASSIGN_OR_RETURN(Tensor v, Scratch(t, value_dim_ / groups_));
  ASSIGN_OR_RETURN(Tensor o, Scratch(t, value_dim_));
  RETURN_IF_ERROR(Linear(x, q_proj_.view(), q_raw.view()));
  RETURN_IF_ERROR(Linear(x, k_proj_.view(), k_raw.view()));
  RETURN_IF_ERROR(Linear(x, v_proj_.view(), v.view()));
  ASSIGN_OR_RETURN(Tensor q, Map(q_raw, h_, map_q_));
  ASSIGN_OR_RETURN(Tensor k, Map(k_raw, kv_heads, map_k_));
  for (auto [m, heads, on] : {std::tuple{&q, h_, norm_q_}, std::tuple{&k, kv_heads, norm_k_}}) {
    if (!on) continue;
    float* p = m->data<float>();
    for (int64_t r = 0; r < t * heads; ++r) {
      float s = 0.0f;
      for (int64_t j = 0; j < f_; ++j) s += p[r * f_ + j];
      for (int64_t j = 0; j < f_; ++j) p[r * f_ + j] /= s + 1e-4f;
    }
  }
  const RecurrenceSpec spec{static_cast<int>(f_), static_cast<int>(dv_),
                            DecayKind::kNone,
                            /*delta_rule=*/false, normalize_,
                            QueryScale(f_)};
  const int64_t kv_value_dim = value_dim_ / groups_;
  const PackedHeads qh{q.data<float>(), h_ * f_, f_}, kh{k.data<float>(), kv_heads * f_, f_};
  const PackedHeads vh{v.data<float>(), kv_value_dim, dv_}, oh{o.data<float>(), value_dim_, dv_};
  ForEachSegmentHead(
      segments.size(), static_cast<int>(h_), RecurrenceWork(t, h_, f_, dv_), [&](int64_t s, int h) {
        const MixerSegment& seg = segments[s];
        const int64_t kvh = h / groups_;
        HeadSequence hs = PackedHeadSequence(qh, kh, vh, oh, seg.row_begin, h, kvh, kvh, h);
        hs.state = seg.state + h * f_ * dv_;
        if (normalize_) hs.z = seg.state + h_ * f_ * dv_ + h * f_;
        RunRecurrence(spec, hs, seg.num_tokens, options);
      });
  RETURN_IF_ERROR(RmsNorm(o.view(), norm_w_.view(), static_cast<float>(eps_), dv_, o.view()));
  return Linear(o.view(), o_proj_.view(), out);
}

}  // namespace

absl::StatusOr<std::unique_ptr<TokenMixer>> CreateLinearAttnMixer(const ModelConfig& config,
                                                                  int layer, WeightStore& store) {
  auto m = std::make_unique<LinearAttnMixer>();
  RETURN_IF_ERROR(m->Init(config, layer, store));
  return m;
}

}  // namespace linfer
