// Presample (kernels/presample.h) on CUDA: per row of logits, the top-K ids and logits (largest
// first, lower id first among equals, NaN lowest), the argmax and the log-sum-exp.
// Stage 1, one block per (row, slice of ≤ 8192 ids): the slice's order keys (an order-preserving
// uint32 of each float, NaN = 0) go to shared memory with an online (max, Σe^{x−max}); a 4-pass
// radix select (8 bits at a time, shared-memory histograms) finds the slice's K-th largest key;
// the keys above it and, in id order, the first equal ones make the slice's K candidates.
// Stage 2, one block per row: a bitonic sort in shared memory of the slices' candidates (as
// key << 32 | ~id, unique, so descending order is the output order) and the merge of the slice
// statistics.
// Reads the logits once; everything else is on-chip or K·slices candidates per row.
#include <algorithm>
#include <cstdint>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/ops.h"

namespace linfer::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxSlice = 8192;
constexpr int kMaxCandidates = 4096;  // slices · K per row

__device__ inline uint32_t OrderKey(float x) {  // = kernels/cpu/presample.cc
  if (isnan(x)) return 0;
  const uint32_t bits = __float_as_uint(x == 0.0f ? 0.0f : x);  // −0 is +0
  return (bits & 0x80000000u) ? ~bits : bits | 0x80000000u;
}

struct Stats {  // online log-sum-exp of a set: max (NaN-free), Σ e^{x − max}, any non-NaN seen
  float m, s;
  bool any;
};

__device__ inline Stats Merge(Stats a, Stats b) {
  const float m = fmaxf(a.m, b.m);
  auto part = [m](const Stats& x) { return x.m == -INFINITY ? x.s * 0.0f : x.s * expf(x.m - m); };
  return {m, m == -INFINITY ? a.s + b.s : part(a) + part(b), a.any || b.any};
}

__device__ Stats BlockMerge(Stats st, Stats* scratch) {
  for (int o = 16; o > 0; o >>= 1) {
    Stats other{__shfl_xor_sync(0xffffffffu, st.m, o), __shfl_xor_sync(0xffffffffu, st.s, o),
                __shfl_xor_sync(0xffffffffu, st.any, o) != 0};
    st = Merge(st, other);
  }
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = st;
  __syncthreads();
  Stats total = scratch[0];
  for (int i = 1; i < kThreads / 32; ++i) total = Merge(total, scratch[i]);
  __syncthreads();
  return total;
}

struct Args {
  Mat logits;
  int64_t vocab, slice;
  int k, slices;
  unsigned long long* cand;  // [B, slices, K]
  float* stats;              // [B, slices, 3]
  int32_t* top_ids;
  float* top_logits;
  int32_t* argmax;
  float* lse;
};

__global__ void __launch_bounds__(kThreads) SliceKernel(Args p) {
  __shared__ uint32_t keys[kMaxSlice];
  __shared__ uint32_t hist[256];
  __shared__ Stats scratch[kThreads / 32];
  __shared__ uint32_t shared_digit, shared_remaining, taken_count, warp_counts[kThreads / 32];
  const int64_t row = blockIdx.y, v0 = blockIdx.x * p.slice;
  const int len = static_cast<int>(Min64(p.slice, p.vocab - v0));
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const float* x = &p.logits(row, v0);
  Stats st{-INFINITY, 0.0f, false};
  for (int i = tid; i < len; i += kThreads) {
    const float v = x[i];
    keys[i] = OrderKey(v);
    if (isnan(v)) {
      st.s = NAN;
    } else {
      st.any = true;
      if (v > st.m) {
        st.s = st.s * expf(st.m - v) + 1.0f;
        st.m = v;
      } else if (v != -INFINITY) {
        st.s += expf(v - st.m);
      }
    }
  }
  st = BlockMerge(st, scratch);  // also orders the key stores before the selection
  float* out_stats = p.stats + (row * p.slices + blockIdx.x) * 3;
  if (tid == 0) out_stats[0] = st.m, out_stats[1] = st.s, out_stats[2] = st.any ? 1.0f : 0.0f;

  unsigned long long* cand = p.cand + (row * p.slices + blockIdx.x) * p.k;
  auto combined = [&](int i) {
    return (static_cast<unsigned long long>(keys[i]) << 32) | ~static_cast<uint32_t>(v0 + i);
  };
  if (len <= p.k) {  // the whole slice is a candidate (padding 0 sorts below every candidate)
    for (int i = tid; i < p.k; i += kThreads) cand[i] = i < len ? combined(i) : 0;
    return;
  }
  uint32_t prefix = 0, mask = 0, remaining = static_cast<uint32_t>(p.k);
  for (int shift = 24; shift >= 0; shift -= 8) {
    hist[tid] = 0;
    __syncthreads();
    for (int i = tid; i < len; i += kThreads) {
      if ((keys[i] & mask) == prefix) atomicAdd(&hist[(keys[i] >> shift) & 255u], 1u);
    }
    __syncthreads();
    if (tid == 0) {
      uint32_t above = 0;
      int d = 255;
      for (; d > 0 && above + hist[d] < remaining; --d) above += hist[d];
      shared_digit = static_cast<uint32_t>(d);
      shared_remaining = remaining - above;
    }
    __syncthreads();
    prefix |= shared_digit << shift;
    mask |= 255u << shift;
    remaining = shared_remaining;
  }
  // prefix = the K-th largest key; `remaining` of the keys equal to it belong to the top K.
  const int above_count = p.k - static_cast<int>(remaining);
  if (tid == 0) taken_count = 0;
  __syncthreads();
  for (int i = tid; i < len; i += kThreads) {
    if (keys[i] > prefix) cand[atomicAdd(&taken_count, 1u)] = combined(i);
  }
  uint32_t taken = 0;  // equal keys, in id order, until `remaining` are taken
  for (int base = 0; base < len && taken < remaining; base += kThreads) {
    const int i = base + tid;
    const bool eq = i < len && keys[i] == prefix;
    const uint32_t ballot = __ballot_sync(0xffffffffu, eq);
    if (lane == 0) warp_counts[warp] = __popc(ballot);
    __syncthreads();
    uint32_t before = 0, total = 0;
    for (int wi = 0; wi < kThreads / 32; ++wi) {
      if (wi < warp) before += warp_counts[wi];
      total += warp_counts[wi];
    }
    const uint32_t rank = taken + before + __popc(ballot & ((1u << lane) - 1u));
    if (eq && rank < remaining) cand[above_count + rank] = combined(i);
    taken += total;
    __syncthreads();
  }
}

__global__ void __launch_bounds__(kThreads) MergeKernel(Args p) {
  __shared__ unsigned long long items[kMaxCandidates];
  __shared__ Stats scratch[kThreads / 32];
  const int64_t row = blockIdx.x;
  const int n = p.slices * p.k, tid = threadIdx.x;
  for (int i = tid; i < n; i += kThreads) items[i] = p.cand[row * n + i];
  Stats st{-INFINITY, 0.0f, false};
  for (int i = tid; i < p.slices; i += kThreads) {
    const float* s = p.stats + (row * p.slices + i) * 3;
    st = Merge(st, Stats{s[0], s[1], s[2] != 0.0f});
  }
  st = BlockMerge(st, scratch);
  // A bitonic sort of the candidates, largest first (padding 0 sorts last): log₂(m)·(log₂(m)+1)/2
  // phases of m/2 compare-exchanges, one barrier each. (K rounds of a block-wide max took 61 µs
  // per step for K = 64 on an H200: two barriers and a pass over every candidate per round.)
  int m = 1;
  while (m < n) m <<= 1;
  for (int i = n + tid; i < m; i += kThreads) items[i] = 0;
  __syncthreads();
  for (int size = 2; size <= m; size <<= 1) {
    for (int stride = size / 2; stride > 0; stride >>= 1) {
      for (int i = tid; i < m / 2; i += kThreads) {
        const int lo = ((i & ~(stride - 1)) << 1) | (i & (stride - 1)), hi = lo + stride;
        const unsigned long long a = items[lo], b = items[hi];
        if ((a < b) == ((lo & size) == 0)) items[lo] = b, items[hi] = a;  // descending run
      }
      __syncthreads();
    }
  }
  for (int r = tid; r < p.k; r += kThreads) {
    const int32_t id = static_cast<int32_t>(~static_cast<uint32_t>(items[r] & 0xffffffffu));
    p.top_ids[row * p.k + r] = id;
    p.top_logits[row * p.k + r] = p.logits(row, id);
    if (r == 0) p.argmax[row] = id;
  }
  if (tid == 0) {
    p.lse[row] = !st.any ? NAN : (isinf(st.m) ? st.m : st.m + logf(st.s));
  }
}

}  // namespace

absl::Status Presample(const ExecContext& ctx, const TensorView& logits,
                       const PresampleOutput& out) {
  const int64_t rows = logits.dim(0), vocab = logits.dim(1);
  const int k = static_cast<int>(out.top_ids.dim(1));
  ASSIGN_OR_RETURN(const int sms, DeviceAttribute(cudaDevAttrMultiProcessorCount));
  // Enough slices for ≥ 2 blocks per SM over the batch, each of ≥ 2048 ids (≤ 8192), and at most
  // kMaxCandidates candidates per row.
  const int64_t min_slices = CeilDiv(vocab, kMaxSlice), max_slices = kMaxCandidates / k;
  if (min_slices > max_slices) {
    return absl::UnimplementedError(absl::StrCat("Presample on CUDA: vocabulary ", vocab,
                                                 " with K = ", k, " needs ", min_slices,
                                                 " slices, more than ", max_slices));
  }
  const int64_t wanted = std::min(CeilDiv(2 * int64_t{sms}, rows), CeilDiv(vocab, 2048));
  const int slices = static_cast<int>(std::clamp(wanted, min_slices, max_slices));
  if (rows > 65535) return absl::InvalidArgumentError("Presample on CUDA: more than 65535 rows");
  ASSIGN_OR_RETURN(const TensorView cand, Scratch(ctx, DType::kI64, {rows, slices, k}));
  ASSIGN_OR_RETURN(const TensorView stats, Scratch(ctx, DType::kF32, {rows, slices, 3}));
  const Args p{AsMat(logits),
               vocab,
               CeilDiv(vocab, slices),
               k,
               slices,
               static_cast<unsigned long long*>(cand.raw()),
               stats.data<float>(),
               out.top_ids.data<int32_t>(),
               out.top_logits.data<float>(),
               out.argmax.data<int32_t>(),
               out.logsumexp.data<float>()};
  SliceKernel<<<dim3(static_cast<unsigned>(slices), static_cast<unsigned>(rows)), kThreads, 0,
                Stream(ctx)>>>(p);
  RETURN_IF_ERROR(CheckLaunch("PresampleSliceKernel"));
  MergeKernel<<<static_cast<unsigned>(rows), kThreads, 0, Stream(ctx)>>>(p);
  return CheckLaunch("PresampleMergeKernel");
}

}  // namespace linfer::cuda
