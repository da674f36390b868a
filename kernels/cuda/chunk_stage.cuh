// Staging of a chunk's operands, shared by the chunked recurrence's kernels (chunk_prep.cu,
// chunk_scan.cu, chunk_out.cu; recurrence_kernels.cuh): q and k rows as bf16 tensor-core
// operands (the cp.async copies are in cp_async.cuh).
#pragma once

#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/recurrence_kernels.cuh"

namespace linfer::cuda {

// Rows [r0, r0 + len) of q (times q_scale) and k, head h, dims [0, dk) → bf16 tiles [64][kDk + 8]
// (zero padding), by the kThreads threads of a block. Each thread issues kStageBatch float4 loads
// before converting any (no branch on the row for aligned inputs: a clamped address, the value
// masked): these kernels walk or stage chunks with little else to hide a load's latency, and one
// load at a time a thread waited out 32 memory latencies per chunk at dk 128 (Nsight Compute on
// an H200: 27 µs per chunk of the scan, ChunkScanKernel 13.7 ms of a 1 × 32768 Qwen3.5-0.8B
// layer; ChunkPrepKernel 0.58 ms).
inline constexpr int kStageBatch = 8;
template <int kDk, int kThreads>
__device__ void StageQK(const RecParams& p, int64_t r0, int len, int h, float q_scale, bf16* qs,
                        bf16* ks) {
  constexpr int ld = kDk + 8, kGroups = kDk / 4, kItems = 2 * kChunk * kGroups;
  static_assert(kItems % (kThreads * kStageBatch) == 0, "whole batches");
  for (int base = threadIdx.x; base < kItems; base += kThreads * kStageBatch) {
    float4 x[kStageBatch];
#pragma unroll
    for (int b = 0; b < kStageBatch; ++b) {
      const int idx = base + b * kThreads;
      const bool is_k = idx >= kChunk * kGroups;
      const int j = is_k ? idx - kChunk * kGroups : idx;
      const int r = j / kGroups, c = (j % kGroups) * 4;
      const PackedInput& in = is_k ? p.k : p.q;
      x[b] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (in.vec4) {  // dk % 4 == 0: a group lies inside dk or wholly past it
        const bool ok = r < len && c < p.dk;
        const float4 v =
            __ldg(reinterpret_cast<const float4*>(ok ? in.Row(r0 + r, h, p.dk) + c : in.p));
        if (ok) x[b] = v;
      } else if (r < len) {
        const float* src = in.Row(r0 + r, h, p.dk) + c;
        x[b].x = c < p.dk ? src[0] : 0.0f;
        x[b].y = c + 1 < p.dk ? src[1] : 0.0f;
        x[b].z = c + 2 < p.dk ? src[2] : 0.0f;
        x[b].w = c + 3 < p.dk ? src[3] : 0.0f;
      }
    }
#pragma unroll
    for (int b = 0; b < kStageBatch; ++b) {
      const int idx = base + b * kThreads;
      const bool is_k = idx >= kChunk * kGroups;
      const int j = is_k ? idx - kChunk * kGroups : idx;
      const float scale = is_k ? 1.0f : q_scale;
      bf16* dst = (is_k ? ks : qs) + (j / kGroups) * ld + (j % kGroups) * 4;
      *reinterpret_cast<uint32_t*>(dst) =
          Pack(FloatToBf16(x[b].x * scale), FloatToBf16(x[b].y * scale));
      *reinterpret_cast<uint32_t*>(dst + 2) =
          Pack(FloatToBf16(x[b].z * scale), FloatToBf16(x[b].w * scale));
    }
  }
}

}  // namespace linfer::cuda
