// The mixture-of-experts MLP of Qwen3.5/3.6 MoE and Qwen3-Next blocks (transformers'
// Qwen3_5MoeSparseMoeBlock, kernels/moe.h for the math): h += Σ_j w_j · expert_{e_j}(x) +
// σ(x·w_sg) · shared(x). The router ([E, D]) is loaded as f32 whatever the weight dtype (a few MB
// a layer, WeightStore::Load): the routing then follows the checkpoint's values, not a bf16
// rounding of an f32 checkpoint or of x (CUDA rounds x to bf16 for bf16 weights), so near ties
// route as the reference does. The shared expert's gate and its gate/up projections are a second
// GEMM ([1 + 2S, D], in the weight dtype).
// Weights `<prefix>layers.{l}.mlp.`: `gate.weight` [E, D], `shared_expert_gate.weight` [1, D],
// `shared_expert.{gate_proj,up_proj}.weight` [S, D], `shared_expert.down_proj.weight` [D, S], and
// the experts either fused as transformers 5 writes them (`experts.gate_up_proj` [E, 2I, D],
// `experts.down_proj` [E, D, I]) or one by one (`experts.{e}.{gate_proj,up_proj}.weight` [I, D],
// `experts.{e}.down_proj.weight` [D, I]).
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/context.h"
#include "kernels/tensor.h"
#include "models/config.h"
#include "models/stacked_weight.h"
#include "models/weights.h"

namespace linfer {

class SparseMoe {
 public:
  static absl::StatusOr<std::unique_ptr<SparseMoe>> Load(const ModelConfig& config, int layer,
                                                         WeightStore& store);
  // h += MoE(x): x [T, D] f32 (the post-attention norm's output), h [T, D] f32, not overlapping.
  absl::Status Forward(const ExecContext& ctx, const TensorView& x, const TensorView& h) const;

 private:
  MoeConfig shape_;
  Tensor router_;            // [E, D] f32
  StackedWeight shared_in_;  // shared-expert gate | shared gate_proj | shared up_proj
  Tensor shared_down_;       // [D, S]
  Tensor gate_up_;           // [E, 2I, D]
  Tensor down_;              // [E, D, I]
};

}  // namespace linfer
