// The arithmetic of a temperature draw, shared by the host sampler (engine/sampler.cc) and the
// pre-sampler's CPU twin (kernels/cpu/presample.cc), and repeated operation for operation by the
// CUDA pre-sampler (kernels/cuda/presample.cu), so that a draw made on the device picks the token
// the host would pick from the same row and the same uniform:
//   w_v = exp(max(−87, (x_v − m) · inv_t))   m = the row's largest logit, inv_t = 1 / temperature
//   token = the first v with u · Σw < Σ_{v' ≤ v} w_v'   (inverse CDF in id order, u in [0, 1))
// The exponential is Cephes' expf polynomial in plain float multiplies and adds, each rounded on
// its own (this file is compiled with -ffp-contract=off and the CUDA twin uses __fmul_rn /
// __fadd_rn): the weights are the same bits on every device. The sums are in double; their order
// differs between devices, so a device's token differs from the host's only when u · Σw falls
// within double rounding of a boundary between two tokens.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/types/span.h"

namespace linfer {

// Below this, exp() is 0 (exp(−87) ≈ 1.6e-38, the edge of normal floats).
inline constexpr float kSampleExpMin = -87.0f;

// u = bits · 2⁻⁵³ from the low 53 bits: a uniform in [0, 1) fully specified by one 64-bit draw
// (a generator's output shifted right by 11).
double UniformFromBits(uint64_t bits);

// w[i] = exp(max(kSampleExpMin, (x[i] − max) · inv_t)), exactly 0 at kSampleExpMin and for −inf.
// `max` is the row's largest finite logit.
void SampleWeights(absl::Span<const float> x, float max, float inv_t, float* w);

// Σ w[i] in double, in a fixed order (eight running sums over blocks of eight, then the tail):
// the same result for the same values wherever they lie in memory.
double SumWeights(const float* w, size_t n);

// The inverse-CDF draw over weights w (not all 0) with u in [0, 1): the first i with
// u · SumWeights(w) < w[0] + … + w[i] (blocks of 256 skipped by their sums); when rounding leaves
// u · Σw at or above the running total, the last token with a positive weight.
int32_t DrawFromWeights(absl::Span<const float> w, double u);

}  // namespace linfer
