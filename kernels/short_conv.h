// Short causal depthwise convolution with its rolling state (fla ShortConvolution).
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/activation.h"
#include "kernels/tensor.h"

namespace linfer {

// For one sequence of T tokens over C channels and kernel width W:
//   y_t[c] = act(Σ_{i<W} w[c,i] · x_{t−(W−1)+i}[c]),
// where inputs before t = 0 come from `state` [C, W], the last W raw inputs (oldest first).
// On return `state` holds the last W raw inputs of (old state ++ x). x and y are [T, C] f32
// (y may not alias x); w is [C, W] (or [C, 1, W]).
absl::Status ShortConv(const TensorView& x, const TensorView& w, const TensorView& state,
                       Activation act, const TensorView& y);

}  // namespace linfer
