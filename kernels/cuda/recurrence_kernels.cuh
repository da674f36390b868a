// What the recurrence's CUDA kernels share (kernels/cuda/recurrence.cu plans a call and launches
// them): one parameter block describing the layer call, and the launchers of the three kernel
// families — the token-by-token step (recurrent_step.cu), the per-chunk preparation of the
// intra-chunk matrices (chunk_prep.cu, chunk_prep_gla.cu) and the chunk-by-chunk scan over the
// state (chunk_scan.cu).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace linfer::cuda {

inline constexpr int kChunk = 64;  // tokens per chunk on the tensor-core path
// Floats per (chunk, head) of RecParams::gates: e^{b_i} [64], e^{b_L − b_i} [64], e^{b_L}, padding
// to a multiple of 4 (16-byte copies).
inline constexpr int kGateLd = 2 * kChunk + 4;

enum DecayCode : int { kDecayNone = 0, kDecayScalar = 1, kDecayVector = 2 };

// A packed [T, heads·dim] f32 input: output head h reads input head h / share.
struct PackedInput {
  const float* p = nullptr;
  int64_t ld = 0;     // elements between rows
  int share = 1;      // output heads per input head
  bool vec4 = false;  // 16-byte aligned rows and dim % 4 == 0: float4 loads are safe
  __device__ const float* Row(int64_t row, int head, int dim) const {
    return p + row * ld + int64_t{head / share} * dim;
  }
};

struct RecParams {
  PackedInput q, k, v, g, beta;
  const float* fixed = nullptr;  // head_log_decay [H] (scalar decay without g)
  float* o = nullptr;            // [T, H·dv]
  int64_t o_ld = 0;
  void* state = nullptr;  // [slots, H, dk, dv], f32 or bf16
  bool state_bf16 = false;
  bool bf16_cp_async = false;  // the step's smem kernel copies bf16 tiles by cp.async (opt-in)
  float* z = nullptr;          // [slots, H, dk] (normalize)
  // Normaliser update of the step kernel, [segments, H, dk]: every dv tile of a (segment, head)
  // reads z at its start, so the new z is written here and committed after the kernel.
  float* z_next = nullptr;
  const int64_t* segs = nullptr;  // device segment table, I64 [n, 4]
  int heads = 0, dk = 0, dv = 0;
  int decay = kDecayNone;
  bool delta = false, normalize = false;
  float scale = 1.0f;
  // GdnPrep folded into the step kernel (kernels/recurrence.h): q and k arrive raw, g and beta as
  // the gate projections; a_log and dt_bias are indexed like g's heads.
  bool gdn = false;
  const float* a_log = nullptr;
  const float* dt_bias = nullptr;
  float beta_scale = 1.0f, l2_eps = 0.0f;
  // Segments with at least this many tokens take the chunked path; the others the step kernel.
  int64_t min_chunk_tokens = INT64_MAX;
  // Chunked path: chunk_offsets[s] = index of segment s's first chunk (exclusive prefix sum of
  // ceil(n/64) over chunked segments, [n + 1]); per (chunk, head) the prepared [64, 64] matrices.
  const int32_t* chunk_offsets = nullptr;
  // The chunked segments' indices in table order, [number of chunked segments]: the scan's grid
  // covers only them (a mixed step's decode rows would otherwise launch idle blocks).
  const int32_t* chunked_segs = nullptr;
  __nv_bfloat16* m = nullptr;  // scale·(q_i·k_j)·decay(j→i) for j ≤ i, else 0
  __nv_bfloat16* t = nullptr;  // delta rule: (I + A)⁻¹ diag(β)
  // The pipelined scan's operands (LINFER_CUDA_SCAN=pipelined, no vector decay; else null),
  // written by chunk_prep per (chunk, head): q·scale and k as bf16 [64, dk_tile] (dk_tile = 64,
  // 128 or 256, the kernels' tile over dk; zero padding) and the decay factors [kGateLd].
  __nv_bfloat16* qb = nullptr;
  __nv_bfloat16* kb = nullptr;
  float* gates = nullptr;
  // The split scan (LINFER_CUDA_SCAN=split, no vector decay): chunk_prep also writes, per (chunk,
  // head), U0 = T V (the delta rule; else V) as f32 [64, u_ld] and the delta rule's
  // W = T diag(e^b) K as bf16 [64, dk_tile], so that the scan's chunk step is U = U0 − W h,
  // h ← e^{b_L} h + Kᵀ diag(d) U, two products on operands that do not depend on h (copied ahead
  // with cp.async). The scan writes U and the state at each chunk's start, both transposed and
  // bf16 ([u_ld, 64] and [u_ld, dk_tile]); a third kernel, parallel over every chunk, forms
  // o = diag(e^b) Q_s h + M U from them (chunk_out.cu). u_ld = dv rounded up to 64. The split
  // scan also uses qb, kb and gates.
  bool split = false;
  // chunk_prep's (I + A)⁻¹ by 16×16 blocks (LINFER_CUDA_PREP=blocked), else by one forward
  // substitution per column.
  bool blocked_inverse = false;
  float* u0 = nullptr;
  __nv_bfloat16* w = nullptr;
  __nv_bfloat16* ut = nullptr;
  __nv_bfloat16* hc = nullptr;
  int u_ld = 0;
};

// The chunked kernels' key-dimension tile: 64, 128 or 256, the smallest that holds dk (≤ 256).
constexpr int DkTile(int dk) { return dk <= 64 ? 64 : dk <= 128 ? 128 : 256; }

// f(std::integral_constant<int, DkTile(dk)>{}) (dk > 256: refused).
template <typename F>
absl::Status ForDkTile(int dk, F&& f) {
  if (dk <= 64) return f(std::integral_constant<int, 64>{});
  if (dk <= 128) return f(std::integral_constant<int, 128>{});
  if (dk <= 256) return f(std::integral_constant<int, 256>{});
  return absl::UnimplementedError(absl::StrCat("chunked recurrence: dk ", dk, " > 256"));
}

// The segment that chunk `chunk` belongs to: the last s with chunk_offsets[s] ≤ chunk (segments
// with no chunks share their offset with the next segment, which the search prefers).
__device__ inline int FindSegment(const int32_t* offsets, int n, int64_t chunk) {
  int lo = 0, hi = n - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (offsets[mid] <= chunk) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

// Log-decay of token `row` for output head h (scalar decay): g or the fixed per-head value.
__device__ inline float ScalarLogDecay(const RecParams& p, int64_t row, int h) {
  if (p.decay != kDecayScalar) return 0.0f;
  return p.g.p != nullptr ? *p.g.Row(row, h, 1) : p.fixed[h];
}

// The launchers below index grids by segment and head: Recurrence (their one caller) refuses more
// than 65535 of either before it launches anything.
// Step kernel over every segment with fewer than p.min_chunk_tokens tokens.
absl::Status LaunchStep(const RecParams& p, int num_segments, cudaStream_t stream);
// What LaunchStep may need before any launch of the call (a kernel's shared-memory opt-in), so
// that a failure leaves no state advanced.
absl::Status PrepareStep(const RecParams& p);
// chunk_offsets ([n + 1]) and chunked_segs ([chunked]) from the device segment table (one warp
// scanning 32 segments at a time).
absl::Status LaunchChunkOffsets(const RecParams& p, int num_segments, int32_t* offsets,
                                int32_t* chunked_segs, cudaStream_t stream);
// Fills p.m (and p.t for the delta rule) for `total_chunks` chunks × heads; dk ≤ 256.
absl::Status LaunchChunkPrep(const RecParams& p, int num_segments, int64_t total_chunks,
                             cudaStream_t stream);
absl::Status LaunchChunkPrepVector(const RecParams& p, int num_segments, int64_t total_chunks,
                                   cudaStream_t stream);
// Runs the chunked segments' scans: state in, outputs, state out. `ctas_wanted` steers the
// choice of the value-tile width (more, narrower tiles when there are few sequences × heads).
absl::Status LaunchChunkScan(const RecParams& p, int64_t chunked_segments, int64_t ctas_wanted,
                             cudaStream_t stream);
// The split scan's outputs: o = diag(e^b) Q_s h + M U for every chunk (p.split). Prepare (the
// kernel's shared-memory opt-in) before the first launch that updates states.
absl::Status PrepareChunkOut(const RecParams& p);
absl::Status LaunchChunkOut(const RecParams& p, int num_segments, int64_t total_chunks,
                            cudaStream_t stream);

}  // namespace linfer::cuda
