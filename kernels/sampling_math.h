// The arithmetic of a temperature draw, shared by the host sampler (engine/sampler.cc) and the
// pre-sampler's CPU twin (kernels/cpu/presample.cc), and repeated operation for operation by the
// CUDA pre-sampler (kernels/cuda/presample.cu), so that a draw made on the device picks the token
// the host picks from the same row and the same uniform, and sums to the same double:
//   w_v = exp(max(−87, (x_v − m) · inv_t))   m = the row's largest logit, inv_t = 1 / temperature
//   token = the first v with u · Σw < Σ_{v' ≤ v} w_v'   (inverse CDF in id order, u in [0, 1))
// The exponential is Cephes' expf polynomial in plain float multiplies and adds, each rounded on
// its own (this file is compiled with -ffp-contract=off and the CUDA twin uses __fmul_rn /
// __fadd_rn): the same bits on every device. The sums are doubles added in one fixed order that a
// warp runs in parallel (WeightSegment, SegmentSum, SumWeights) and the draw's running sum is
// sequential, so both devices reach the same sums and the same token.
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

// The fixed order of the sums. A row of `vocab` weights is cut into segments of WeightSegment
// ids (256 · ⌈⌈vocab / 256⌉ / 2048⌉: at most 2048 segments; the last one shorter). A segment's sum
// (SegmentSum) is 32 lane sums — lane l adds ids l, l + 32, l + 64, … of the segment in order —
// folded as a warp's butterfly: s_l ← s_l + s_(l xor o) for o = 16, 8, 4, 2, 1. The row's sum
// (SumWeights) adds its segments' sums in order.
int64_t WeightSegment(int64_t vocab);
double SegmentSum(const float* w, size_t n);
double SumWeights(const float* w, size_t n);

// The inverse-CDF draw over weights w (not all 0) with u in [0, 1): target = u · SumWeights(w);
// the first segment whose sum takes the running sum of segment sums (from 0, in order) past the
// target; from there, the first id i at which the running sum plus w[i], w[i + 1], … (one at a
// time, in order) exceeds the target; when rounding leaves it at or below, the last id of
// positive weight. `total`, if given, receives SumWeights(w).
int32_t DrawFromWeights(absl::Span<const float> w, double u, double* total = nullptr);

// What logit_bias and the penalties do to one token's logit (vLLM's order): + bias (when the token
// has an entry); then, when it is in the context (prompt or output) and repetition ≠ 1, a
// positive logit divided by `repetition`, a negative one multiplied; then, when it is in the
// output (count > 0) and a penalty is set, − frequency · count (one fused multiply-add) −
// presence. One rounding per operation, on every caller's path (this file is compiled without
// contraction): the whole-row sampler and the one that works from the K best agree bit for bit.
struct LogitAdjustment {
  bool has_bias = false;
  float bias = 0.0f;
  bool in_context = false;
  float repetition = 1.0f;
  int32_t count = 0;  // occurrences in the output
  float frequency = 0.0f, presence = 0.0f;
};
float PenalizedLogit(float x, const LogitAdjustment& a);

}  // namespace linfer
