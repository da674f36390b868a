// What the CUDA attention kernels (attention.cu, attention_tiled.cu, attention_tensor.cu) share:
// their argument block, the row → segment search, the cached-row address, and the kernel choice
// (LINFER_CUDA_ATTENTION).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/env_option.h"
#include "kernels/cuda/fp8.cuh"

namespace linfer::cuda {

// Segments with at least this many new tokens take a prefill kernel (tiled or tensor-core).
constexpr int64_t kPrefillMinTokens = 16;

// A KV cache's element type (AttnArgs::kv_store; the kernels' template argument kKv): f32, bf16,
// or fp8 e4m3 (unscaled, rounded to nearest even and saturating at ±448 on write: ToE4m3, the
// CPU's E4m3FromDouble).
constexpr int kKvF32 = 0, kKvBf16 = 1, kKvFp8 = 2;

__device__ inline unsigned char ToE4m3(float x) {
  return static_cast<unsigned char>(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3));
}

struct AttnArgs {
  Mat q, k, v, out;
  const int64_t* segs;
  int64_t num_segs, total_rows;
  const int32_t* blocks;  // [num_segs, max_blocks] (paged)
  int64_t max_blocks;
  int block_tokens;
  void* storage;  // f32, bf16 or fp8 e4m3: kv_store
  bool ring;
  int q_heads, kv_heads, head_dim, window;
  float scale;
  int64_t tiled_min;  // segments with at least this many new tokens go to a prefill kernel
  int splits;         // 1a: key ranges per (row, head); > 1: partials, then CombineKernel
  float* partial;     // [short rows, q_heads, splits, 2 + head_dim]: m, l, a (splits > 1)
  // 1a's rows: the short segments' rows, numbered in table order. Null: every row of the step is
  // short (a decode step), the short row number is the row. Else [num_segs + 1] exclusive sums of
  // the short segments' tokens (long segments count 0).
  const int32_t* short_prefix = nullptr;
  int64_t short_rows = 0;
  // The cache's element type (kKvF32, kKvBf16, kKvFp8): cached rows are read as such, and this
  // step's own (f32) rows rounded to it as they are read, so every key and value a query sees is
  // the stored one.
  int kv_store = kKvF32;
  // A bf16 cache with an even head_dim and a 4-byte aligned storage: every cached row starts on a
  // 4-byte boundary, so the decode kernel reads feature pairs with one load (KvRow::Pair).
  bool kv_pairs = false;
};

__device__ inline int64_t SegmentOfRow(const int64_t* segs, int64_t n, int64_t row) {
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

// The segment and step row of short row `sr` (see AttnArgs::short_prefix): the last segment whose
// prefix is ≤ sr (a long segment shares its prefix with the next one, which the search prefers).
__device__ inline void ShortRow(const AttnArgs& p, int64_t sr, int64_t* si, int64_t* row) {
  if (p.short_prefix == nullptr) {
    *row = sr;
    *si = SegmentOfRow(p.segs, p.num_segs, sr);
    return;
  }
  int64_t lo = 0, hi = p.num_segs - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (p.short_prefix[mid] <= sr) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  *si = lo;
  *row = p.segs[4 * lo] + (sr - p.short_prefix[lo]);
}

// Where a cached V row starts after its K row: a ring keeps all K rows of a slot, then its V rows.
__device__ inline int64_t ValueOffset(const AttnArgs& p) {
  const int64_t hd = int64_t{p.kv_heads} * p.head_dim;
  return p.ring ? int64_t{p.window} * hd : hd;
}

// The element index of the cached K row (kv head 0) of position `pos` of segment `si`; V is
// ValueOffset after it.
__device__ inline int64_t CacheRow(const AttnArgs& p, int64_t si, const Row4& s, int64_t pos) {
  const int64_t hd = int64_t{p.kv_heads} * p.head_dim;
  if (p.ring) return ((s.slot * 2) * p.window + pos % p.window) * hd;
  const int32_t block = p.blocks[si * p.max_blocks + pos / p.block_tokens];
  return ((int64_t{block} * p.block_tokens + pos % p.block_tokens) * 2) * hd;
}

// One key or value row as the attention reads it: a cached row (in the cache's dtype), or one of
// this step's own f32 rows. Null (`KvRow{}`): no row (the kernels read zeros). Trivial, so that
// it may live in shared memory.
struct KvRow {
  const void* p;
  bool own;  // one of this step's f32 rows

  __device__ explicit operator bool() const { return p != nullptr; }
  // Element x of a cache of type kKv (AttnArgs::kv_store); an own row is rounded to that type as
  // it is read, so every key and value a query sees is the stored one.
  template <int kKv>
  __device__ float At(int x) const {
    if constexpr (kKv == kKvBf16) {
      if (!own) return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[x]);
      return __bfloat162float(__float2bfloat16_rn(__ldg(static_cast<const float*>(p) + x)));
    } else if constexpr (kKv == kKvFp8) {
      if (!own) return E4m3(static_cast<const unsigned char*>(p)[x]);
      return E4m3(ToE4m3(__ldg(static_cast<const float*>(p) + x)));
    } else {
      return __ldg(static_cast<const float*>(p) + x);  // global, read-only in the kernels
    }
  }
  // Elements x and x + 1 (x even) of a bf16-cache row as a bf16 pair, the values At<kKvBf16> reads:
  // one 4-byte load from the cache where `paired` (AttnArgs::kv_pairs); else, and for this step's
  // own f32 rows, two reads (x + 1 ≥ limit reads 0).
  __device__ __nv_bfloat162 Pair(int x, int limit, bool paired) const {
    if (!own && paired) {
      const unsigned bits =
          __ldg(reinterpret_cast<const unsigned*>(static_cast<const __nv_bfloat16*>(p) + x));
      return *reinterpret_cast<const __nv_bfloat162*>(&bits);
    }
    const float lo = At<kKvBf16>(x), hi = x + 1 < limit ? At<kKvBf16>(x + 1) : 0.0f;
    return __floats2bfloat162_rn(lo, hi);  // both bf16 values already: exact
  }
  // The same row in lane `src`'s hands (a warp-wide shuffle).
  __device__ KvRow FromLane(int src) const {
    KvRow r{};
    r.p = reinterpret_cast<const void*>(
        __shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(p), src));
    r.own = __shfl_sync(0xffffffffu, own ? 1 : 0, src) != 0;
    return r;
  }
};

// Key and value rows of kv head `kvh` at position `j` of segment `si`: this step's own rows from
// the segment's start on, the cache before it (of type kKv).
template <int kKv>
__device__ inline void KeyValueRows(const AttnArgs& p, int64_t si, const Row4& s, int64_t j,
                                    int kvh, KvRow* k, KvRow* v) {
  const int64_t col = int64_t{kvh} * p.head_dim;
  if (j >= s.position) {
    const int64_t r = s.row_begin + (j - s.position);
    *k = {&p.k(r, col), true};
    *v = {&p.v(r, col), true};
    return;
  }
  const int64_t at = CacheRow(p, si, s, j) + col;
  using T = std::conditional_t<kKv == kKvBf16, __nv_bfloat16,
                               std::conditional_t<kKv == kKvFp8, unsigned char, float>>;
  const T* base = static_cast<const T*>(p.storage);
  *k = {base + at, false};
  *v = {base + at + ValueOffset(p), false};
}

// Calls f(std::integral_constant<int, kv_store>{}): a kernel's instance for the cache's type.
template <typename F>
void WithKvDType(int kv_store, F&& f) {
  if (kv_store == kKvBf16) {
    f(std::integral_constant<int, kKvBf16>{});
  } else if (kv_store == kKvFp8) {
    f(std::integral_constant<int, kKvFp8>{});
  } else {
    f(std::integral_constant<int, kKvF32>{});
  }
}

// Calls f(std::integral_constant<int, N>{}) for N = `lanes` ∈ {1, 2, 4, 8, 16} up to kMax (a
// kernel template's features per lane); false for any other value.
template <int kMax, typename F>
bool WithLanes(int lanes, F&& f) {
  switch (lanes) {
    case 1:
      f(std::integral_constant<int, 1>{});
      return true;
    case 2:
      f(std::integral_constant<int, 2>{});
      return true;
    case 4:
      f(std::integral_constant<int, 4>{});
      return true;
    case 8:
      if constexpr (kMax >= 8) {
        f(std::integral_constant<int, 8>{});
        return true;
      }
      return false;
    case 16:
      if constexpr (kMax >= 16) {
        f(std::integral_constant<int, 16>{});
        return true;
      }
      return false;
    default:
      return false;
  }
}

// Features per lane for `head_dim`: ⌈head_dim / 32⌉ rounded up to a power of two.
inline int LanesFor(int head_dim) {
  int lanes = 1;
  while (32 * lanes < head_dim) lanes *= 2;
  return lanes;
}

// LINFER_CUDA_ATTENTION: "simple" (1a alone, unsplit), "tiled" (split 1a and the CUDA-core tiled
// prefill kernel), unset or "tensor" (the default: split 1a and prefill on tensor cores, bf16
// operands — on an H200 it passed the attention tests at bf16 tolerances and ran Qwen3.5-0.8B's
// attention prefill 1.9× (8 × 4096) and 2.4× (1 × 32768) faster than the tiled kernel), "staged"
// (the tensor-core kernel reading bf16 K/Vᵀ tiles staged once per segment, for layers without a
// window; opt-in until a GPU run has passed and timed it), "flash" (the same tiles, one block for
// all of a head's columns, copies overlapped with the arithmetic; opt-in likewise).
enum class AttentionMode { kSimple, kTiled, kTensor, kStaged, kFlash };
inline AttentionMode Mode() {
  static const AttentionMode mode = [] {
    const absl::string_view s =
        EnvOption("LINFER_CUDA_ATTENTION", {"tensor", "tiled", "simple", "staged", "flash"});
    return s == "simple"   ? AttentionMode::kSimple
           : s == "tiled"  ? AttentionMode::kTiled
           : s == "staged" ? AttentionMode::kStaged
           : s == "flash"  ? AttentionMode::kFlash
                           : AttentionMode::kTensor;
  }();
  return mode;
}

// Lets `kernel` take `bytes` of dynamic shared memory; false where this GPU's opt-in limit (found
// once per process) is lower or the attribute is refused. Called once per kernel, on the first
// (eager) call; the calls are legal during a capture anyway.
template <typename Kernel>
bool OptInShared(Kernel kernel, size_t bytes) {
  static const int limit = DeviceAttribute(cudaDevAttrMaxSharedMemoryPerBlockOptin).value_or(0);
  if (bytes > static_cast<size_t>(limit)) return false;
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(bytes)) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return true;
}

// The prefill kernels — attention_tiled.cu (CUDA cores, the default) and attention_tensor.cu
// (tensor cores, opt-in): whether one serves `head_dim` on this GPU (≤ 256, shared memory opted
// in once per process), and its launch for segment `si` of `n` new tokens.
bool TiledAttendReady(int head_dim);
absl::Status LaunchTiledAttend(cudaStream_t stream, const AttnArgs& p, int64_t si, int64_t n);
bool TensorAttendReady(int head_dim);
// The staged tensor-core kernel's bf16 K and Vᵀ tiles of one segment (LINFER_CUDA_ATTENTION=
// staged or flash; attention_tensor.cu): key_tiles 64-key tiles from position 0 on, each
// TensorAttendStageElements(head_dim, kv_heads, 1) elements in both arrays.
struct TensorAttendStage {
  __nv_bfloat16* k;
  __nv_bfloat16* vt;
  int64_t key_tiles;
};
int64_t TensorAttendStageElements(int head_dim, int kv_heads, int64_t key_tiles);
int64_t TensorAttendKeyTiles(int64_t keys);  // 64-key tiles that hold `keys` keys
// stage: null for the direct kernel; else the staged one (full causal attention: window 0).
absl::Status LaunchTensorAttend(cudaStream_t stream, const AttnArgs& p, int64_t si, int64_t n,
                                const TensorAttendStage* stage = nullptr);

}  // namespace linfer::cuda
