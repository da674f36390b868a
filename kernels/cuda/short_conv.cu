// Short causal depthwise conv with slot-indexed rolling state (kernels/short_conv.h):
//   y_t[c] = act(Σ_{i<W} w[c,i] · in_{t−W+1+i}[c]),  in_j = x_j for j ≥ 0, state[slot][c][W + j]
//   for j < 0 state[slot][c][i] ← (state ++ x)[n + i], i < W (the last W raw inputs, oldest first)
// Mapping: blockIdx.z = segment, blockIdx.y = a 64-token block of it, threads over channels
// (coalesced rows). A thread walks its tokens, re-reading the W-wide window (L1 hits). When every
// segment fits one token block (decode), the same thread rewrites the state after its outputs;
// otherwise StateKernel rewrites it after all outputs read the old state.
#include <algorithm>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/ops.h"

namespace linfer::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kTokensPerBlock = 64;
constexpr int kMaxWidth = 16;

struct ConvArgs {
  Mat x, y;
  const float* w;  // [C, W]
  float* state;    // [slots, C, W]
  const int64_t* segs;
  int64_t channels;
  int width, act;
  bool fused_state;
};

__device__ inline float Input(const ConvArgs& p, const Row4& s, const float* st, int64_t c,
                              int64_t j) {
  return j >= 0 ? p.x(s.row_begin + j, c) : st[p.width + j];
}

__global__ void ConvKernel(ConvArgs p) {
  const Row4 s = LoadSegment(p.segs, blockIdx.z);
  const int64_t t0 = int64_t{blockIdx.y} * kTokensPerBlock;
  const int64_t c = blockIdx.x * int64_t{kThreads} + threadIdx.x;
  if (t0 >= s.num_tokens || c >= p.channels) return;
  float w[kMaxWidth];
#pragma unroll
  for (int i = 0; i < kMaxWidth; ++i) w[i] = i < p.width ? p.w[c * p.width + i] : 0.0f;
  float* st = p.state + (s.slot * p.channels + c) * p.width;
  const int64_t t1 = min(s.num_tokens, t0 + kTokensPerBlock);
  for (int64_t t = t0; t < t1; ++t) {
    float acc = 0.0f;
#pragma unroll
    for (int i = 0; i < kMaxWidth; ++i) {
      if (i < p.width) acc += w[i] * Input(p, s, st, c, t - p.width + 1 + i);
    }
    p.y(s.row_begin + t, c) = DeviceActivate(p.act, acc);
  }
  if (p.fused_state) {  // this thread alone read this channel's state: safe to rewrite in order
    for (int i = 0; i < p.width; ++i) {
      const int64_t j = s.num_tokens - p.width + i;  // index into x; < 0 reaches the old state
      st[i] = j >= 0 ? p.x(s.row_begin + j, c) : st[p.width + j];
    }
  }
}

// Rewrites the states after ConvKernel (multi-block segments): one thread per (segment, channel).
__global__ void StateKernel(ConvArgs p) {
  const Row4 s = LoadSegment(p.segs, blockIdx.y);
  const int64_t c = blockIdx.x * int64_t{kThreads} + threadIdx.x;
  if (c >= p.channels) return;
  float* st = p.state + (s.slot * p.channels + c) * p.width;
  for (int i = 0; i < p.width; ++i) {
    const int64_t j = s.num_tokens - p.width + i;
    st[i] = j >= 0 ? p.x(s.row_begin + j, c) : st[p.width + j];
  }
}

}  // namespace

absl::Status ShortConv(const ExecContext& ctx, const TensorView& x, const TensorView& w,
                       const Segments& segs, const TensorView& state, Activation act,
                       const TensorView& y) {
  const int64_t width = w.dim(-1);
  if (width > kMaxWidth) {
    return absl::UnimplementedError(
        absl::StrCat("ShortConv on CUDA: kernel width ", width, " > ", kMaxWidth));
  }
  int64_t max_tokens = 0;
  for (const Segment& s : segs.host) max_tokens = std::max(max_tokens, s.num_tokens);
  if (max_tokens == 0 || x.dim(1) == 0) return absl::OkStatus();
  const int64_t token_blocks = CeilDiv(max_tokens, kTokensPerBlock);
  ConvArgs p{AsMat(x),
             AsMat(y),
             w.data<const float>(),
             state.data<float>(),
             segs.device.data<const int64_t>(),
             x.dim(1),
             static_cast<int>(width),
             static_cast<int>(act),
             token_blocks == 1};
  const unsigned channel_blocks = static_cast<unsigned>(CeilDiv(p.channels, kThreads));
  const unsigned n = static_cast<unsigned>(segs.host.size());
  ConvKernel<<<dim3(channel_blocks, static_cast<unsigned>(token_blocks), n), kThreads, 0,
               Stream(ctx)>>>(p);
  RETURN_IF_ERROR(CheckLaunch("ConvKernel"));
  if (!p.fused_state) {
    StateKernel<<<dim3(channel_blocks, n), kThreads, 0, Stream(ctx)>>>(p);
    RETURN_IF_ERROR(CheckLaunch("ConvStateKernel"));
  }
  return absl::OkStatus();
}

}  // namespace linfer::cuda
