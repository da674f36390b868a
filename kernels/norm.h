// Normalisations over groups of contiguous columns (f32, computed in f32).
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/activation.h"
#include "kernels/tensor.h"

namespace linfer {

// RMSNorm: y = x · (mean(x²) + eps)^-½ · w, over every group of `group` columns of x [M, N]
// (group = N for a plain RMSNorm, = head_dim for a per-head norm). w is [group], or an empty
// view for no weight. y may alias x.
absl::Status RmsNorm(const TensorView& x, const TensorView& w, float eps, int64_t group,
                     const TensorView& y);

// Gated RMSNorm (fla FusedRMSNormGated): y = RMSNorm(x; w) ⊙ act(gate), per group. gate has
// x's shape. y may alias x.
absl::Status GatedRmsNorm(const TensorView& x, const TensorView& gate, const TensorView& w,
                          float eps, int64_t group, Activation act, const TensorView& y);

// x ← x / sqrt(Σx² + eps) over each of `rows` rows of `dim` floats spaced `stride` apart.
void L2NormalizeRows(float* x, int64_t rows, int64_t stride, int64_t dim, float eps = 1e-6f);

}  // namespace linfer
