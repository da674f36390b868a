// Rotary position embedding, GPT-NeoX "rotate halves" layout (fla RotaryEmbedding,
// non-interleaved).
#pragma once

#include <cstdint>

namespace linfer {

// For each of `rows` tokens (positions start_pos, start_pos+1, …; rows `row_stride` floats apart)
// and each of `heads` heads of `head_dim` floats: with θ_i = pos · base^(−2i/head_dim),
//   x[i] ← x[i]·cosθ_i − x[i+d/2]·sinθ_i,  x[i+d/2] ← x[i+d/2]·cosθ_i + x[i]·sinθ_i.
// head_dim must be even.
void ApplyRope(float* x, int64_t rows, int64_t row_stride, int heads, int head_dim,
               int64_t start_pos, double base = 10000.0);

}  // namespace linfer
