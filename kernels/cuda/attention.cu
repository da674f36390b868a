// Attention (kernels/attention.h) on the device. Two launches per call:
//   1. read-only attention: one warp per (packed row, query head); the warp's lanes split the
//      head dimension (lane e holds features e, e+32, …) and stream over the visible keys
//      j ∈ [lo, pos] with an online softmax (running max m, sum l, accumulator a):
//        s_j = scale · q·k_j;  m' = max(m, s_j);  a ← a·e^{m−m'} + e^{s_j−m'} v_j;
//        l ← l·e^{m−m'} + e^{s_j−m'};  out = a / l.
//      Keys of positions before the segment's start come from the cache (paged blocks through
//      the step's block table, or the slot's ring); keys of this step's own tokens come straight
//      from the new k/v rows. So nothing is written before every query has read, and a ring is
//      correct even when a segment has more new tokens than the window.
//   2. writes the new keys and values into the cache (a ring keeps the last `window` only).
// Row → segment: a binary search over the device segment table's row_begin column.
// Not a tensor-core kernel: decode reads each key once per query head (GQA groups re-read it from
// L2); prefill is O(T·pos·D) CUDA-core work. Good enough for the hybrids' few attention layers;
// a FlashAttention-style tiled kernel is the follow-up when it shows in profiles.
#include <algorithm>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/ops.h"

namespace linfer::cuda {
namespace {

constexpr int kMaxPerLane = 16;  // head_dim ≤ 512
constexpr int kWarpsPerBlock = 4;

struct AttnArgs {
  Mat q, k, v, out;
  const int64_t* segs;
  int64_t num_segs, total_rows;
  const int32_t* blocks;  // [num_segs, max_blocks] (paged)
  int64_t max_blocks;
  int block_tokens;
  float* storage;
  bool ring;
  int q_heads, kv_heads, head_dim, window;
  float scale;
};

__device__ int64_t SegmentOfRow(const int64_t* segs, int64_t n, int64_t row) {
  int64_t lo = 0, hi = n - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (segs[4 * mid] <= row) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

// The cached K row (kv head 0) of position `pos` of segment `si`; V is `value_offset` after it.
__device__ inline float* CacheRow(const AttnArgs& p, int64_t si, const Row4& s, int64_t pos) {
  const int64_t hd = int64_t{p.kv_heads} * p.head_dim;
  if (p.ring) return p.storage + ((s.slot * 2) * p.window + pos % p.window) * hd;
  const int32_t block = p.blocks[si * p.max_blocks + pos / p.block_tokens];
  return p.storage + ((int64_t{block} * p.block_tokens + pos % p.block_tokens) * 2) * hd;
}

__global__ void AttendKernel(AttnArgs p) {
  const int lane = threadIdx.x & 31;
  const int64_t unit = int64_t{blockIdx.x} * kWarpsPerBlock + (threadIdx.x >> 5);
  if (unit >= p.total_rows * p.q_heads) return;
  const int64_t row = unit / p.q_heads;
  const int h = static_cast<int>(unit % p.q_heads);
  const int64_t si = SegmentOfRow(p.segs, p.num_segs, row);
  const Row4 s = LoadSegment(p.segs, si);
  const int64_t pos = s.position + (row - s.row_begin);
  const int kvh = h / (p.q_heads / p.kv_heads);
  const int64_t lo = p.window > 0 ? pos - p.window + 1 : 0;
  const int64_t first = lo < 0 ? 0 : lo;
  const int64_t hd = int64_t{p.kv_heads} * p.head_dim;
  const int64_t value_offset = p.ring ? int64_t{p.window} * hd : hd;
  const int per_lane = (p.head_dim + 31) / 32;

  float qr[kMaxPerLane], acc[kMaxPerLane];
  const float* qh = &p.q(row, int64_t{h} * p.head_dim);
#pragma unroll
  for (int e = 0; e < kMaxPerLane; ++e) {
    const int x = lane + 32 * e;
    qr[e] = (e < per_lane && x < p.head_dim) ? qh[x] : 0.0f;
    acc[e] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  for (int64_t j = first; j <= pos; ++j) {
    const float *kj, *vj;
    if (j >= s.position) {  // this step's own token
      const int64_t r = s.row_begin + (j - s.position);
      kj = &p.k(r, int64_t{kvh} * p.head_dim);
      vj = &p.v(r, int64_t{kvh} * p.head_dim);
    } else {
      kj = CacheRow(p, si, s, j) + int64_t{kvh} * p.head_dim;
      vj = kj + value_offset;
    }
    float part = 0.0f;
#pragma unroll
    for (int e = 0; e < kMaxPerLane; ++e) {
      const int x = lane + 32 * e;
      if (e < per_lane && x < p.head_dim) part += qr[e] * kj[x];
    }
    const float sc = p.scale * WarpSum(part);
    const float m_new = fmaxf(m, sc);
    const float carry = expf(m - m_new), w = expf(sc - m_new);
    l = l * carry + w;
#pragma unroll
    for (int e = 0; e < kMaxPerLane; ++e) {
      const int x = lane + 32 * e;
      if (e < per_lane && x < p.head_dim) acc[e] = acc[e] * carry + w * vj[x];
    }
    m = m_new;
  }
  float* o = &p.out(row, int64_t{h} * p.head_dim);
  const float inv = 1.0f / l;
#pragma unroll
  for (int e = 0; e < kMaxPerLane; ++e) {
    const int x = lane + 32 * e;
    if (e < per_lane && x < p.head_dim) o[x] = acc[e] * inv;
  }
}

// One block per segment; threads stride over (token, feature) of the tokens the cache keeps.
__global__ void WriteKernel(AttnArgs p) {
  const int64_t si = blockIdx.x;
  const Row4 s = LoadSegment(p.segs, si);
  const int64_t hd = int64_t{p.kv_heads} * p.head_dim;
  const int64_t value_offset = p.ring ? int64_t{p.window} * hd : hd;
  // A ring keeps only the last `window` of the new tokens (earlier ones would be overwritten).
  const int64_t skip = p.ring && s.num_tokens > p.window ? s.num_tokens - p.window : 0;
  const int64_t n = (s.num_tokens - skip) * hd;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const int64_t t = skip + i / hd, x = i % hd;
    float* dst = CacheRow(p, si, s, s.position + t);
    dst[x] = p.k(s.row_begin + t, x);
    dst[value_offset + x] = p.v(s.row_begin + t, x);
  }
}

}  // namespace

absl::Status Attention(const ExecContext& ctx, const TensorView& q, const TensorView& k,
                       const TensorView& v, const Segments& segs, const KvCacheRef& kv,
                       const AttentionParams& ap, const TensorView& out) {
  const int64_t rows = segs.total_tokens();
  if (rows == 0) return absl::OkStatus();
  if (ap.head_dim > 32 * kMaxPerLane) {
    return absl::UnimplementedError(
        absl::StrCat("CUDA attention: head_dim ", ap.head_dim, " exceeds ", 32 * kMaxPerLane));
  }
  const bool ring = kv.kind == KvCacheRef::Kind::kRing;
  const BlockTableView& bt = segs.blocks;
  const AttnArgs p{AsMat(q),
                   AsMat(k),
                   AsMat(v),
                   AsMat(out),
                   segs.device.data<const int64_t>(),
                   static_cast<int64_t>(segs.host.size()),
                   rows,
                   ring ? nullptr : bt.device.data<const int32_t>(),
                   bt.max_blocks,
                   bt.block_tokens,
                   kv.storage.data<float>(),
                   ring,
                   ap.q_heads,
                   ap.kv_heads,
                   ap.head_dim,
                   ap.window,
                   ap.scale};
  const int64_t warps = rows * ap.q_heads;
  AttendKernel<<<GridFor(warps, kWarpsPerBlock, (int64_t{1} << 31) - 1), 32 * kWarpsPerBlock, 0,
                 Stream(ctx)>>>(p);
  RETURN_IF_ERROR(CheckLaunch("AttendKernel"));
  WriteKernel<<<static_cast<unsigned>(segs.host.size()), 256, 0, Stream(ctx)>>>(p);
  return CheckLaunch("WriteKernel");
}

}  // namespace linfer::cuda
