// Parameter-free parts of the linear-attention feature maps (fla fla/modules/feature_map.py).
// The learned maps (hedgehog, t2r, Hadamard) are a Linear followed by these.
#pragma once

#include <cstdint>

namespace linfer {

// DPFP, ν = 4, as fla defines it (not the paper's [relu(x), relu(−x)]): r = [relu(x), −relu(x)]
// (2d); φ = concat_{j=1..4}(r ⊙ roll(r, j)) (8d), roll(r, j)[i] = r[(i − j) mod 2d]. out: 8·d
// floats.
void DpfpFeatureMap(const float* x, int d, float* out);

// Hedgehog after its linear layer: φ = softmax([2z, −2z]) over 2d entries. out has 2·d floats.
void HedgehogFeatureMap(const float* z, int d, float* out);

}  // namespace linfer
