// Short causal depthwise conv with slot-indexed rolling state (kernels/short_conv.h):
//   y_t[c] = act(Σ_{i<W} w[c,i] · in_{t−W+1+i}[c]),  in_j = x_j for j ≥ 0, state[slot][c][W + j]
//   for j < 0 state[slot][c][i] ← (state ++ x)[n + i], i < W (the last W raw inputs, oldest first)
// Mapping: blockIdx.z = segment, blockIdx.y = a 64-token block of it, blockIdx.x = a block of 128
// channels of one group (ShortConvs: a mixer's q, k and v convs share the launch), threads over
// channels (coalesced rows). A thread walks its tokens, re-reading the W-wide window (L1 hits).
// When every segment fits one token block (decode), the same thread rewrites the state after its
// outputs; otherwise StateKernel rewrites it after all outputs read the old state.
#include <algorithm>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/launch.cuh"
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
  int64_t channels;
  int width;
};

// The groups of one launch: group i owns channel blocks [first_block[i], first_block[i + 1]).
struct ConvBatch {
  ConvArgs g[kMaxConvGroups];
  int first_block[kMaxConvGroups + 1];
  int groups, act;
  const int64_t* segs;
  bool fused_state;
};

// This block's group and its first channel.
__device__ inline const ConvArgs& BlockGroup(const ConvBatch& b, int64_t* c0) {
  int gi = 0;
  while (gi + 1 < b.groups && static_cast<int>(blockIdx.x) >= b.first_block[gi + 1]) ++gi;
  *c0 = int64_t{static_cast<int>(blockIdx.x) - b.first_block[gi]} * kThreads;
  return b.g[gi];
}

__device__ inline float Input(const ConvArgs& p, const Row4& s, const float* st, int64_t c,
                              int64_t j) {
  return j >= 0 ? p.x(s.row_begin + j, c) : st[p.width + j];
}

__global__ void ConvKernel(ConvBatch b) {
  PdlEnter();
  const Row4 s = LoadSegment(b.segs, blockIdx.z);
  const int64_t t0 = int64_t{blockIdx.y} * kTokensPerBlock;
  int64_t c0 = 0;
  const ConvArgs& p = BlockGroup(b, &c0);
  const int64_t c = c0 + threadIdx.x;
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
    p.y(s.row_begin + t, c) = DeviceActivate(b.act, acc);
  }
  if (b.fused_state) {  // this thread alone read this channel's state: safe to rewrite in order
    for (int i = 0; i < p.width; ++i) {
      const int64_t j = s.num_tokens - p.width + i;  // index into x; < 0 reaches the old state
      st[i] = j >= 0 ? p.x(s.row_begin + j, c) : st[p.width + j];
    }
  }
}

// Rewrites the states after ConvKernel (multi-block segments): one thread per (segment, channel).
__global__ void StateKernel(ConvBatch b) {
  PdlEnter();
  const Row4 s = LoadSegment(b.segs, blockIdx.y);
  int64_t c0 = 0;
  const ConvArgs& p = BlockGroup(b, &c0);
  const int64_t c = c0 + threadIdx.x;
  if (c >= p.channels) return;
  float* st = p.state + (s.slot * p.channels + c) * p.width;
  for (int i = 0; i < p.width; ++i) {
    const int64_t j = s.num_tokens - p.width + i;
    st[i] = j >= 0 ? p.x(s.row_begin + j, c) : st[p.width + j];
  }
}

}  // namespace

absl::Status ShortConvs(const ExecContext& ctx, absl::Span<const ConvGroup> groups,
                        const Segments& segs, Activation act) {
  int64_t max_tokens = 0;
  for (const Segment& s : segs.host) max_tokens = std::max(max_tokens, s.num_tokens);
  const int64_t token_blocks = CeilDiv(max_tokens, kTokensPerBlock);
  ConvBatch b{};
  int64_t blocks = 0;
  for (const ConvGroup& g : groups) {
    const int64_t width = g.w.dim(-1);
    if (width > kMaxWidth) {
      return absl::UnimplementedError(absl::StrCat("ShortConv on CUDA: group ", b.groups,
                                                   "'s kernel width ", width, " > ", kMaxWidth));
    }
    b.first_block[b.groups] = static_cast<int>(blocks);
    b.g[b.groups++] = {AsMat(g.x),
                       AsMat(g.y),
                       g.w.data<const float>(),
                       g.state.data<float>(),
                       g.x.dim(1),
                       static_cast<int>(width)};
    blocks += CeilDiv(g.x.dim(1), kThreads);
  }
  b.first_block[b.groups] = static_cast<int>(blocks);
  b.act = static_cast<int>(act);
  b.segs = segs.device.data<const int64_t>();
  b.fused_state = token_blocks == 1;
  if (max_tokens == 0 || blocks == 0) return absl::OkStatus();
  if (blocks > (int64_t{1} << 31) - 1) {
    return absl::InvalidArgumentError(absl::StrCat("ShortConvs: ", blocks, " channel blocks"));
  }
  const unsigned n = static_cast<unsigned>(segs.host.size());
  LaunchKernel(ConvKernel,
               dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(token_blocks), n),
               kThreads, 0, Stream(ctx), b);
  RETURN_IF_ERROR(CheckLaunch("ConvKernel"));
  if (!b.fused_state) {
    LaunchKernel(StateKernel, dim3(static_cast<unsigned>(blocks), n), kThreads, 0, Stream(ctx), b);
    RETURN_IF_ERROR(CheckLaunch("ConvStateKernel"));
  }
  return absl::OkStatus();
}

}  // namespace linfer::cuda
