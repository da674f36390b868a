// Rotary position embedding, GPT-NeoX "rotate halves" layout on the first rotary_dim features of
// each head (fla RotaryEmbedding non-interleaved; Qwen3.5's partial rotary).
#pragma once

#include "absl/status/status.h"
#include "kernels/context.h"
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

}  // namespace linfer
