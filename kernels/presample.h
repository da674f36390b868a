// The device pre-sampler: per row of logits, the few numbers the host sampler needs, so that only
// K candidates per sequence (not the vocabulary) cross PCIe. The CPU sampler stays the final step:
// it samples from the top-K candidates with the row's log-sum-exp as the full normaliser.
#pragma once

#include "absl/status/status.h"
#include "kernels/context.h"

namespace linfer {

inline constexpr int kMaxPresampleK = 64;

// Outputs on ctx.device, contiguous; K = top_ids.dim(1), 1 ≤ K ≤ kMaxPresampleK, K ≤ V.
struct PresampleOutput {
  TensorView top_ids;     // I32 [B, K]: ids of the K largest logits, largest first
  TensorView top_logits;  // F32 [B, K]: their logits
  TensorView argmax;      // I32 [B]: = top_ids[:, 0]
  TensorView logsumexp;   // F32 [B]: log Σ_v exp(logits[b, v]) over the whole row
};

// logits [B, V] f32 (row strides allowed). Order: larger logit first, the lower id first among
// equal logits (−0 = +0), NaN below every number. logsumexp: m + log Σ exp(x − m) with m the
// largest non-NaN logit; it is m itself when m is ±inf (or NaN when every logit is NaN), and NaN
// when any logit is NaN and m is finite. Deterministic: the same inputs give the same outputs on a
// device.
absl::Status Presample(const ExecContext& ctx, const TensorView& logits,
                       const PresampleOutput& out);

}  // namespace linfer
