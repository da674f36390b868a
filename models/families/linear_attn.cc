// linear_attn (fla LinearAttention, MODELS.md §5): per head, feature maps φ on q and k
// (Hadamard "elementwise_product", hedgehog, t2r, dpfp, elu+1, relu, identity; Based's
// "taylor_exp" and ReBased's "rebased", MODELS.md §6 read as NOTES_families.md §8), optional
// q/(Σq+1e-4) and k/(Σk+1e-4), then S ← S + φk vᵀ, o = Sᵀ(φq·F^-½) (optionally divided by
// F^-½·φq·z + 1e-10 with z ← z + φk), then RMSNorm(o) and o W_o. No conv.
// State: recurrent [H, F, dv], and (normaliser) z [H, F].
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"
#include "kernels/feature_map.h"
#include "kernels/gemm.h"
#include "kernels/mamba2.h"
#include "kernels/norm.h"
#include "models/families/families.h"

namespace linfer {
namespace {

enum class MapKind {
  kHadamard,
  kHedgehog,
  kT2R,
  kDpfp,
  kEluPlusOne,
  kRelu,
  kIdentity,
  kTaylor,   // Based
  kRebased,  // ReBased: LayerNorm(x)·γ + β (or x·γ (+ β)), then the quadratic map
};

struct LearnedMap {  // the linear layers of one learned feature map (weights [dk, dk])
  Tensor w1, b1, w2, b2;
};

class LinearAttnMixer : public TokenMixer {
 public:
  absl::Status Init(const ModelConfig& config, int layer, WeightStore& store);
  std::vector<StateSpec> state_specs() const override;
  absl::Status Forward(const ExecContext& ctx, const TensorView& x, const Segments& segs,
                       absl::Span<const TensorView> states, const MixerOptions& options,
                       const TensorView& out) override;

 private:
  absl::Status LoadMap(WeightStore& store, int layer, absl::string_view which, LearnedMap& m);
  // φ over rows×heads vectors of dk floats in `in` [rows, heads·dk] (contiguous) → [rows,
  // heads·F] scratch.
  absl::StatusOr<TensorView> Map(const ExecContext& ctx, const TensorView& in, int64_t heads,
                                 const LearnedMap& m) const;

  int64_t d_ = 0, h_ = 0, groups_ = 1, dk_ = 0, dv_ = 0, f_ = 0, key_dim_ = 0, value_dim_ = 0;
  MapKind kind_ = MapKind::kHadamard;
  bool norm_q_ = false, norm_k_ = false, normalize_ = false;
  bool rebased_ln_ = true;  // ReBased's `normalize`: LayerNorm before γ, β
  double eps_ = 1e-6;
  Tensor q_proj_, k_proj_, v_proj_, norm_w_, o_proj_;
  Tensor gamma_, beta_;  // ReBased's feature_map.gamma / .beta [dk], shared by q and k
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
  if (name == "taylor_exp") return MapKind::kTaylor;
  if (name == "rebased") return MapKind::kRebased;
  return absl::InvalidArgumentError(absl::StrCat(
      "config.json: unsupported linear_attn feature_map '", name,
      "' (supported: elementwise_product, hedgehog, t2r, dpfp, elu, relu, identity, taylor_exp, "
      "rebased)"));
}

absl::Status LinearAttnMixer::LoadMap(WeightStore& store, int layer, absl::string_view which,
                                      LearnedMap& m) {
  const std::string p = absl::StrCat("feature_map_", which, ".");
  auto load = [&](const std::string& name, Shape shape) {
    return store.Load(AttnName(layer, name), shape);
  };
  auto matrix = [&](const std::string& name, Shape shape) {
    return store.LoadMatrix(AttnName(layer, name), shape);
  };
  if (kind_ == MapKind::kHadamard) {
    ASSIGN_OR_RETURN(m.w1, matrix(p + "layer1.weight", {dk_, dk_}));
    ASSIGN_OR_RETURN(m.b1, load(p + "layer1.bias", {dk_}));
    ASSIGN_OR_RETURN(m.w2, matrix(p + "layer2.weight", {dk_, dk_}));
    ASSIGN_OR_RETURN(m.b2, load(p + "layer2.bias", {dk_}));
  } else if (kind_ == MapKind::kHedgehog || kind_ == MapKind::kT2R) {
    ASSIGN_OR_RETURN(m.w1, matrix(p + "layer.weight", {dk_, dk_}));
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
  ASSIGN_OR_RETURN(h_, f.Size("num_heads", 4));
  ASSIGN_OR_RETURN(int64_t kv_heads, f.Size("num_kv_heads", h_));
  ASSIGN_OR_RETURN(std::string fmap, f.String("feature_map", "elementwise_product"));
  ASSIGN_OR_RETURN(bool tie, f.Bool("tie_feature_map_qk", false));
  ASSIGN_OR_RETURN(norm_q_, f.Bool("norm_q", false));
  ASSIGN_OR_RETURN(norm_k_, f.Bool("norm_k", false));
  ASSIGN_OR_RETURN(normalize_, f.Bool("norm_feature_map", false));
  ASSIGN_OR_RETURN(bool affine, f.Bool("elementwise_affine", true));
  ASSIGN_OR_RETURN(kind_, ParseMap(fmap));
  ASSIGN_OR_RETURN(key_dim_, ScaledSize("hidden_size · expand_k", d_, expand_k));
  ASSIGN_OR_RETURN(value_dim_, ScaledSize("hidden_size · expand_v", d_, expand_v));
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
  if (kind_ == MapKind::kTaylor || kind_ == MapKind::kRebased) {
    if (dk_ > 1024) {
      return absl::InvalidArgumentError(absl::StrCat("config.json: linear_attn ", fmap,
                                                     " needs a head key dim ≤ 1024, got ", dk_));
    }
    f_ = FeatureMapDim(
        kind_ == MapKind::kTaylor ? FeatureMapKind::kTaylor : FeatureMapKind::kQuadratic, dk_);
  }
  if (kind_ == MapKind::kRebased) {
    ASSIGN_OR_RETURN(bool use_gamma, f.Bool("use_gamma", true));
    ASSIGN_OR_RETURN(bool use_beta, f.Bool("use_beta", true));
    ASSIGN_OR_RETURN(rebased_ln_, f.Bool("normalize", true));
    if (!rebased_ln_ && !use_gamma) {
      return absl::InvalidArgumentError(
          "config.json: rebased with normalize=false needs use_gamma=true (as fla's "
          "RebasedFeatureMap)");
    }
    if (use_gamma) {
      ASSIGN_OR_RETURN(gamma_, store.Load(AttnName(layer, "feature_map.gamma"), {dk_}));
    }
    if (use_beta) {
      ASSIGN_OR_RETURN(beta_, store.Load(AttnName(layer, "feature_map.beta"), {dk_}));
    }
  }
  auto matrix = [&](absl::string_view name, Shape shape) {
    return store.LoadMatrix(AttnName(layer, name), shape);
  };
  ASSIGN_OR_RETURN(q_proj_, matrix("q_proj.weight", {key_dim_, d_}));
  ASSIGN_OR_RETURN(k_proj_, matrix("k_proj.weight", {key_dim_ / groups_, d_}));
  ASSIGN_OR_RETURN(v_proj_, matrix("v_proj.weight", {value_dim_ / groups_, d_}));
  if (affine) {
    ASSIGN_OR_RETURN(norm_w_, store.Load(AttnName(layer, "norm.weight"), {dv_}));
  }
  ASSIGN_OR_RETURN(o_proj_, matrix("o_proj.weight", {d_, value_dim_}));
  // A tied map is one module: its checkpoint key may be saved under either name.
  const bool q_present = store.Has(AttnName(layer, "feature_map_q.layer.weight")) ||
                         store.Has(AttnName(layer, "feature_map_q.layer1.weight"));
  RETURN_IF_ERROR(LoadMap(store, layer, tie && !q_present ? "k" : "q", map_q_));
  RETURN_IF_ERROR(LoadMap(store, layer, tie && q_present ? "q" : "k", map_k_));
  return absl::OkStatus();
}

absl::StatusOr<TensorView> LinearAttnMixer::Map(const ExecContext& ctx, const TensorView& in,
                                                int64_t heads, const LearnedMap& m) const {
  const int64_t rows = in.dim(0) * heads;
  const TensorView flat = in.Reshaped({rows, dk_});
  ASSIGN_OR_RETURN(TensorView out, Scratch(ctx, in.dim(0), heads * f_));
  const TensorView phi = out.Reshaped({rows, f_});
  switch (kind_) {
    case MapKind::kHadamard: {
      ASSIGN_OR_RETURN(TensorView a, Scratch(ctx, rows, dk_));
      RETURN_IF_ERROR(Linear(ctx, flat, m.w1.view(), a, &m.b1.view()));
      RETURN_IF_ERROR(Linear(ctx, flat, m.w2.view(), phi, &m.b2.view()));
      RETURN_IF_ERROR(Mul(ctx, phi, a, phi));
      break;
    }
    case MapKind::kHedgehog: {
      ASSIGN_OR_RETURN(TensorView z, Scratch(ctx, rows, dk_));
      RETURN_IF_ERROR(Linear(ctx, flat, m.w1.view(), z, &m.b1.view()));
      RETURN_IF_ERROR(FeatureMap(ctx, FeatureMapKind::kHedgehog, z, phi));
      break;
    }
    case MapKind::kT2R:
      RETURN_IF_ERROR(Linear(ctx, flat, m.w1.view(), phi));
      RETURN_IF_ERROR(Activate(ctx, Activation::kRelu, phi, phi));
      break;
    case MapKind::kDpfp:
      RETURN_IF_ERROR(FeatureMap(ctx, FeatureMapKind::kDpfp, flat, phi));
      break;
    case MapKind::kTaylor:
      RETURN_IF_ERROR(FeatureMap(ctx, FeatureMapKind::kTaylor, flat, phi));
      break;
    case MapKind::kRebased: {
      ASSIGN_OR_RETURN(TensorView n, Scratch(ctx, rows, dk_));
      if (rebased_ln_) {  // LayerNorm (eps 1e-5) with γ, β as its affine when present
        RETURN_IF_ERROR(LayerNorm(ctx, flat, gamma_.view(), beta_.view(), {1e-5f, dk_}, n));
      } else {
        RETURN_IF_ERROR(ScaleGroups(ctx, flat, gamma_.view(), /*accumulate=*/false, n));
        if (beta_.rank() > 0) {
          RETURN_IF_ERROR(BiasActivate(ctx, n, beta_.view(), Activation::kIdentity, n));
        }
      }
      RETURN_IF_ERROR(FeatureMap(ctx, FeatureMapKind::kQuadratic, n, phi));
      break;
    }
    case MapKind::kEluPlusOne:
    case MapKind::kRelu:
    case MapKind::kIdentity:
      RETURN_IF_ERROR(Activate(ctx,
                               kind_ == MapKind::kRelu         ? Activation::kRelu
                               : kind_ == MapKind::kEluPlusOne ? Activation::kEluPlusOne
                                                               : Activation::kIdentity,
                               flat, phi));
      break;
  }
  return out;
}

std::vector<StateSpec> LinearAttnMixer::state_specs() const {
  std::vector<StateSpec> specs = {{"recurrent", {h_, f_, dv_}}};
  if (normalize_) specs.push_back({"normalizer", {h_, f_}});
  return specs;
}

absl::Status LinearAttnMixer::Forward(const ExecContext& ctx, const TensorView& x,
                                      const Segments& segs, absl::Span<const TensorView> states,
                                      const MixerOptions& options, const TensorView& out) {
  const int64_t t = x.dim(0);
  const int64_t kv_heads = h_ / groups_;
  ASSIGN_OR_RETURN(TensorView q_raw, Scratch(ctx, t, key_dim_));
  ASSIGN_OR_RETURN(TensorView k_raw, Scratch(ctx, t, key_dim_ / groups_));
  ASSIGN_OR_RETURN(TensorView v, Scratch(ctx, t, value_dim_ / groups_));
  ASSIGN_OR_RETURN(TensorView o, Scratch(ctx, t, value_dim_));
  RETURN_IF_ERROR(Linear(ctx, x, q_proj_.view(), q_raw));
  RETURN_IF_ERROR(Linear(ctx, x, k_proj_.view(), k_raw));
  RETURN_IF_ERROR(Linear(ctx, x, v_proj_.view(), v));
  ASSIGN_OR_RETURN(TensorView q, Map(ctx, q_raw, h_, map_q_));
  ASSIGN_OR_RETURN(TensorView k, Map(ctx, k_raw, kv_heads, map_k_));
  if (norm_q_) RETURN_IF_ERROR(SumNormalize(ctx, q, f_, 1e-4f, q));
  if (norm_k_) RETURN_IF_ERROR(SumNormalize(ctx, k, f_, 1e-4f, k));
  const RecurrenceSpec spec{static_cast<int>(f_), static_cast<int>(dv_),
                            DecayKind::kNone,
                            /*delta_rule=*/false, normalize_,
                            QueryScale(f_)};
  RecurrenceInputs in;
  in.q = q;
  in.k = k;
  in.v = v;
  RETURN_IF_ERROR(Recurrence(ctx, spec, in, segs, states[0], normalize_ ? states[1] : TensorView(),
                             options, o));
  RETURN_IF_ERROR(RmsNorm(ctx, o, norm_w_.view(), {static_cast<float>(eps_), dv_}, o));
  return Linear(ctx, o, o_proj_.view(), out);
}

}  // namespace

absl::StatusOr<std::unique_ptr<TokenMixer>> CreateLinearAttnMixer(const ModelConfig& config,
                                                                  int layer, WeightStore& store) {
  auto m = std::make_unique<LinearAttnMixer>();
  RETURN_IF_ERROR(m->Init(config, layer, store));
  return m;
}

}  // namespace linfer
