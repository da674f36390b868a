// The mixture-of-experts MLP: loading (fused or per-expert checkpoints) and the forward pass.
#include "models/moe.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/gemm.h"
#include "kernels/moe.h"
#include "models/mixer.h"

namespace linfer {

absl::StatusOr<std::unique_ptr<SparseMoe>> SparseMoe::Load(const ModelConfig& config, int layer,
                                                           WeightStore& store) {
  auto m = std::unique_ptr<SparseMoe>(new SparseMoe());
  const MoeConfig& c = config.moe;
  m->shape_ = c;
  const int64_t d = config.hidden_size, e = c.experts, i = c.intermediate;
  const int64_t s = c.shared_intermediate;
  RETURN_IF_ERROR(MoeSupported(store.target().device, d, i));
  const std::string p = absl::StrCat(LayerPrefix(config, layer), "mlp.");
  ASSIGN_OR_RETURN(m->router_, store.Load(p + "gate.weight", {e, d}));  // f32 on every device
  ASSIGN_OR_RETURN(std::vector<Tensor> shared_in,
                   store.LoadStackedRuns({{p + "shared_expert_gate.weight", {1, d}},
                                          {p + "shared_expert.gate_proj.weight", {s, d}},
                                          {p + "shared_expert.up_proj.weight", {s, d}}}));
  m->shared_in_ = StackedWeight(std::move(shared_in));
  ASSIGN_OR_RETURN(m->shared_down_, store.LoadMatrix(p + "shared_expert.down_proj.weight", {d, s}));
  if (store.Has(p + "experts.gate_up_proj") || !store.Has(p + "experts.0.gate_proj.weight")) {
    ASSIGN_OR_RETURN(m->gate_up_, store.LoadMatrix(p + "experts.gate_up_proj", {e, 2 * i, d}));
    ASSIGN_OR_RETURN(m->down_, store.LoadMatrix(p + "experts.down_proj", {e, d, i}));
    return m;
  }
  // One tensor per expert and projection: stacked into the fused layout (gate rows, then up rows,
  // expert after expert).
  std::vector<std::pair<std::string, Shape>> gate_up, down;
  for (int64_t x = 0; x < e; ++x) {
    const std::string q = absl::StrCat(p, "experts.", x, ".");
    gate_up.push_back({q + "gate_proj.weight", {i, d}});
    gate_up.push_back({q + "up_proj.weight", {i, d}});
    down.push_back({q + "down_proj.weight", {d, i}});
  }
  ASSIGN_OR_RETURN(m->gate_up_, store.LoadStacked(gate_up));
  RETURN_IF_ERROR(m->gate_up_.Reshape({e, 2 * i, d}));
  ASSIGN_OR_RETURN(m->down_, store.LoadStacked(down));
  RETURN_IF_ERROR(m->down_.Reshape({e, d, i}));
  return m;
}

absl::Status SparseMoe::Forward(const ExecContext& ctx, const TensorView& x,
                                const TensorView& h) const {
  const int64_t t = x.dim(0), e = shape_.experts, k = shape_.top_k, s = shape_.shared_intermediate;
  ScratchScope scope(ctx);
  ASSIGN_OR_RETURN(TensorView logits, Scratch(ctx, t, e));
  RETURN_IF_ERROR(Linear(ctx, x, router_.view(), logits));
  ASSIGN_OR_RETURN(TensorView idx, Scratch(ctx, DType::kI32, {t, k}));
  ASSIGN_OR_RETURN(TensorView weights, Scratch(ctx, DType::kF32, {t, k}));
  RETURN_IF_ERROR(MoeRoute(ctx, logits, idx, weights, shape_.normalize));
  // Columns: the shared expert's gate logit, its gate_proj, its up_proj.
  ASSIGN_OR_RETURN(TensorView in, Scratch(ctx, t, 1 + 2 * s));
  RETURN_IF_ERROR(shared_in_.Linear(ctx, x, in));
  ASSIGN_OR_RETURN(TensorView shared, Scratch(ctx, t, x.dim(1)));
  RETURN_IF_ERROR(SwiGluLinear(ctx, in.Cols(1, s), in.Cols(1 + s, s), shared_down_.view(), shared));
  const MoeShared sh{shared, in.Cols(0, 1)};
  return MoeExperts(ctx, x, idx, weights, gate_up_.view(), down_.view(), &sh, h,
                    /*accumulate=*/true);
}

}  // namespace linfer
