// rwkv7 (fla RWKV-7 "Goose", MODELS.md §9, tests/models/reference/NOTES_families.md): the time
// mix, per token with δ = x_prev − x:
//   x_* = x + δ⊙μ_*;  r = x_r W_r;  w = −e^{−½}·σ(tanh(x_w W1) W2 + w0);  k = x_k W_k;
//   v = x_v W_v, lerped towards layer 0's v by σ((x_v V1) V2 + v0) (layers > 0);
//   a = σ((x_a A1) A2 + a0);  g = σ(x_g G1) G2;  kk = l2norm(k⊙k_k);  k ← k⊙(1 + (a−1)⊙k_a);
//   S ← diag(e^w) S − (kk⊙a)(kkᵀS) + k vᵀ;  o = Sᵀr;  o = GroupNorm(o) (eps head_dim·norm_eps);
//   o = (o + (Σ r⊙k⊙r_k)·v) ⊙ g;  out = o W_o
// and the channel mix (the block's feed-forward): out = W_value · relu(W_key (x + δ⊙μ_k))².
// State: time mix recurrent [H, hd, hv] + token shift [D]; channel mix token shift [D].
#include "kernels/rwkv7.h"

#include <cmath>
#include <memory>
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

constexpr float kDecayScale = -0.6065306597126334f;  // −e^{−½}: w = −e^{−½}·σ(·)

struct Lora {  // Linear(D, r, no bias) → act → Linear(r, out, bias?)
  Tensor down, up, bias;
  Activation act = Activation::kIdentity;
  absl::StatusOr<TensorView> Apply(const ExecContext& ctx, const TensorView& x, int64_t out) const {
    ASSIGN_OR_RETURN(TensorView mid, Scratch(ctx, x.dim(0), down.dim(0)));
    ASSIGN_OR_RETURN(TensorView y, Scratch(ctx, x.dim(0), out));
    RETURN_IF_ERROR(Linear(ctx, x, down.view(), mid));
    RETURN_IF_ERROR(Activate(ctx, act, mid, mid));
    RETURN_IF_ERROR(Linear(ctx, mid, up.view(), y, bias.rank() > 0 ? &bias.view() : nullptr));
    return y;
  }
};

// The config's rank (absent: RWKV7Config's default), or for an explicit null fla/layers/rwkv7.py's
// max(32, round(c·√D·(hd/64)/32)·32) (c = 2.5 decay and a, 1.7 v; the gate uses 5·√D with no
// head factor). Python rounds half to even, as nearbyint in the default rounding mode.
absl::StatusOr<int64_t> LoraRank(const ConfigFields& f, const nlohmann::json& raw,
                                 absl::string_view key, int64_t def, double c, double head_factor,
                                 int64_t d) {
  ASSIGN_OR_RETURN(std::optional<int64_t> r, f.OptionalInt(key));
  if (!raw.contains(std::string(key))) r = def;
  if (r) {
    if (*r < 1 || *r > kMaxModelDim) {
      return absl::InvalidArgumentError(
          absl::StrCat("config.json: '", key, "' must be in [1, ", kMaxModelDim, "], got ", *r));
    }
    return *r;
  }
  const double x = c * head_factor * std::sqrt(static_cast<double>(d)) / 32.0;
  return std::max<int64_t>(32, static_cast<int64_t>(std::nearbyint(x)) * 32);
}

class Rwkv7TimeMix : public TokenMixer {
 public:
  explicit Rwkv7TimeMix(LayerLinks* links) : links_(links) {}
  absl::Status Init(const ModelConfig& config, int layer, WeightStore& store);
  std::vector<StateSpec> state_specs() const override {
    return {{"recurrent", {h_, hd_, dv_ / h_}}, {"shift", {d_}}};
  }
  absl::Status Forward(const ExecContext& ctx, const TensorView& x, const Segments& segs,
                       absl::Span<const TensorView> states, const MixerOptions& options,
                       const TensorView& out) override;

 private:
  absl::Status LoadLora(WeightStore& store, int layer, absl::string_view name, int64_t rank,
                        int64_t out, bool bias, Activation act, Lora& lora);
  TensorView Mix(int i) const {  // μ_r, μ_w, μ_k, μ_v, μ_a, μ_g
    return x_x_.rank() > 0 ? x_x_.view().Rows(i, 1).Reshaped({d_}) : mix_[i].view();
  }

  LayerLinks* links_;
  int layer_ = 0;
  int64_t d_ = 0, h_ = 0, hd_ = 0, dv_ = 0;
  double eps_ = 1e-5;
  bool fused_norm_ = true;
  Tensor mix_[6], x_x_, k_k_, k_a_, r_k_, r_proj_, k_proj_, v_proj_, o_proj_, g_norm_w_, g_norm_b_;
  Lora w_lora_, a_lora_, v_lora_, g_lora_;
};

absl::Status Rwkv7TimeMix::LoadLora(WeightStore& store, int layer, absl::string_view name,
                                    int64_t rank, int64_t out, bool bias, Activation act,
                                    Lora& lora) {
  const std::string p = absl::StrCat(name, ".lora.");
  ASSIGN_OR_RETURN(lora.down, store.LoadMatrix(AttnName(layer, p + "0.weight"), {rank, d_}));
  ASSIGN_OR_RETURN(lora.up, store.LoadMatrix(AttnName(layer, p + "2.weight"), {out, rank}));
  if (bias) {
    ASSIGN_OR_RETURN(lora.bias, store.Load(AttnName(layer, p + "2.bias"), {out}));
  }
  lora.act = act;
  return absl::OkStatus();
}

absl::Status Rwkv7TimeMix::Init(const ModelConfig& config, int layer, WeightStore& store) {
  ConfigFields f(config.raw);
  layer_ = layer;
  d_ = config.hidden_size;
  eps_ = config.norm_eps;
  ASSIGN_OR_RETURN(fused_norm_, f.Bool("fuse_norm", true));
  // head_dim (default 64) wins over num_heads (fla/layers/rwkv7.py); a null head_dim is
  // hidden_size / num_heads.
  if (!(config.raw.contains("head_dim") && config.raw["head_dim"].is_null())) {
    ASSIGN_OR_RETURN(hd_, f.Size("head_dim", 64));
  }
  ASSIGN_OR_RETURN(std::optional<int64_t> num_heads, f.OptionalInt("num_heads"));
  if (config.raw.contains("head_dim") && config.raw["head_dim"].is_null()) {
    if (!num_heads || *num_heads <= 0) {
      return absl::InvalidArgumentError("config.json: rwkv7 needs head_dim or num_heads");
    }
    hd_ = d_ / *num_heads;
  }
  if (hd_ <= 0 || d_ % hd_ != 0) {
    return absl::InvalidArgumentError(absl::StrCat("config.json: rwkv7 hidden_size ", d_,
                                                   " is not a multiple of head_dim ", hd_));
  }
  h_ = d_ / hd_;
  dv_ = d_;
  if (f.Has("value_dim")) {
    const nlohmann::json& vd = config.raw["value_dim"];
    const nlohmann::json& mine =
        vd.is_array() && layer < static_cast<int>(vd.size()) ? vd[layer] : vd;
    if (!mine.is_number_integer() ||
        (vd.is_array() && static_cast<int64_t>(vd.size()) != config.num_hidden_layers)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "config.json: rwkv7 'value_dim' must be an integer or one per layer, got ", vd.dump()));
    }
    dv_ = mine.get<int64_t>();
    for (const nlohmann::json& e : vd.is_array() ? vd : nlohmann::json::array({vd})) {
      if (e != mine) {
        return absl::UnimplementedError(
            "config.json: rwkv7 'value_dim' differs between layers (the value residual lerps "
            "every layer's v towards layer 0's)");
      }
    }
    if (dv_ < d_ || dv_ % d_ != 0 || dv_ > kMaxModelDim) {
      return absl::InvalidArgumentError(absl::StrCat("config.json: rwkv7 'value_dim' ", dv_,
                                                     " must be a multiple of hidden_size ", d_));
    }
  }
  if (!config.attention_layers.empty()) {
    return absl::UnimplementedError("config.json: rwkv7 with softmax-attention layers ('attn')");
  }
  const double factor = static_cast<double>(hd_) / 64.0;
  const nlohmann::json& raw = config.raw;
  ASSIGN_OR_RETURN(int64_t rw, LoraRank(f, raw, "decay_low_rank_dim", 64, 2.5, factor, d_));
  ASSIGN_OR_RETURN(int64_t ra, LoraRank(f, raw, "a_low_rank_dim", 64, 2.5, factor, d_));
  ASSIGN_OR_RETURN(int64_t rv, LoraRank(f, raw, "v_low_rank_dim", 16, 1.7, factor, d_));
  ASSIGN_OR_RETURN(int64_t rg, LoraRank(f, raw, "gate_low_rank_dim", 128, 5.0, 1.0, d_));
  auto load = [&](absl::string_view name, Shape shape) {
    return store.Load(AttnName(layer, name), shape);
  };
  auto matrix = [&](absl::string_view name, Shape shape) {
    return store.LoadMatrix(AttnName(layer, name), shape);
  };
  if (store.Has(AttnName(layer, "x_x"))) {  // fla's first layout: [6, D] in the order r,w,k,v,a,g
    ASSIGN_OR_RETURN(x_x_, load("x_x", {6, d_}));
  } else {
    for (int i = 0; i < 6; ++i) {
      ASSIGN_OR_RETURN(mix_[i], load(absl::StrCat("x_", std::string(1, "rwkvag"[i])), {1, 1, d_}));
      RETURN_IF_ERROR(mix_[i].Reshape({d_}));
    }
  }
  ASSIGN_OR_RETURN(k_k_, load("k_k", {d_}));
  ASSIGN_OR_RETURN(k_a_, load("k_a", {d_}));
  ASSIGN_OR_RETURN(r_k_, load("r_k", {h_, hd_}));
  RETURN_IF_ERROR(r_k_.Reshape({d_}));
  ASSIGN_OR_RETURN(r_proj_, matrix("r_proj.weight", {d_, d_}));
  ASSIGN_OR_RETURN(k_proj_, matrix("k_proj.weight", {d_, d_}));
  ASSIGN_OR_RETURN(v_proj_, matrix("v_proj.weight", {dv_, d_}));
  ASSIGN_OR_RETURN(o_proj_, matrix("o_proj.weight", {d_, dv_}));
  RETURN_IF_ERROR(LoadLora(store, layer, "w_lora", rw, d_, true, Activation::kTanh, w_lora_));
  RETURN_IF_ERROR(LoadLora(store, layer, "a_lora", ra, d_, true, Activation::kIdentity, a_lora_));
  if (layer > 0) {
    RETURN_IF_ERROR(
        LoadLora(store, layer, "v_lora", rv, dv_, true, Activation::kIdentity, v_lora_));
  }
  RETURN_IF_ERROR(LoadLora(store, layer, "g_lora", rg, dv_, false, Activation::kSigmoid, g_lora_));
  ASSIGN_OR_RETURN(g_norm_w_, load("g_norm.weight", {dv_}));
  ASSIGN_OR_RETURN(g_norm_b_, load("g_norm.bias", {dv_}));
  return absl::OkStatus();
}

absl::Status Rwkv7TimeMix::Forward(const ExecContext& ctx, const TensorView& x,
                                   const Segments& segs, absl::Span<const TensorView> states,
                                   const MixerOptions& options, const TensorView& out) {
  const int64_t t = x.dim(0);
  ASSIGN_OR_RETURN(TensorView delta, Scratch(ctx, t, d_));
  ASSIGN_OR_RETURN(TensorView xm, Scratch(ctx, t, d_));  // x + δ⊙μ for one of the six
  ASSIGN_OR_RETURN(TensorView r, Scratch(ctx, t, d_));
  ASSIGN_OR_RETURN(TensorView k, Scratch(ctx, t, d_));
  ASSIGN_OR_RETURN(TensorView kk, Scratch(ctx, t, d_));
  ASSIGN_OR_RETURN(TensorView v, Scratch(ctx, t, dv_));
  ASSIGN_OR_RETURN(TensorView o, Scratch(ctx, t, dv_));
  RETURN_IF_ERROR(TokenShift(ctx, x, segs, states[1], delta));
  RETURN_IF_ERROR(MixRows(ctx, x, delta, Mix(0), xm));
  RETURN_IF_ERROR(Linear(ctx, xm, r_proj_.view(), r));
  RETURN_IF_ERROR(MixRows(ctx, x, delta, Mix(1), xm));
  ASSIGN_OR_RETURN(TensorView w, w_lora_.Apply(ctx, xm, d_));
  RETURN_IF_ERROR(SigmoidScale(ctx, w, kDecayScale, w));
  RETURN_IF_ERROR(MixRows(ctx, x, delta, Mix(2), xm));
  RETURN_IF_ERROR(Linear(ctx, xm, k_proj_.view(), k));
  RETURN_IF_ERROR(MixRows(ctx, x, delta, Mix(3), xm));
  RETURN_IF_ERROR(Linear(ctx, xm, v_proj_.view(), v));
  if (layer_ == 0) {
    links_->v_first = v;
  } else {
    const TensorView& first = links_->v_first;
    if (first.empty() || first.dim(0) != t || first.dim(1) != dv_) {
      return absl::InternalError("rwkv7: layer 0 did not run before this layer in the step");
    }
    ASSIGN_OR_RETURN(TensorView z, v_lora_.Apply(ctx, xm, dv_));
    RETURN_IF_ERROR(Rwkv7ValueResidual(ctx, v, first, z, v));
  }
  RETURN_IF_ERROR(MixRows(ctx, x, delta, Mix(4), xm));
  ASSIGN_OR_RETURN(TensorView a, a_lora_.Apply(ctx, xm, d_));
  RETURN_IF_ERROR(Activate(ctx, Activation::kSigmoid, a, a));
  RETURN_IF_ERROR(MixRows(ctx, x, delta, Mix(5), xm));
  ASSIGN_OR_RETURN(TensorView g, g_lora_.Apply(ctx, xm, dv_));
  RETURN_IF_ERROR(Rwkv7Keys(ctx, k, a, k_k_.view(), k_a_.view(), hd_, fused_norm_, kk, k));
  RETURN_IF_ERROR(Rwkv7Recurrence(ctx, {r, w, k, v, kk, a}, segs, states[0], options, o));
  // GroupNorm: H groups over Dv, eps = head_dim·norm_eps (fla; BlinkDL's fixed 64e-5 at hd 64).
  const NormParams gn{static_cast<float>(hd_ * eps_), dv_ / h_};
  RETURN_IF_ERROR(LayerNorm(ctx, o, g_norm_w_.view(), g_norm_b_.view(), gn, o));
  RETURN_IF_ERROR(Rwkv7Bonus(ctx, o, r, k, r_k_.view(), v, g, h_, o));
  return Linear(ctx, o, o_proj_.view(), out);
}

class Rwkv7ChannelMix : public TokenMixer {
 public:
  absl::Status Init(const ModelConfig& config, int layer, WeightStore& store) {
    d_ = config.hidden_size;
    i_ = config.intermediate_size;
    const std::string p = absl::StrCat(LayerPrefix(config, layer), "ffn.");
    ASSIGN_OR_RETURN(x_k_, store.Load(p + "x_k", {d_}));
    ASSIGN_OR_RETURN(key_, store.LoadMatrix(p + "key.weight", {i_, d_}));
    ASSIGN_OR_RETURN(value_, store.LoadMatrix(p + "value.weight", {d_, i_}));
    return absl::OkStatus();
  }
  std::vector<StateSpec> state_specs() const override { return {{"ffn_shift", {d_}}}; }
  absl::Status Forward(const ExecContext& ctx, const TensorView& x, const Segments& segs,
                       absl::Span<const TensorView> states, const MixerOptions&,
                       const TensorView& out) override {
    const int64_t t = x.dim(0);
    ASSIGN_OR_RETURN(TensorView delta, Scratch(ctx, t, d_));
    ASSIGN_OR_RETURN(TensorView hidden, Scratch(ctx, t, i_));
    RETURN_IF_ERROR(TokenShift(ctx, x, segs, states[0], delta));
    RETURN_IF_ERROR(MixRows(ctx, x, delta, x_k_.view(), delta));
    RETURN_IF_ERROR(Linear(ctx, delta, key_.view(), hidden));
    RETURN_IF_ERROR(Activate(ctx, Activation::kRelu, hidden, hidden));
    RETURN_IF_ERROR(Mul(ctx, hidden, hidden, hidden));
    return Linear(ctx, hidden, value_.view(), out);
  }

 private:
  int64_t d_ = 0, i_ = 0;
  Tensor x_k_, key_, value_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<TokenMixer>> CreateRwkv7Mixer(const ModelConfig& config, int layer,
                                                             WeightStore& store,
                                                             LayerLinks* links) {
  if (links == nullptr) return absl::InternalError("rwkv7 mixers need the model's LayerLinks");
  auto m = std::make_unique<Rwkv7TimeMix>(links);
  RETURN_IF_ERROR(m->Init(config, layer, store));
  return m;
}

absl::StatusOr<std::unique_ptr<TokenMixer>> CreateRwkv7ChannelMix(const ModelConfig& config,
                                                                  int layer, WeightStore& store) {
  auto m = std::make_unique<Rwkv7ChannelMix>();
  RETURN_IF_ERROR(m->Init(config, layer, store));
  return m;
}

}  // namespace linfer
