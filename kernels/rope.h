// Rotary position embedding, GPT-NeoX "rotate halves" layout on the first rotary_dim features of
// each head (fla RotaryEmbedding non-interleaved; Qwen3.5's partial rotary).
#pragma once

#include "absl/status/status.h"
#include "kernels/context.h"
#include "kernels/norm.h"
#include "kernels/segments.h"

namespace linfer {

struct RopeParams {
  int heads = 0;
  int head_dim = 0;
  int rotary_dim = 0;  // even, ≤ head_dim; features past it are left alone
  double base = 10000.0;
};

// x [T, heads·head_dim] f32 in place (row strides allowed). Row r of segment s has position
// s.position + (r − s.row_begin); with θ_i = pos · base^(−2i/rotary_dim), i < rotary_dim/2:
//   x[i] ← x[i]·cosθ_i − x[i+R/2]·sinθ_i,  x[i+R/2] ← x[i+R/2]·cosθ_i + x[i]·sinθ_i.
absl::Status Rope(const ExecContext& ctx, const TensorView& x, const Segments& segs,
                  const RopeParams& p);

// An attention layer's q or k before attention, in one pass: per head, RMSNorm over head_dim
// (norm.group = rope.head_dim; w [head_dim] f32, or empty) and then Rope, into
// y [T, heads·head_dim] (row strides allowed). x's heads start x_head_stride columns apart
// (≥ head_dim: Qwen3.5's gated q rows interleave each head's query with its gate), so y = the
// norm and rotation of the query part alone; y may be x itself when x_head_stride = head_dim
// (in place), and may not overlap it otherwise. The same values as RmsNorm, then Rope, on the heads
// (the CPU runs exactly those; CUDA fuses them up to head_dim 511 and runs them above).
struct HeadNormRopeParams {
  RopeParams rope;
  NormParams norm;
  int64_t x_head_stride = 0;  // 0: head_dim
};
absl::Status HeadNormRope(const ExecContext& ctx, const TensorView& x, const TensorView& w,
                          const Segments& segs, const HeadNormRopeParams& p, const TensorView& y);

}  // namespace linfer
