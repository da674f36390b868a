// Mixture-of-experts feed-forward (transformers' Qwen3_5MoeSparseMoeBlock: Qwen3.5/3.6 MoE).
// For each token t with router logits l_t [E] (x_t W_routerᵀ):
//   top_k experts e_1 … e_k: the k largest logits, in decreasing order (equal logits: the lower
//   index first; NaN ranks as −∞) — softmax is monotone, so these are the k most probable
//   experts;
//   w_j = softmax(l_t)[e_j] / Σ_i softmax(l_t)[e_i] = e^{l_{e_j} − l_{e_1}} / Σ_i e^{l_{e_i} −
//   l_{e_1}} (the whole row's normaliser cancels), or without renormalising (Qwen3-Next's
//   norm_topk_prob false) w_j = softmax(l_t)[e_j] = e^{l_{e_j} − l_{e_1}} / Σ_{all e} e^{l_e −
//   l_{e_1}}; y_t = Σ_j w_j · W_down[e_j] (silu(W_gate[e_j] x_t) ⊙ W_up[e_j] x_t)   (+ σ(s_t) ·
//   shared_t)
// with the shared expert's output `shared_t` and its gate logit s_t computed by the caller.
// Expert weights: gate_up [E, 2I, D] (each expert's gate rows, then its up rows: transformers'
// fused `experts.gate_up_proj`), down [E, D, I]; f32 or bf16 (or f16 on the CPU).
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/context.h"

namespace linfer {

inline constexpr int64_t kMaxMoeTopK = 64;
inline constexpr int64_t kMaxMoeExperts = 1 << 16;
// MoeExperts runs longer inputs in passes of this many tokens (rows are independent: the results
// are the same): the twins' per-pair scratch, T·k rows of D (and of 2I on CUDA), stays bounded.
inline constexpr int64_t kMoePassTokens = 1024;

// Whether MoeExperts takes experts of width `inter` over hidden size `d` on `device`: CUDA stages
// an activation row of the width in 48 KB of shared memory (≤ 12288) and launches a block per
// 8 output features (d ≤ 8 · 65535). An error naming the limit otherwise.
absl::Status MoeSupported(Device device, int64_t d, int64_t inter);

// idx[t, j] = e_j and weights[t, j] = w_j from logits [T, E] f32 (row strides allowed);
// idx I32 [T, k], weights F32 [T, k], 1 ≤ k ≤ min(E, kMaxMoeTopK); `normalize`: the top k's
// weights sum to 1 (else they are their softmax probabilities over all E). Rows whose logits are
// all NaN or −∞ get experts 0 … k−1 with equal weights (1/k, or 1/E unnormalised); a +∞ at the top
// shares the weight among the entries equal to it.
absl::Status MoeRoute(const ExecContext& ctx, const TensorView& logits, const TensorView& idx,
                      const TensorView& weights, bool normalize = true);

// The shared expert's part of MoeExperts' sum: out [T, D] f32 and gate [T, 1] f32 (logits s_t;
// row strides allowed for both).
struct MoeShared {
  TensorView out, gate;
};

// y (+)= Σ_j weights[t, j] · expert(idx[t, j], x_t) (+ σ(shared.gate[t]) · shared.out[t]),
// summed in j order, then the shared term. x [T, D] f32 (row strides allowed; must not overlap
// y), idx I32 [T, k] with every id in [0, E) (MoeRoute's; the CPU checks them, CUDA writes NaN
// rows for an id outside), weights F32 [T, k], gate_up and down contiguous as above, y [T, D] f32.
// Arithmetic in f32 (bf16 weights widened exactly; x stays f32 on every device).
absl::Status MoeExperts(const ExecContext& ctx, const TensorView& x, const TensorView& idx,
                        const TensorView& weights, const TensorView& gate_up,
                        const TensorView& down, const MoeShared* shared, const TensorView& y,
                        bool accumulate);

}  // namespace linfer
