// Short causal depthwise convolution with its rolling state (fla ShortConvolution), over the
// segments of a step, each reading and writing its slot's conv state.
#pragma once

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "kernels/activation.h"
#include "kernels/context.h"
#include "kernels/segments.h"

namespace linfer {

// For each segment s and channel c (x, y [T, C] f32, row strides allowed; y may not overlap x):
//   y_t[c] = act(Σ_{i<W} w[c,i] · x_{t−(W−1)+i}[c]),
// where inputs before the segment's first row come from state[s.slot] ([slots, C, W] f32: the
// last W raw inputs, oldest first), which holds the last W inputs of (old state ++ x) after.
// w is [C, W] (or [C, 1, W]).
absl::Status ShortConv(const ExecContext& ctx, const TensorView& x, const TensorView& w,
                       const Segments& segs, const TensorView& state, Activation act,
                       const TensorView& y);

// Several convs over the same segments and activation, each with its own input, weights, state and
// output (a mixer's q, k and v convs): ShortConv for each group, all in one launch on CUDA. Each
// group is checked as ShortConv checks it; no output may overlap any group's input. 1 to
// kMaxConvGroups groups.
struct ConvGroup {
  TensorView x, w, state, y;
};
inline constexpr int kMaxConvGroups = 4;
absl::Status ShortConvs(const ExecContext& ctx, absl::Span<const ConvGroup> groups,
                        const Segments& segs, Activation act);

}  // namespace linfer
