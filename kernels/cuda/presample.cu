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
// Draws (optional, stage 3), one block per row that draws: each warp sums the weights of whole
// segments (one double per segment in shared memory, by sampling_math.h's butterfly), then lane 0
// of warp 0 adds the segment sums in order to the one where u·Σw falls and walks its weights to
// the token. The weights and the order of every double addition are kernels/sampling_math.cc's:
// the same sum and the same token as the host sampler. Reads a drawing row once more.
#include <algorithm>
#include <cstdint>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/sampling_math.h"

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
  PdlEnter();
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
  PdlEnter();
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

constexpr int kDrawThreads = 512;
constexpr int kDrawWarps = kDrawThreads / 32;
constexpr int kMaxDrawSegments = 2048;

// kernels/sampling_math.cc SampleWeights for one logit, operation for operation, each rounded on
// its own (no multiply-add fused): exp(max(−87, (x − m)·inv_t)) by Cephes' expf polynomial.
__device__ inline float SampleWeight(float x, float m, float inv_t) {
  float c = __fmul_rn(__fsub_rn(x, m), inv_t);
  c = c < kSampleExpMin ? kSampleExpMin : c;
  const float n = __fsub_rn(__fadd_rn(__fmul_rn(c, 1.44269504f), 12582912.0f), 12582912.0f);
  const float r = __fadd_rn(__fsub_rn(c, __fmul_rn(n, 0.693359375f)), __fmul_rn(n, 2.12194440e-4f));
  float p = 1.9875691500e-4f;
  p = __fadd_rn(__fmul_rn(p, r), 1.3981999507e-3f);
  p = __fadd_rn(__fmul_rn(p, r), 8.3334519073e-3f);
  p = __fadd_rn(__fmul_rn(p, r), 4.1665795894e-2f);
  p = __fadd_rn(__fmul_rn(p, r), 1.6666665459e-1f);
  p = __fadd_rn(__fmul_rn(p, r), 5.0000001201e-1f);
  const int32_t keep = -static_cast<int32_t>(c > kSampleExpMin);
  const int32_t bits = ((static_cast<int32_t>(n) + 127) << 23) & keep;
  return __fmul_rn(__fadd_rn(__fadd_rn(__fmul_rn(__fmul_rn(p, r), r), r), 1.0f),
                   __int_as_float(bits));
}

__device__ inline double WarpSumDouble(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

struct DrawArgs {
  Mat logits;
  int64_t vocab, segment;  // segment: ids per segment, a multiple of 32
  int segments, k;
  const float* top_logits;
  const int32_t* top_ids;
  const float* inv_t;
  const int64_t* bits;
  double* weight_sum;
  int32_t* token;
  float* token_logit;
};

__global__ void __launch_bounds__(kDrawThreads) DrawKernel(DrawArgs p) {
  PdlEnter();
  __shared__ double seg_sum[kMaxDrawSegments];
  const int64_t row = blockIdx.x;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const float inv_t = p.inv_t[row];
  const float m = p.top_logits[row * p.k];
  if (!(inv_t > 0.0f) || !isfinite(m)) {  // no draw; or its argmax
    if (tid == 0) {
      const bool drawn = inv_t > 0.0f;
      p.weight_sum[row] = 0.0;
      p.token[row] = drawn ? p.top_ids[row * p.k] : -1;
      p.token_logit[row] = drawn ? m : 0.0f;
    }
    return;
  }
  const float* x = &p.logits(row, 0);
  for (int s = warp; s < p.segments; s += kDrawWarps) {
    const int64_t begin = s * p.segment, end = Min64(begin + p.segment, p.vocab);
    double acc = 0.0;
#pragma unroll 8
    for (int64_t i = begin + lane; i < end; i += 32) acc += SampleWeight(x[i], m, inv_t);
    acc = WarpSumDouble(acc);
    if (lane == 0) seg_sum[s] = acc;
  }
  __syncthreads();
  if (warp != 0) return;
  // Warp 0: the sums in sampling_math.cc's order — lane 0 adds the segment sums one at a time,
  // then walks the ids from the segment where the running sum passes the target, a chunk of 256
  // weights at a time (the warp computes them into shared memory, lane 0 adds them in order).
  __shared__ float chunk[256];
  double total = 0.0, acc = 0.0;
  int found = p.segments;
  if (lane == 0) {
    for (int s = 0; s < p.segments; ++s) total += seg_sum[s];
  }
  total = __shfl_sync(0xffffffffu, total, 0);
  const uint64_t bits = static_cast<uint64_t>(p.bits[row]) & ((uint64_t{1} << 53) - 1);
  const double target = static_cast<double>(bits) * 0x1.0p-53 * total;
  if (lane == 0) {
    for (found = 0; found < p.segments && !(target < acc + seg_sum[found]); ++found) {
      acc += seg_sum[found];
    }
  }
  found = __shfl_sync(0xffffffffu, found, 0);
  int64_t token = -1;
  for (int64_t c = int64_t{found} * p.segment; c < p.vocab && token < 0; c += 256) {
    for (int j = lane; j < 256; j += 32) {
      chunk[j] = c + j < p.vocab ? SampleWeight(x[c + j], m, inv_t) : 0.0f;
    }
    __syncwarp();
    if (lane == 0) {
      for (int j = 0; j < 256 && c + j < p.vocab; ++j) {
        acc += chunk[j];
        if (target < acc) {
          token = c + j;
          break;
        }
      }
    }
    token = __shfl_sync(0xffffffffu, token, 0);
    __syncwarp();
  }
  // Rounding left the target at or above the running sum: the last id of positive weight (the
  // row's maximum has weight 1, so there is one).
  for (int64_t c = (p.vocab - 1) / 32 * 32; token < 0 && c >= 0; c -= 32) {
    const int64_t i = c + lane;
    const bool positive = i < p.vocab && SampleWeight(x[i], m, inv_t) > 0.0f;
    const uint32_t ballot = __ballot_sync(0xffffffffu, positive);
    if (ballot != 0) token = c + 31 - __clz(ballot);
  }
  if (token < 0) token = p.top_ids[row * p.k];
  if (lane == 0) {
    p.weight_sum[row] = total;
    p.token[row] = static_cast<int32_t>(token);
    p.token_logit[row] = x[token];
  }
}

}  // namespace

int64_t MaxPresampleK(int64_t vocab) { return kMaxCandidates / CeilDiv(vocab, kMaxSlice); }

absl::Status Presample(const ExecContext& ctx, const TensorView& logits, const PresampleOutput& out,
                       const PresampleDraws* draws) {
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
  LaunchKernel(SliceKernel, dim3(static_cast<unsigned>(slices), static_cast<unsigned>(rows)),
               kThreads, 0, Stream(ctx), p);
  RETURN_IF_ERROR(CheckLaunch("PresampleSliceKernel"));
  LaunchKernel(MergeKernel, static_cast<unsigned>(rows), kThreads, 0, Stream(ctx), p);
  RETURN_IF_ERROR(CheckLaunch("PresampleMergeKernel"));
  if (draws == nullptr) return absl::OkStatus();
  // sampling_math.h's segments (at most kMaxDrawSegments of them).
  const int64_t segment = WeightSegment(vocab);
  if (CeilDiv(vocab, segment) > kMaxDrawSegments) {
    return absl::InternalError(absl::StrCat("Presample on CUDA: ", CeilDiv(vocab, segment),
                                            " weight segments, more than ", kMaxDrawSegments));
  }
  const DrawArgs d{AsMat(logits),
                   vocab,
                   segment,
                   static_cast<int>(CeilDiv(vocab, segment)),
                   k,
                   out.top_logits.data<float>(),
                   out.top_ids.data<int32_t>(),
                   draws->inv_temperature.data<float>(),
                   draws->uniform_bits.data<int64_t>(),
                   draws->weight_sum.data<double>(),
                   draws->token.data<int32_t>(),
                   draws->logit.data<float>()};
  LaunchKernel(DrawKernel, static_cast<unsigned>(rows), kDrawThreads, 0, Stream(ctx), d);
  return CheckLaunch("PresampleDrawKernel");
}

}  // namespace linfer::cuda
