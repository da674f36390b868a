// The families' gate computations, one op each (f32 [T, H]-shaped views unless noted).
#pragma once

#include "absl/status/status.h"
#include "kernels/context.h"

namespace linfer {

// Gated DeltaNet: g = −exp(A_log[h]) · softplus(a + dt_bias[h]) (log-decay ≤ 0) and
// β = σ(b) · beta_scale (2 with allow_neg_eigval). a, b, g, beta [T, H]; a_log, dt_bias [H].
absl::Status GdnGates(const ExecContext& ctx, const TensorView& a, const TensorView& b,
                      const TensorView& a_log, const TensorView& dt_bias, float beta_scale,
                      const TensorView& g, const TensorView& beta);

// y = σ(x) · scale (DeltaNet's β). x, y [T, H]; y may alias x.
absl::Status SigmoidScale(const ExecContext& ctx, const TensorView& x, float scale,
                          const TensorView& y);

// GLA: y = max(logsigmoid(x) / normalizer, clamp_min) (no clamp when clamp_min is −inf).
absl::Status GlaDecay(const ExecContext& ctx, const TensorView& x, float normalizer,
                      float clamp_min, const TensorView& y);

// y[t, h] = value for every row (β = 1 when a family has no β projection).
absl::Status Fill(const ExecContext& ctx, float value, const TensorView& y);

}  // namespace linfer
