// Softmax-attention layers of hybrid models, with H query heads, KVH key/value heads of head_dim
// d (query head h reads kv head h / (H/KVH)):
//   fla `attn` (MODELS.md §10): q = x W_q (+b), k = x W_k (+b), v = x W_v (+b); RoPE on all d;
//     o = softmax(q Kᵀ·d^-½) V over the sequence's keys (the last `window` with a window);
//     out = o W_o.  Weights model.layers.{l}.attn.{q,k,v,o}_proj.
//   Qwen3.5 gated attention (MODELS.md §17 rule 4): x W_q is [H, 2d] per head — its query, then
//     its gate; q, k ← zero-centred RMSNorm per head (q_norm, k_norm) before RoPE on the first
//     rotary_dim features; o ← o ⊙ σ(gate); out = o W_o (+b).
//     Weights <prefix>layers.{l}.self_attn.{q,k,v,o}_proj, q_norm, k_norm.
// State: the layer's keys and values after norm and RoPE, per token [2, KVH, d]: in the paged KV
// cache (full attention), or a ring of the last `window` tokens in the slot ([2, window, KVH, d]).
#include "kernels/attention.h"

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/activation.h"
#include "kernels/gemm.h"
#include "kernels/norm.h"
#include "kernels/rope.h"
#include "kernels/transfer.h"
#include "models/families/families.h"

namespace linfer {
namespace {

class AttentionMixer : public TokenMixer {
 public:
  absl::Status Init(const ModelConfig& config, int layer, WeightStore& store);
  std::vector<StateSpec> state_specs() const override;
  // x feeds the q and the k/v projections only.
  DType InputDType(const ExecContext& ctx) const override {
    return MatmulInputDType(ctx, q_proj_.view()) == DType::kBF16 &&
                   MatmulInputDType(ctx, kv_proj_.view()) == DType::kBF16
               ? DType::kBF16
               : DType::kF32;
  }
  absl::Status Forward(const ExecContext& ctx, const TensorView& x, const Segments& segs,
                       absl::Span<const TensorView> states, const MixerOptions& options,
                       const TensorView& out) override;

 private:
  // y = x Wᵀ (+ bias when present).
  static absl::Status Project(const ExecContext& ctx, const TensorView& x, const Tensor& w,
                              const Tensor& bias, const TensorView& y);

  AttentionLayerConfig a_;
  float eps_ = 1e-6f;
  Tensor q_proj_, o_proj_, q_bias_, o_bias_;
  Tensor kv_proj_, kv_bias_;  // k_proj then v_proj stacked by rows (and their biases): one GEMM
  Tensor q_norm_, k_norm_;    // Qwen only
};

absl::Status AttentionMixer::Init(const ModelConfig& config, int layer, WeightStore& store) {
  a_ = config.attention_layers.at(layer);
  eps_ = static_cast<float>(config.norm_eps);
  const int64_t d = config.hidden_size, hd = a_.head_dim;
  const int64_t q_rows = a_.num_heads * hd * (a_.qwen_gated ? 2 : 1);
  const int64_t kv_rows = a_.num_kv_heads * hd;
  const std::string p =
      absl::StrCat(LayerPrefix(config, layer), a_.qwen_gated ? "self_attn." : "attn.");
  ASSIGN_OR_RETURN(q_proj_, store.LoadMatrix(p + "q_proj.weight", {q_rows, d}));
  ASSIGN_OR_RETURN(kv_proj_, store.LoadStacked({{p + "k_proj.weight", {kv_rows, d}},
                                                {p + "v_proj.weight", {kv_rows, d}}}));
  ASSIGN_OR_RETURN(o_proj_, store.LoadMatrix(p + "o_proj.weight", {d, a_.num_heads * hd}));
  if (a_.qkv_bias) {
    ASSIGN_OR_RETURN(q_bias_, store.Load(p + "q_proj.bias", {q_rows}));
    ASSIGN_OR_RETURN(Tensor k_bias, store.LoadHost(p + "k_proj.bias", {kv_rows}));
    ASSIGN_OR_RETURN(Tensor v_bias, store.LoadHost(p + "v_proj.bias", {kv_rows}));
    ASSIGN_OR_RETURN(Tensor kv_bias, Tensor::Empty(DType::kF32, {2 * kv_rows}));
    std::copy_n(k_bias.data<const float>(), kv_rows, kv_bias.data<float>());
    std::copy_n(v_bias.data<const float>(), kv_rows, kv_bias.data<float>() + kv_rows);
    ASSIGN_OR_RETURN(kv_bias_, store.Constant(std::move(kv_bias)));
    // Qwen3.5's attention_bias also gives o_proj a bias; fla's qkv_bias does not.
    if (a_.qwen_gated) {
      ASSIGN_OR_RETURN(o_bias_, store.Load(p + "o_proj.bias", {d}));
    }
  }
  if (a_.qwen_gated) {
    ASSIGN_OR_RETURN(q_norm_, store.Load(p + "q_norm.weight", {hd}));
    ASSIGN_OR_RETURN(k_norm_, store.Load(p + "k_norm.weight", {hd}));
  }
  return absl::OkStatus();
}

std::vector<StateSpec> AttentionMixer::state_specs() const {
  if (a_.window > 0) {
    return {{"kv", {2, a_.window, a_.num_kv_heads, a_.head_dim}, DType::kF32, StateKind::kRing}};
  }
  return {{"kv", {2, a_.num_kv_heads, a_.head_dim}, DType::kF32, StateKind::kPaged}};
}

absl::Status AttentionMixer::Project(const ExecContext& ctx, const TensorView& x, const Tensor& w,
                                     const Tensor& bias, const TensorView& y) {
  const TensorView b = bias.view();
  return Linear(ctx, x, w.view(), y, bias.rank() > 0 ? &b : nullptr);
}

absl::Status AttentionMixer::Forward(const ExecContext& ctx, const TensorView& x,
                                     const Segments& segs, absl::Span<const TensorView> states,
                                     const MixerOptions&, const TensorView& out) {
  const int64_t t = x.dim(0), hd = a_.head_dim, h = a_.num_heads, kvh = a_.num_kv_heads;
  // k and v side by side (row stride 2·kvh·d): the norm, RoPE and attention take strided rows.
  ASSIGN_OR_RETURN(TensorView kv_new, Scratch(ctx, t, 2 * kvh * hd));
  const TensorView k = kv_new.Cols(0, kvh * hd), v = kv_new.Cols(kvh * hd, kvh * hd);
  ASSIGN_OR_RETURN(TensorView o, Scratch(ctx, t, h * hd));
  RETURN_IF_ERROR(Project(ctx, x, kv_proj_, kv_bias_, kv_new));
  const RopeParams k_rope{static_cast<int>(kvh), static_cast<int>(hd),
                          static_cast<int>(a_.rotary_dim), a_.rope_theta};
  TensorView q, gate;
  if (a_.qwen_gated) {
    // [T, H·2d]: per head its query, then its gate. Each query is normed and rotated into q
    // (heads 2d apart in, d apart out), and k in place: one launch each (HeadNormRope).
    ASSIGN_OR_RETURN(TensorView qg, Scratch(ctx, t, 2 * h * hd));
    RETURN_IF_ERROR(Project(ctx, x, q_proj_, q_bias_, qg));
    const NormParams norm{eps_, hd, /*zero_centered=*/true};
    const RopeParams q_rope{static_cast<int>(h), static_cast<int>(hd),
                            static_cast<int>(a_.rotary_dim), a_.rope_theta};
    ASSIGN_OR_RETURN(q, Scratch(ctx, t, h * hd));
    RETURN_IF_ERROR(HeadNormRope(ctx, qg, q_norm_.view(), segs, {q_rope, norm, 2 * hd}, q));
    RETURN_IF_ERROR(HeadNormRope(ctx, k, k_norm_.view(), segs, {k_rope, norm, hd}, k));
    gate = qg.Reshaped({t * h, 2 * hd}).Cols(hd, hd);
  } else {
    ASSIGN_OR_RETURN(q, Scratch(ctx, t, h * hd));
    RETURN_IF_ERROR(Project(ctx, x, q_proj_, q_bias_, q));
    RETURN_IF_ERROR(Rope(ctx, q, segs,
                         {static_cast<int>(h), static_cast<int>(hd),
                          static_cast<int>(a_.rotary_dim), a_.rope_theta}));
    RETURN_IF_ERROR(Rope(ctx, k, segs, k_rope));
  }
  const KvCacheRef kv{a_.window > 0 ? KvCacheRef::Kind::kRing : KvCacheRef::Kind::kPaged,
                      states[0]};
  const AttentionParams params{static_cast<int>(h), static_cast<int>(kvh), static_cast<int>(hd),
                               QueryScale(hd), static_cast<int>(a_.window)};
  RETURN_IF_ERROR(Attention(ctx, q, k, v, segs, kv, params, o));
  if (a_.qwen_gated) {
    const TensorView o_heads = o.Reshaped({t * h, hd});
    RETURN_IF_ERROR(Mul(ctx, o_heads, gate, o_heads, Activation::kSigmoid));  // o ⊙ σ(gate)
  }
  return Project(ctx, o, o_proj_, o_bias_, out);
}

}  // namespace

absl::StatusOr<std::unique_ptr<TokenMixer>> CreateAttentionMixer(const ModelConfig& config,
                                                                 int layer, WeightStore& store) {
  auto m = std::make_unique<AttentionMixer>();
  RETURN_IF_ERROR(m->Init(config, layer, store));
  return m;
}

}  // namespace linfer
