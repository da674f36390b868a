// What the CUDA attention kernels (attention.cu, attention_tiled.cu, attention_tensor.cu) share:
// their argument block, the row → segment search, the cached-row address, and the kernel choice
// (LINFER_CUDA_ATTENTION).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "absl/status/status.h"
#include "kernels/cuda/cuda_check.cuh"

namespace linfer::cuda {

// Segments with at least this many new tokens take a prefill kernel (tiled or tensor-core).
constexpr int64_t kPrefillMinTokens = 16;

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
  int64_t tiled_min;  // segments with at least this many new tokens go to a prefill kernel
  int splits;         // 1a: key ranges per (row, head); > 1: partials, then CombineKernel
  float* partial;     // [rows, q_heads, splits, 2 + head_dim]: m, l, a (splits > 1)
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

// The cached K row (kv head 0) of position `pos` of segment `si`; V is `value_offset` after it.
__device__ inline float* CacheRow(const AttnArgs& p, int64_t si, const Row4& s, int64_t pos) {
  const int64_t hd = int64_t{p.kv_heads} * p.head_dim;
  if (p.ring) return p.storage + ((s.slot * 2) * p.window + pos % p.window) * hd;
  const int32_t block = p.blocks[si * p.max_blocks + pos / p.block_tokens];
  return p.storage + ((int64_t{block} * p.block_tokens + pos % p.block_tokens) * 2) * hd;
}

// LINFER_CUDA_ATTENTION: "simple" (1a alone, unsplit), unset or "tiled" (the default: split 1a
// and the CUDA-core tiled prefill kernel), "tensor" (prefill on tensor cores, bf16 operands;
// not the default until a GPU run has passed it).
enum class AttentionMode { kSimple, kTiled, kTensor };
inline AttentionMode Mode() {
  static const AttentionMode mode = [] {
    const char* v = std::getenv("LINFER_CUDA_ATTENTION");
    const std::string_view s = v != nullptr ? v : "";
    return s == "simple"   ? AttentionMode::kSimple
           : s == "tensor" ? AttentionMode::kTensor
                           : AttentionMode::kTiled;
  }();
  return mode;
}

// Lets `kernel` take `bytes` of dynamic shared memory; false where this GPU's opt-in limit (found
// once per process) is lower or the attribute is refused. Called once per kernel, on the first
// (eager) call; the calls are legal during a capture anyway.
inline int OptInSharedLimit() {
  static const int limit = [] {
    int device = 0, n = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&n, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) !=
            cudaSuccess) {
      (void)cudaGetLastError();
      return 0;
    }
    return n;
  }();
  return limit;
}
template <typename Kernel>
bool OptInShared(Kernel kernel, size_t bytes) {
  if (bytes > static_cast<size_t>(OptInSharedLimit())) return false;
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
absl::Status LaunchTensorAttend(cudaStream_t stream, const AttnArgs& p, int64_t si, int64_t n);

}  // namespace linfer::cuda
