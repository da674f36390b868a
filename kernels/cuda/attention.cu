// Attention (kernels/attention.h) on the device: read-only attention (1a for short segments, 1b
// one launch per prefill segment), then the cache write (2).
//  1a. one warp per (packed row, query head) — or with LINFER_CUDA_DECODE_ATTENTION=grouped per
//      (packed row, group of query heads of one kv head), each K and V row loaded once for the
//      group; the warp's lanes split the head dimension (lane e holds features e, e+32, …) and
//      stream over the visible keys j ∈ [lo, pos] with an online softmax (running max m, sum l,
//      accumulator a; one set per head):
//        s_j = scale · q·k_j;  m' = max(m, s_j);  a ← a·e^{m−m'} + e^{s_j−m'} v_j;
//        l ← l·e^{m−m'} + e^{s_j−m'};  out = a / l.
//      Keys of positions before the segment's start come from the cache (paged blocks through
//      the step's block table, or the slot's ring); keys of this step's own tokens come straight
//      from the new k/v rows. So nothing is written before every query has read, and a ring is
//      correct even when a segment has more new tokens than the window. Row → segment: a binary
//      search over the device segment table's row_begin column. Rows of segments with at least
//      kPrefillMinTokens new tokens are left to 1b (when head_dim ≤ 256): 1a's warps then cover
//      the other segments' rows only, numbered by a prefix sum (ShortPrefixKernel) that the
//      search runs over instead. When few (row, head)
//      pairs attend (a small decode batch), each one's keys are split into S equal ranges, one
//      warp each, whose (m, l, a) a second kernel joins (flash-decoding): S fills the GPU.
//  1b. attention_tensor.cu's tensor-core kernel, or with LINFER_CUDA_ATTENTION=tiled
//      attention_tiled.cu's CUDA-core one.
//   2. writes the new keys and values into the cache (a ring keeps the last `window` only).
// LINFER_CUDA_ATTENTION=simple in the environment turns 1b and the splits off (1a alone, as
// before they existed): for A/B benchmarks, and a way around them should one misbehave.
// 1a and 2 are f32 on CUDA cores: decode — one row per segment — is memory-bound either way.
#include <algorithm>
#include <limits>
#include <type_traits>

#include "kernels/cuda/attention_args.cuh"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/ops.h"

namespace linfer::cuda {
namespace {

constexpr int kMaxPerLane = 16;  // head_dim ≤ 512
constexpr int kWarpsPerBlock = 4;
// 1a's key splits: at most kMaxSplits per (row, head), each over at least kMinSplitKeys keys.
constexpr int kMaxSplits = 64;
constexpr int64_t kMinSplitKeys = 64;

// Splits that (row, head) pairs with `len` visible keys use: ⌈len / kMinSplitKeys⌉, at most
// `splits`.
__device__ inline int UsedSplits(int splits, int64_t len) {
  const int64_t n = (len + kMinSplitKeys - 1) / kMinSplitKeys;
  return n < splits ? static_cast<int>(n) : splits;
}

// kPerLane: features per lane, ⌈head_dim / 32⌉ rounded up to 1, 2, 4, 8 or 16. kGroup: the query
// heads a warp attends with together (AttendGroup: 1, or with LINFER_CUDA_DECODE_ATTENTION=grouped
// up to 8 heads of one kv head), so each K and V row it loads serves kGroup heads. kKv: the cache's
// element type (attention_args.cuh); with a bf16 cache and 2+ features a lane, the lane holds
// feature pairs (2·lane + 64·i, +1) and keeps its keys and values as bf16 pairs (one 4-byte load
// each from the cache), so a batch holds twice the keys in the same registers; otherwise features
// lane + 32·e as f32.
// The feature a lane's element e stands for: lane + 32·e, or with bf16 pairs 2·lane + 64·(e/2) +
// e % 2.
template <bool kPaired>
__device__ __forceinline__ int PairedFeature(int lane, int e) {
  return kPaired ? 2 * lane + 64 * (e >> 1) + (e & 1) : lane + 32 * e;
}
// Element e of a row's registers (f32 values, or bf16 pairs) as f32.
template <int kSlots>
__device__ __forceinline__ float Element(const float (&r)[kSlots], int e) {
  return r[e];
}
template <int kSlots>
__device__ __forceinline__ float Element(const __nv_bfloat162 (&r)[kSlots], int e) {
  return (e & 1) ? __high2float(r[e >> 1]) : __low2float(r[e >> 1]);
}

// Blocks an SM each instance must hold (its registers capped to fit). A __launch_bounds__ of 128
// threads alone lets nvcc 13.0 take more registers than it does without one (the 8-features-a-lane
// kernel: 128 → 159, 4 → 3 blocks), so every instance names its occupancy: per head (group 1) the
// one the H200 measured at ba0e522 (72 / 88 / 122 / 120 / 132 registers at 1 / 2 / 4 / 8 / 16
// features a lane), grouped the one nvcc chose unbounded before (by features a lane × heads).
constexpr int AttendMinBlocks(int per_lane, int group) {
  if (group == 1) return per_lane == 1 ? 7 : per_lane == 2 ? 5 : per_lane <= 8 ? 4 : 3;
  const int width = per_lane * group;
  return width == 2 ? 4 : width == 4 ? 3 : width <= 16 ? 4 : per_lane == 16 ? 2 : 3;
}

template <int kPerLane, int kGroup, int kKv>
__global__ void __launch_bounds__(32 * kWarpsPerBlock, AttendMinBlocks(kPerLane, kGroup))
    AttendKernel(AttnArgs p) {
  PdlEnter();
  constexpr bool kPacked = kKv == kKvBf16 && kPerLane >= 2;
  constexpr int kSlots = kPacked ? kPerLane / 2 : kPerLane;  // K / V registers a row, per lane
  using KvReg = std::conditional_t<kPacked, __nv_bfloat162, float>;
  const int lane = threadIdx.x & 31;
  const bool paired = p.kv_pairs;  // cached rows 4-byte aligned (kPacked)
  const int groups = p.q_heads / kGroup;
  const int64_t unit = int64_t{blockIdx.x} * kWarpsPerBlock + (threadIdx.x >> 5);
  if (unit >= p.short_rows * groups * p.splits) return;
  const int split = static_cast<int>(unit % p.splits);
  const int h0 = static_cast<int>(unit / p.splits % groups) * kGroup;
  const int64_t short_row = unit / p.splits / groups;
  int64_t si, row;
  ShortRow(p, short_row, &si, &row);
  const Row4 s = LoadSegment(p.segs, si);
  if (s.num_tokens >= p.tiled_min) return;  // the tiled kernel's
  const int64_t pos = s.position + (row - s.row_begin);
  const int kvh = h0 / (p.q_heads / p.kv_heads);
  const int64_t lo = p.window > 0 ? pos - p.window + 1 : 0;
  const int64_t first = lo < 0 ? 0 : lo;
  // This split's share of the visible keys [first, pos] (a short range uses fewer splits).
  const int64_t len = pos - first + 1;
  const int used = UsedSplits(p.splits, len);
  if (split >= used) return;
  const int64_t j_begin = first + len * split / used;
  const int64_t j_end = first + len * (split + 1) / used;

  float qr[kGroup][kPerLane], acc[kGroup][kPerLane], m[kGroup], l[kGroup];
#pragma unroll
  for (int g = 0; g < kGroup; ++g) {
    const float* qh = &p.q(row, int64_t{h0 + g} * p.head_dim);
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) {
      const int x = PairedFeature<kPacked>(lane, e);
      qr[g][e] = (x < p.head_dim) ? qh[x] : 0.0f;
      acc[g][e] = 0.0f;
    }
    m[g] = -INFINITY;
    l[g] = 0.0f;
  }
  // Keys in batches of kKeys: every key's block lookup, then its K and V rows, are loaded before
  // any is used, so a batch waits out two memory latencies rather than two per key (one key at a
  // time, a batch-1 decode over 4k cached keys ran at 7 % of the copy bandwidth on an H200); fewer
  // keys a batch where a lane holds more queries' features (registers: 158 at 8 features × 4
  // heads, 3 blocks an SM); bf16 pairs take half the registers a key, so 1.5× the keys (6 where
  // f32 takes 4: 8 spilled at the measured occupancy).
  constexpr int kWidth = kGroup * kSlots;  // K (and V) registers a key
  constexpr int kKeys = kPacked ? (kWidth >= 16  ? 2
                                   : kWidth >= 8 ? 3
                                   : kWidth >= 4 ? 6
                                                 : 8)
                                : (kWidth >= 16  ? 2
                                   : kWidth >= 8 ? 4
                                                 : 8);
  for (int64_t j0 = j_begin; j0 < j_end; j0 += kKeys) {
    KvReg kk[kKeys][kSlots], vv[kKeys][kSlots];
#pragma unroll
    for (int b = 0; b < kKeys; ++b) {
      const bool live = j0 + b < j_end;
      KvRow kj{}, vj{};
      if (live) KeyValueRows<kKv>(p, si, s, j0 + b, kvh, &kj, &vj);
#pragma unroll
      for (int i = 0; i < kSlots; ++i) {
        if constexpr (kPacked) {
          const int x = 2 * lane + 64 * i;
          const bool in = live && x < p.head_dim;
          kk[b][i] = in ? kj.Pair(x, p.head_dim, paired) : __floats2bfloat162_rn(0.0f, 0.0f);
          vv[b][i] = in ? vj.Pair(x, p.head_dim, paired) : __floats2bfloat162_rn(0.0f, 0.0f);
        } else {
          const int x = lane + 32 * i;
          kk[b][i] = live && x < p.head_dim ? kj.At<kKv>(x) : 0.0f;
          vv[b][i] = live && x < p.head_dim ? vj.At<kKv>(x) : 0.0f;
        }
      }
    }
#pragma unroll
    for (int g = 0; g < kGroup; ++g) {
      float sc[kKeys], m_new = m[g];
#pragma unroll
      for (int b = 0; b < kKeys; ++b) {
        float part = 0.0f;
#pragma unroll
        for (int e = 0; e < kPerLane; ++e) part += qr[g][e] * Element(kk[b], e);
        sc[b] = j0 + b < j_end ? p.scale * WarpSum(part) : -INFINITY;
        m_new = fmaxf(m_new, sc[b]);
      }
      const float carry = expf(m[g] - m_new);
      l[g] *= carry;
#pragma unroll
      for (int e = 0; e < kPerLane; ++e) acc[g][e] *= carry;
#pragma unroll
      for (int b = 0; b < kKeys; ++b) {
        const float w = expf(sc[b] - m_new);  // 0 past the range
        l[g] += w;
#pragma unroll
        for (int e = 0; e < kPerLane; ++e) acc[g][e] += w * Element(vv[b], e);
      }
      m[g] = m_new;
    }
  }
#pragma unroll
  for (int g = 0; g < kGroup; ++g) {
    const int h = h0 + g;
    if (p.splits > 1) {  // partials in (short row, query head, split) order, as CombineKernel reads
      float* part =
          p.partial + ((short_row * p.q_heads + h) * p.splits + split) * (2 + int64_t{p.head_dim});
      if (lane == 0) {
        part[0] = m[g];
        part[1] = l[g];
      }
#pragma unroll
      for (int e = 0; e < kPerLane; ++e) {
        const int x = PairedFeature<kPacked>(lane, e);
        if (x < p.head_dim) part[2 + x] = acc[g][e];
      }
      continue;
    }
    float* o = &p.out(row, int64_t{h} * p.head_dim);
    const float inv = 1.0f / l[g];
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) {
      const int x = PairedFeature<kPacked>(lane, e);
      if (x < p.head_dim) o[x] = acc[g][e] * inv;
    }
  }
}

// LINFER_CUDA_DECODE_ATTENTION: "heads" (the default: 1a's warps attend one query head each) or
// "grouped" (opt-in until a GPU run has passed and timed it: a warp attends every query head of
// a kv head at once, up to 8 and 32 features a lane in all). Why: with one head a warp, each K
// and V row is read once per query head of its kv head (from L2 after the first) — 4 times in
// Qwen3.5's attention, whose decode after 4k / 32k cached keys at batch 64 moved 0.53 / 0.55 of
// the copy bandwidth on an H200 (ba0e522).
int AttendGroup(const AttentionParams& ap) {
  static const bool grouped =
      EnvOption("LINFER_CUDA_DECODE_ATTENTION", {"heads", "grouped"}) == "grouped";
  if (!grouped) return 1;
  const int ratio = ap.q_heads / ap.kv_heads, lanes = LanesFor(ap.head_dim);
  int g = 8;
  while (g > 1 && (ratio % g != 0 || g * lanes > 32)) g /= 2;
  return g;
}

// Launches AttendKernel<lanes, group, the cache's dtype> (group 1, or 2, 4, 8 with group × lanes ≤
// 32); false for other values (nothing launched).
bool LaunchAttend(int lanes, int group, unsigned grid, cudaStream_t stream, const AttnArgs& p) {
  bool launched = false;
  WithLanes<kMaxPerLane>(lanes, [&](auto l) {
    constexpr int kLanes = decltype(l)::value;
    auto launch = [&](auto g) {
      constexpr int kGroup = decltype(g)::value;
      if constexpr (kGroup == 1 || kGroup * kLanes <= 32) {
        WithKvDType(p.kv_store, [&](auto kv) {
          LaunchKernel(AttendKernel<kLanes, kGroup, decltype(kv)::value>, grid, 32 * kWarpsPerBlock,
                       0, stream, p);
        });
        launched = true;
      }
    };
    WithLanes<8>(group, launch);  // the same powers of two as the lanes
  });
  return launched;
}

// Joins the splits of 1a, one warp per (row, head): M = max_s m_s, w_s = e^{m_s − M},
// out = Σ_s w_s a_s / Σ_s w_s l_s.
__global__ void CombineKernel(AttnArgs p) {
  PdlEnter();
  const int lane = threadIdx.x & 31;
  const int64_t unit = int64_t{blockIdx.x} * kWarpsPerBlock + (threadIdx.x >> 5);
  if (unit >= p.short_rows * p.q_heads) return;
  const int h = static_cast<int>(unit % p.q_heads);
  int64_t si, row;
  ShortRow(p, unit / p.q_heads, &si, &row);
  const Row4 s = LoadSegment(p.segs, si);
  if (s.num_tokens >= p.tiled_min) return;  // the tiled kernel's
  const int64_t pos = s.position + (row - s.row_begin);
  const int64_t lo = p.window > 0 ? pos - p.window + 1 : 0;
  const int used = UsedSplits(p.splits, pos - (lo < 0 ? 0 : lo) + 1);
  const int64_t stride = 2 + int64_t{p.head_dim};
  const float* part = p.partial + unit * p.splits * stride;
  float mx = -INFINITY;
  for (int i = 0; i < used; ++i) mx = fmaxf(mx, part[i * stride]);
  float l = 0.0f;
  for (int i = 0; i < used; ++i) {
    const float mi = part[i * stride];
    if (mi != -INFINITY) l += expf(mi - mx) * part[i * stride + 1];
  }
  const float inv = 1.0f / l;
  float* o = &p.out(row, int64_t{h} * p.head_dim);
  for (int x = lane; x < p.head_dim; x += 32) {
    float a = 0.0f;
    for (int i = 0; i < used; ++i) {
      const float mi = part[i * stride];
      if (mi != -INFINITY) a += expf(mi - mx) * part[i * stride + 2 + x];
    }
    o[x] = a * inv;
  }
}

// One block per segment; threads stride over (token, feature) of the tokens the cache keeps.
__global__ void WriteKernel(AttnArgs p) {
  PdlEnter();
  const int64_t si = blockIdx.x;
  const Row4 s = LoadSegment(p.segs, si);
  const int64_t hd = int64_t{p.kv_heads} * p.head_dim;
  const int64_t value_offset = ValueOffset(p);
  // A ring keeps only the last `window` of the new tokens (earlier ones would be overwritten).
  const int64_t skip = p.ring && s.num_tokens > p.window ? s.num_tokens - p.window : 0;
  const int64_t n = (s.num_tokens - skip) * hd;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const int64_t t = skip + i / hd, x = i % hd;
    const int64_t at = CacheRow(p, si, s, s.position + t) + x;
    const float kx = p.k(s.row_begin + t, x), vx = p.v(s.row_begin + t, x);
    if (p.kv_store == kKvBf16) {
      __nv_bfloat16* dst = static_cast<__nv_bfloat16*>(p.storage) + at;
      dst[0] = __float2bfloat16_rn(kx);
      dst[value_offset] = __float2bfloat16_rn(vx);
    } else if (p.kv_store == kKvFp8) {
      unsigned char* dst = static_cast<unsigned char*>(p.storage) + at;
      dst[0] = ToE4m3(kx);
      dst[value_offset] = ToE4m3(vx);
    } else {
      float* dst = static_cast<float*>(p.storage) + at;
      dst[0] = kx;
      dst[value_offset] = vx;
    }
  }
}

// AttnArgs::short_prefix of a step with long segments, one warp scanning 32 segments at a time.
__global__ void ShortPrefixKernel(const int64_t* segs, int64_t n, int64_t tiled_min,
                                  int32_t* prefix) {
  PdlEnter();
  const int lane = static_cast<int>(threadIdx.x);
  int32_t base = 0;
  for (int64_t s0 = 0; s0 < n; s0 += 32) {  // uniform over the warp: full-mask shuffles
    const int64_t s = s0 + lane;
    const int64_t tokens = s < n ? segs[4 * s + 1] : 0;
    const int32_t count = tokens < tiled_min ? static_cast<int32_t>(tokens) : 0;
    int32_t inclusive = count;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
      const int32_t below = __shfl_up_sync(0xffffffffu, inclusive, d);
      if (lane >= d) inclusive += below;
    }
    if (s < n) prefix[s] = base + inclusive - count;
    base += __shfl_sync(0xffffffffu, inclusive, 31);
  }
  if (lane == 0) prefix[n] = base;
}

// 1a's splits for `units` (row, head) pairs: enough warps to fill the GPU (16 per SM) when few
// rows attend — a long-context decode at a small batch would otherwise run a handful of warps
// over thousands of keys each.
int SplitsFor(int64_t units, int sms) {
  const int64_t want = CeilDiv(int64_t{16} * sms, units < 1 ? 1 : units);
  return static_cast<int>(want < 1 ? 1 : (want > kMaxSplits ? kMaxSplits : want));
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
  const AttentionMode mode = Mode();
  const bool staged_mode = mode == AttentionMode::kStaged || mode == AttentionMode::kFlash;
  const bool tensor =
      (mode == AttentionMode::kTensor || staged_mode) && TensorAttendReady(ap.head_dim);
  const bool staged = tensor && staged_mode && ap.window == 0;
  const bool tiled = !tensor && mode != AttentionMode::kSimple && TiledAttendReady(ap.head_dim);
  AttnArgs p{AsMat(q),
             AsMat(k),
             AsMat(v),
             AsMat(out),
             segs.device.data<const int64_t>(),
             static_cast<int64_t>(segs.host.size()),
             rows,
             ring ? nullptr : bt.device.data<const int32_t>(),
             bt.max_blocks,
             bt.block_tokens,
             kv.storage.raw(),
             ring,
             ap.q_heads,
             ap.kv_heads,
             ap.head_dim,
             ap.window,
             ap.scale,
             tensor || tiled ? kPrefillMinTokens : std::numeric_limits<int64_t>::max(),
             1,
             nullptr};
  p.kv_store = kv.storage.dtype() == DType::kBF16     ? kKvBf16
               : kv.storage.dtype() == DType::kF8E4M3 ? kKvFp8
                                                      : kKvF32;
  p.kv_pairs = p.kv_store == kKvBf16 && ap.head_dim % 2 == 0 &&
               reinterpret_cast<uintptr_t>(kv.storage.raw()) % 4 == 0;
  // 1a over the rows of short segments (every row of a decode-only step, so a captured graph's
  // split count and scratch depend on its batch size alone). Its warps and partials cover the
  // short rows only: a step with a long segment numbers them through short_prefix (once, they
  // were indexed by the step's row — on an H200 a Qwen3.5-0.8B step of one decode row beside an
  // 8191-token prompt reserved rows × heads × 64 splits of partials, 4.3 GB per layer, and its
  // arena asked cudaMalloc for 95 GB).
  int64_t short_rows = 0;
  for (const Segment& sg : segs.host) short_rows += sg.num_tokens < p.tiled_min ? sg.num_tokens : 0;
  if (short_rows > 0) {
    p.short_rows = short_rows;
    if (short_rows < rows) {
      ASSIGN_OR_RETURN(const TensorView prefix,
                       Scratch(ctx, DType::kI32, {static_cast<int64_t>(segs.host.size()) + 1}));
      LaunchKernel(ShortPrefixKernel, 1, 32, 0, Stream(ctx), p.segs, p.num_segs, p.tiled_min,
                   prefix.data<int32_t>());
      RETURN_IF_ERROR(CheckLaunch("ShortPrefixKernel"));
      p.short_prefix = prefix.data<const int32_t>();
    }
    // Warps attend `group` query heads each (1a: one; AttendGroup).
    const int group = mode == AttentionMode::kSimple ? 1 : AttendGroup(ap);
    const int64_t units = short_rows * (ap.q_heads / group);
    if (mode != AttentionMode::kSimple) {
      ASSIGN_OR_RETURN(const int sms, DeviceAttribute(cudaDevAttrMultiProcessorCount));
      p.splits = SplitsFor(units, sms);
    }
    if (p.splits > 1) {
      ASSIGN_OR_RETURN(
          const TensorView partial,
          Scratch(ctx, DType::kF32, {short_rows * ap.q_heads * p.splits, 2 + ap.head_dim}));
      p.partial = partial.data<float>();
    }
    const unsigned grid = GridFor(units * p.splits, kWarpsPerBlock, (int64_t{1} << 31) - 1);
    if (!LaunchAttend(LanesFor(ap.head_dim), group, grid, Stream(ctx), p)) {
      return absl::InternalError(absl::StrCat("attention: head_dim ", ap.head_dim));
    }
    RETURN_IF_ERROR(CheckLaunch("AttendKernel"));
    if (p.splits > 1) {
      LaunchKernel(CombineKernel,
                   GridFor(short_rows * ap.q_heads, kWarpsPerBlock, (int64_t{1} << 31) - 1),
                   32 * kWarpsPerBlock, 0, Stream(ctx), p);
      RETURN_IF_ERROR(CheckLaunch("CombineKernel"));
    }
  }
  // 1b (or the tensor-core kernel), one launch per prefill segment.
  for (size_t si = 0; si < segs.host.size(); ++si) {
    const int64_t n = segs.host[si].num_tokens;
    if (n < p.tiled_min) continue;
    const int64_t i = static_cast<int64_t>(si);
    if (staged) {  // the segment's keys 0 … position + n − 1 as bf16 tiles, then the kernel
      // The tiles are needed only by this segment's two kernels: the next segment (or op) reuses
      // them, in stream order (else every segment of every layer would hold its own to the end
      // of the step: hundreds of MB for long prompts).
      const ScratchScope scope(ctx);
      const int64_t tiles = TensorAttendKeyTiles(segs.host[si].position + n);
      const int64_t elems = TensorAttendStageElements(ap.head_dim, ap.kv_heads, tiles);
      ASSIGN_OR_RETURN(const TensorView k_stage, Scratch(ctx, DType::kBF16, {elems}));
      ASSIGN_OR_RETURN(const TensorView vt_stage, Scratch(ctx, DType::kBF16, {elems}));
      const TensorAttendStage stage{k_stage.data<__nv_bfloat16>(), vt_stage.data<__nv_bfloat16>(),
                                    tiles};
      RETURN_IF_ERROR(LaunchTensorAttend(Stream(ctx), p, i, n, &stage));
      continue;
    }
    RETURN_IF_ERROR(tensor ? LaunchTensorAttend(Stream(ctx), p, i, n)
                           : LaunchTiledAttend(Stream(ctx), p, i, n));
  }
  LaunchKernel(WriteKernel, static_cast<unsigned>(segs.host.size()), 256, 0, Stream(ctx), p);
  return CheckLaunch("WriteKernel");
}

}  // namespace linfer::cuda
