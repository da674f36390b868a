// Mamba2's pointwise ops (MODELS.md §8, tests/models/reference/NOTES_families.md): the Δ/decay
// gates, per-head scaling (x·Δ, the D skip, the gated norm's per-channel weight) and a bias
// followed by an activation (the conv bias before silu). f32 [T, ·] views, row strides allowed.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/activation.h"
#include "kernels/context.h"

namespace linfer {

// Δ = clamp(softplus(dt + dt_bias[h]), lo, hi) and g = −exp(A_log[h]) · Δ (the log-decay ≤ 0).
// dt, delta, g [T, H]; dt_bias, a_log [H]. delta and g may alias dt (not each other).
absl::Status Mamba2Gates(const ExecContext& ctx, const TensorView& dt, const TensorView& dt_bias,
                         const TensorView& a_log, float lo, float hi, const TensorView& delta,
                         const TensorView& g);

// y[t, c] (+)= x[t, c] · s[t, c / w] with s [T, N / w] (one value per row and group of w
// columns), or y[t, c] (+)= x[t, c] · s[c / w] with a contiguous constant s of N / w values
// (w = N / s's last dim). accumulate: y += …, else y = …. x, y [T, N]; y may alias x.
absl::Status ScaleGroups(const ExecContext& ctx, const TensorView& x, const TensorView& s,
                         bool accumulate, const TensorView& y);

// y = act(x + b), b [N] broadcast over the rows. x, y [T, N]; y may alias x.
absl::Status BiasActivate(const ExecContext& ctx, const TensorView& x, const TensorView& b,
                          Activation act, const TensorView& y);

}  // namespace linfer
