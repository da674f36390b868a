// The device pre-sampler: per row of logits, the few numbers the host sampler needs, so that only
// K candidates per sequence (not the vocabulary) cross PCIe. The CPU sampler stays the final step:
// it samples from the top-K candidates with the row's log-sum-exp as the full normaliser, and for
// the draws that depend on every logit (temperature over the whole row, top-p alone) it takes the
// device's draw and weight sum (PresampleDraws) made with the uniform it drew itself.
#pragma once

#include "absl/status/status.h"
#include "kernels/context.h"

namespace linfer {

inline constexpr int kMaxPresampleK = 64;

// The largest K ≤ kMaxPresampleK that Presample takes for rows of `vocab` logits on `device` (0:
// none): the CPU takes any K ≤ vocab; CUDA keeps every row's candidates in one block's shared
// memory (K ≤ 4096 / ⌈vocab / 8192⌉: 64 up to 524,288 ids, 33 at a million).
int MaxPresampleK(Device device, int64_t vocab);

// Outputs on ctx.device, contiguous; K = top_ids.dim(1), 1 ≤ K ≤ kMaxPresampleK, K ≤ V.
struct PresampleOutput {
  TensorView top_ids;     // I32 [B, K]: ids of the K largest logits, largest first
  TensorView top_logits;  // F32 [B, K]: their logits
  TensorView argmax;      // I32 [B]: = top_ids[:, 0]
  TensorView logsumexp;   // F32 [B]: log Σ_v exp(logits[b, v]) over the whole row
};

// Temperature draws over whole rows, for the rows with inv_temperature > 0 (the others get token
// −1, weight_sum 0, logit 0): with m the row's largest logit (top_logits[b, 0]) and
//   w_v = exp(max(−87, (x_v − m) · inv_temperature))   (kernels/sampling_math.h, the same bits)
//   weight_sum = SumWeights(w),   token = DrawFromWeights(w, UniformFromBits(uniform_bits))
// (the first v with u · weight_sum < Σ_{v' ≤ v} w_v'; the last v with w_v > 0 when rounding
// leaves none).
// A row whose m is not finite gets its argmax, weight_sum 0. Contiguous, on ctx.device.
struct PresampleDraws {
  TensorView inv_temperature;  // F32 [B], in
  TensorView uniform_bits;     // I64 [B], in
  TensorView weight_sum;       // F64 [B], out
  TensorView token;            // I32 [B], out
  TensorView logit;            // F32 [B], out: logits[b, token]
};

// logits [B, V] f32 (row strides allowed). Order: larger logit first, the lower id first among
// equal logits (−0 = +0), NaN below every number. logsumexp: m + log Σ exp(x − m) with m the
// largest non-NaN logit; it is m itself when m is ±inf (or NaN when every logit is NaN), and NaN
// when any logit is NaN and m is finite. Deterministic: the same inputs give the same outputs on a
// device.
// With `draws`, also the rows' draws: every device gives the same tokens, logits and weight sums
// (sampling_math.h fixes every float and double operation and their order).
absl::Status Presample(const ExecContext& ctx, const TensorView& logits, const PresampleOutput& out,
                       const PresampleDraws* draws = nullptr);

}  // namespace linfer
