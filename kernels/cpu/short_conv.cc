// Short causal depthwise conv (CPU): per segment and channel, a sliding window over
// [state ++ x].
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/parallel.h"

namespace linfer::cpu {
namespace {

// Below this many channel-tokens a call runs on the calling thread: entering an OpenMP region
// costs more than the work (a decode step calls this once per sequence and layer).
constexpr int64_t kParallelWork = 4096;
// Channels per parallel task.
constexpr int64_t kChannelBlock = 64;

// Σ_i w[i]·in[i] in i order. One out-of-line function for the decode and prefill paths, so the
// compiler cannot vectorise or contract them differently (batch invariance needs the same bits).
[[gnu::noinline]] float WindowSum(const float* w, const float* in, int64_t width) {
  float acc = 0.0f;
  for (int64_t i = 0; i < width; ++i) acc = std::fma(w[i], in[i], acc);
  return acc;
}

// Channels [c0, c1) of one sequence; x and y rows are `ld` floats apart. `window` has room for
// width + t_len floats (unused when t_len == 1).
void ConvChannels(const float* xs, const float* ws, float* st, float* ys, int64_t t_len,
                  int64_t ldx, int64_t ldy, int64_t width, Activation act, int64_t c0, int64_t c1,
                  float* window) {
  for (int64_t c = c0; c < c1; ++c) {
    float* s = st + c * width;
    const float* wc = ws + c * width;
    if (t_len == 1) {  // decode: shift the state by one input, then the general path's sum
      for (int64_t i = 0; i + 1 < width; ++i) s[i] = s[i + 1];
      s[width - 1] = xs[c];
      ys[c] = linfer::Activate(act, WindowSum(wc, s, width));
      continue;
    }
    // window = [state[c, 0..W) , x[0..T, c)]
    for (int64_t i = 0; i < width; ++i) window[i] = s[i];
    for (int64_t t = 0; t < t_len; ++t) window[width + t] = xs[t * ldx + c];
    for (int64_t t = 0; t < t_len; ++t) {
      const float* in = window + t + 1;  // inputs t−W+1 .. t
      ys[t * ldy + c] = linfer::Activate(act, WindowSum(wc, in, width));
    }
    for (int64_t i = 0; i < width; ++i) s[i] = window[t_len + i];
  }
}

}  // namespace

absl::Status ShortConv(const ExecContext&, const TensorView& x, const TensorView& w,
                       const Segments& segs, const TensorView& state, Activation act,
                       const TensorView& y) {
  const int64_t c_len = x.dim(1);
  const int64_t width = w.dim(-1);
  const float* ws = w.data<const float>();
  for (const Segment& seg : segs.host) {
    const int64_t t_len = seg.num_tokens;
    const float* xs = x.data<const float>() + seg.row_begin * x.row_stride();
    float* ys = y.data<float>() + seg.row_begin * y.row_stride();
    float* st = state.data<float>() + seg.slot * c_len * width;
    const int64_t blocks = (c_len + kChannelBlock - 1) / kChannelBlock;
    ParallelFor(blocks, c_len * t_len > kParallelWork, [&](int64_t b) {
      std::vector<float> window(t_len > 1 ? width + t_len : 0);
      ConvChannels(xs, ws, st, ys, t_len, x.row_stride(), y.row_stride(), width, act,
                   b * kChannelBlock, std::min(c_len, (b + 1) * kChannelBlock), window.data());
    });
  }
  return absl::OkStatus();
}

}  // namespace linfer::cpu
