// Dense matrix products on f32 tensors (OpenBLAS, multithreaded).
#pragma once

#include "absl/status/status.h"
#include "kernels/tensor.h"

namespace linfer {

// nn.Linear: y[M,N] = x[M,K] · w[N,K]ᵀ (+ bias[N] when bias is non-null). All f32, contiguous.
// `accumulate` adds into y instead of overwriting it. Call it outside parallel regions.
absl::Status Linear(const TensorView& x, const TensorView& w, const TensorView& y,
                    const TensorView* bias = nullptr, bool accumulate = false);

}  // namespace linfer
