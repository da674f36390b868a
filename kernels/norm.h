// Normalisations over groups of contiguous columns (f32, computed in f32). x and y are [M, N]
// with N a multiple of `group`; y may alias x; row strides are allowed. RmsNorm, AddRmsNorm and
// GatedRmsNorm may also write y as bf16 (the f32 result rounded to nearest even): the input of a
// matmul with bf16 weights (kernels/gemm.h MatmulInputDType), which then needs no conversion pass.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/activation.h"
#include "kernels/context.h"

namespace linfer {

struct NormParams {
  float eps = 1e-6f;
  int64_t group = 0;           // columns normalised together (N: a plain norm; head_dim: per head)
  bool zero_centered = false;  // weight applied as (1 + w) (Qwen3.5's RMSNorm)
};

// y = x · (mean(x²) + eps)^-½ · w over each group; w is [group] f32, or empty for no weight.
absl::Status RmsNorm(const ExecContext& ctx, const TensorView& x, const TensorView& w,
                     const NormParams& p, const TensorView& y);

// h ← h + r, then y = RmsNorm(h; w) as above: a block's residual add and the norm after it in one
// pass (one launch on CUDA, bit-identical to Add then RmsNorm). h, r, y [T, N] f32; y may be h or
// r itself (each element is read before it is written, by the same thread) but not a part of one.
absl::Status AddRmsNorm(const ExecContext& ctx, const TensorView& h, const TensorView& r,
                        const TensorView& w, const NormParams& p, const TensorView& y);

// LayerNorm over each group: y = (x − mean) · (var + eps)^-½ · w + b (biased variance). w and b
// are empty, [group] (shared by every group) or [N] (one value per column: GroupNorm's affine).
absl::Status LayerNorm(const ExecContext& ctx, const TensorView& x, const TensorView& w,
                       const TensorView& b, const NormParams& p, const TensorView& y);

// fla FusedRMSNormGated: y = RmsNorm(x; w) ⊙ act(gate), per group; gate has x's shape.
absl::Status GatedRmsNorm(const ExecContext& ctx, const TensorView& x, const TensorView& gate,
                          const TensorView& w, const NormParams& p, Activation act,
                          const TensorView& y);

// y = x / sqrt(Σx² + eps) over each group (fla l2norm).
absl::Status L2Normalize(const ExecContext& ctx, const TensorView& x, int64_t group, float eps,
                         const TensorView& y);

// y = x / (Σx + eps) over each group (fla's "sum" qk norm has eps = 0).
absl::Status SumNormalize(const ExecContext& ctx, const TensorView& x, int64_t group, float eps,
                          const TensorView& y);

}  // namespace linfer
