// RWKV-7's own ops (fla rwkv7, MODELS.md §9): token shift, the time-mix interpolation, the key
// preparation, the value residual, the r·k bonus with the output gate, and the generalized delta
// rule ("DPLR") recurrence. All f32 [T, ·] views with row strides unless noted; T = packed rows.
#pragma once

#include "absl/status/status.h"
#include "kernels/context.h"
#include "kernels/recurrence.h"
#include "kernels/segments.h"

namespace linfer {

// Per segment: delta_t = x_{t−1} − x_t, where x_{−1} = state[slot] (the segment's last input of
// the previous step; zeros for a new sequence); afterwards state[slot] = the segment's last row.
// x, delta [T, D] (delta may not alias x); state [slots, D] f32, contiguous.
absl::Status TokenShift(const ExecContext& ctx, const TensorView& x, const Segments& segs,
                        const TensorView& state, const TensorView& delta);

// y = x + d ⊙ m, m [N] broadcast over the rows (the token-shift interpolation x + δ·μ).
// x, d, y [T, N]; y may alias x or d.
absl::Status MixRows(const ExecContext& ctx, const TensorView& x, const TensorView& d,
                     const TensorView& m, const TensorView& y);

// Per head of head_dim columns (k, a, kk, k_out [T, H·head_dim]; k_k, k_a [H·head_dim]):
//   kk = l2norm(k ⊙ k_k)     (fused_norm: x/sqrt(Σx² + 1e-6), fla's l2_norm; else
//                             x/max(‖x‖, 1e-12), F.normalize as BlinkDL and rwkv.cpp)
//   k_out = k ⊙ (1 + (a − 1) ⊙ k_a)
// k_out may alias k; kk may not.
absl::Status Rwkv7Keys(const ExecContext& ctx, const TensorView& k, const TensorView& a,
                       const TensorView& k_k, const TensorView& k_a, int64_t head_dim,
                       bool fused_norm, const TensorView& kk, const TensorView& k_out);

// The value residual: y = v + (v_first − v) ⊙ σ(z) (torch.lerp(v, v_first, σ(z))). All [T, Dv];
// y may alias any input.
absl::Status Rwkv7ValueResidual(const ExecContext& ctx, const TensorView& v,
                                const TensorView& v_first, const TensorView& z,
                                const TensorView& y);

// The bonus and output gate, per head h: y_h = (o_h + (Σ_i r_h,i k_h,i r_k h,i) v_h) ⊙ g_h.
// r, k [T, H·dk], r_k [H·dk]; o, v, g, y [T, H·dv]; y may alias o.
absl::Status Rwkv7Bonus(const ExecContext& ctx, const TensorView& o, const TensorView& r,
                        const TensorView& k, const TensorView& r_k, const TensorView& v,
                        const TensorView& g, int64_t heads, const TensorView& y);

// Inputs of the generalized delta rule, H heads: r, w, k, kk, a [T, H·dk], v [T, H·dv].
struct Rwkv7Inputs {
  TensorView r, w, k, v, kk, a;  // w: log-decay (≤ 0)
};

// Per segment and head, token by token from the slot's state S [dk, dv] (K-first):
//   S_t = diag(e^{w_t}) S_{t−1} − (kk_t ⊙ a_t)(kk_tᵀ S_{t−1}) + k_t v_tᵀ,   o_t = S_tᵀ r_t
// (the low-rank term reads the un-decayed previous state, as fla's fused_recurrent kernel).
// state: [slots, H, dk, dv] f32, updated in place; o: [T, H·dv], written. kChunked on the CPU
// runs a chunked form (per chunk, the low-rank inputs u_j = −kk_jᵀ S_j solved in
// order, then outputs and state from cumulative decays; equal to token by token up to f32
// rounding); kAuto and kRecurrent, and every mode on CUDA, run token by token.
absl::Status Rwkv7Recurrence(const ExecContext& ctx, const Rwkv7Inputs& in, const Segments& segs,
                             const TensorView& state, const RecurrenceOptions& options,
                             const TensorView& o);

}  // namespace linfer
