// The tensor-core prefill attention (the default; LINFER_CUDA_ATTENTION=tiled or =simple instead;
// see attention.cu):
// FlashAttention-2 on mma.sync m16n8k16 with bf16 operands and f32 accumulators, for segments of
// 16+ new tokens. A block takes 64 query rows of one segment and one query head (warp w: rows
// 16w…16w+15) and kDChunk of its head_dim output columns (head_dim padded with zeros to kDPad, a
// multiple of 16; kDChunk = min(kDPad, 128) keeps the output tile in registers, a 256-wide head
// takes two blocks that both compute the scores). Per tile of 64 keys j ∈ [lo(first row), last
// row's position]:
//   S = Q Kᵀ (16 × 64 per warp), masked to −∞ where the key is after the row's position or
//   before its window, times `scale`; the online softmax per row: m' = max(m, max S),
//   P = e^{S − m'} (rounded to bf16 as the second product's operand), l ← l·e^{m−m'} + Σ P,
//   O ← O·e^{m−m'} + P V; finally out = O / l.
// Keys come from the cache (positions before the segment) or the step's own k/v rows, like the
// CUDA-core kernels; q, k, v are rounded to bf16 on their way into shared memory (Q [64][kDPad],
// K [64][kDPad], Vᵀ [kDChunk][64], rows padded by 8 elements).
// Staged (LINFER_CUDA_ATTENTION=staged, full causal attention only): StageKvKernel first writes
// the segment's visible keys once as bf16 tiles in the layout the kernel's shared memory wants —
// K [tile][kv head][64][kDPad] and Vᵀ [tile][kv head][kDPad][64], zero where no key or dimension
// is — so that a tile is staged with 16-byte cp.async copies all in flight at once (half the
// bytes of f32, no registers, one memory latency per tile), where the direct staging reads f32
// rows a few keys at a time (four dependent rounds per tile) and converts them (on an H200 the
// direct kernel ran Qwen3.5-0.8B's prefill attention at ≈ 27–31 TFLOP/s, load-bound: ≈ 98 KB of
// f32 per 64-key tile, read again by each query head of a group and each half of a 256-wide head).
// Flash (LINFER_CUDA_ATTENTION=flash, full causal attention only): the staged tiles, one block for
// all of a head's columns, and the next tile's copies in flight during the arithmetic
// (FlashAttendKernel).
#include <cuda_bf16.h>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cuda/attention_args.cuh"
#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/mma.cuh"

namespace linfer::cuda {
namespace {

constexpr int kRows = 64;  // query rows per block (16 per warp)
constexpr int kKeys = 64;  // keys per tile
constexpr int kWarps = 4;

template <int kDPad>
__host__ __device__ constexpr int Chunk() {
  return kDPad < 128 ? kDPad : 128;
}

template <int kDPad>
constexpr size_t SharedBytes() {
  return sizeof(bf16) * (2 * kRows * (kDPad + 8) + Chunk<kDPad>() * (kKeys + 8));
}

// This lane's two query rows (g and g + 8 of its warp's 16 in the block's row block r0): their
// positions, whether they exist, and their running max m and sum l of the online softmax.
struct RowState {
  int64_t pos[2];
  bool ok[2];
  float m[2] = {-INFINITY, -INFINITY};
  float l[2] = {0.0f, 0.0f};
  __device__ RowState(const Row4& s, int64_t r0, int64_t r_end) {
    for (int half = 0; half < 2; ++half) {
      const int64_t r = r0 + (threadIdx.x >> 5) * 16 + LaneG() + 8 * half;
      ok[half] = r < r_end;
      pos[half] = s.position + r;
    }
  }
};

// Q rows r0 … r0 + kRows − 1 of head h as bf16 (zero beyond the segment and beyond head_dim).
template <int kDPad>
__device__ inline void LoadQ(const AttnArgs& p, const Row4& s, int64_t r0, int64_t r_end, int h,
                             bf16* qs, int ld) {
  const int lane = threadIdx.x & 31;
  for (int r = threadIdx.x >> 5; r < kRows; r += kWarps) {
    const bool row_ok = r0 + r < r_end;
    const float* src = row_ok ? &p.q(s.row_begin + r0 + r, int64_t{h} * p.head_dim) : nullptr;
    for (int x = lane; x < kDPad; x += 32) {
      qs[r * ld + x] = __float2bfloat16(row_ok && x < p.head_dim ? src[x] : 0.0f);
    }
  }
}

// The online softmax over one tile of scores S (the warp's 16 rows × keys j0 … j0 + 63): masked to
// −∞ where the key is after the row's position or before its window, times `scale`;
// m' = max(m, max S), P = e^{S − m'} rounded to bf16 (left in sc, so that l sums exactly the
// weights the second product uses), l ← l·e^{m−m'} + Σ P; corr = e^{m−m'} for O. A row's 64 keys
// are spread over the 4 lanes of its quad (xor 1, 2).
__device__ inline void OnlineSoftmax(FragC (&sc)[kKeys / 8], int64_t j0, const AttnArgs& p,
                                     RowState& rs, float (&corr)[2]) {
  float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int nt = 0; nt < kKeys / 8; ++nt) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int half = i >> 1;
      const int64_t j = j0 + nt * 8 + AccCol(i);
      const bool sees =
          rs.ok[half] && j <= rs.pos[half] && (p.window <= 0 || j > rs.pos[half] - p.window);
      sc[nt].c[i] = sees ? p.scale * sc[nt].c[i] : -INFINITY;
      mx[half] = fmaxf(mx[half], sc[nt].c[i]);
    }
  }
  float sum[2] = {0.0f, 0.0f};
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    mx[half] = fmaxf(mx[half], __shfl_xor_sync(0xffffffffu, mx[half], 1));
    mx[half] = fmaxf(mx[half], __shfl_xor_sync(0xffffffffu, mx[half], 2));
    const float m_new = fmaxf(rs.m[half], mx[half]);
    // Nothing visible to this row yet: keep m = −∞ and weigh every key 0.
    corr[half] = m_new == -INFINITY ? 1.0f : expf(rs.m[half] - m_new);
    mx[half] = m_new;
    rs.m[half] = m_new;
  }
#pragma unroll
  for (int nt = 0; nt < kKeys / 8; ++nt) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int half = i >> 1;
      const float e = mx[half] == -INFINITY ? 0.0f : expf(sc[nt].c[i] - mx[half]);
      sc[nt].c[i] = __bfloat162float(__float2bfloat16(e));
      sum[half] += sc[nt].c[i];
    }
  }
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    sum[half] += __shfl_xor_sync(0xffffffffu, sum[half], 1);
    sum[half] += __shfl_xor_sync(0xffffffffu, sum[half], 2);
    rs.l[half] = rs.l[half] * corr[half] + sum[half];
  }
}

// O ← O·corr + P V for the warp's 16 rows and the kNt·8 columns of vt (Vᵀ, [column][key] with
// leading dimension ldv): P's accumulator tiles 2kk and 2kk + 1 are the A fragment of keys
// 16kk … 16kk + 15.
template <int kNt>
__device__ inline void AccumulatePV(FragC (&o)[kNt], const FragC (&sc)[kKeys / 8],
                                    const float (&corr)[2], const bf16* vt, int ldv) {
#pragma unroll
  for (int nt = 0; nt < kNt; ++nt) {
    o[nt].c[0] *= corr[0];
    o[nt].c[1] *= corr[0];
    o[nt].c[2] *= corr[1];
    o[nt].c[3] *= corr[1];
  }
#pragma unroll
  for (int kk = 0; kk < kKeys / 16; ++kk) {
    FragA a;
    a.r[0] = Pack(__float2bfloat16(sc[2 * kk].c[0]), __float2bfloat16(sc[2 * kk].c[1]));
    a.r[1] = Pack(__float2bfloat16(sc[2 * kk].c[2]), __float2bfloat16(sc[2 * kk].c[3]));
    a.r[2] = Pack(__float2bfloat16(sc[2 * kk + 1].c[0]), __float2bfloat16(sc[2 * kk + 1].c[1]));
    a.r[3] = Pack(__float2bfloat16(sc[2 * kk + 1].c[2]), __float2bfloat16(sc[2 * kk + 1].c[3]));
#pragma unroll
    for (int nt = 0; nt < kNt; ++nt) Mma(o[nt], a, LoadBT(vt + (nt * 8) * ldv + kk * 16, ldv));
  }
}

// out = O / l for the lane's rows that exist and its columns c0 + … below head_dim.
template <int kNt>
__device__ inline void StoreOut(const FragC (&o)[kNt], const AttnArgs& p, const Row4& s, int64_t r0,
                                int h, int c0, const RowState& rs) {
  const int64_t r_warp = r0 + (threadIdx.x >> 5) * 16;
#pragma unroll
  for (int nt = 0; nt < kNt; ++nt) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int half = i >> 1;
      const int col = c0 + nt * 8 + AccCol(i);
      if (!rs.ok[half] || col >= p.head_dim) continue;
      p.out(s.row_begin + r_warp + AccRow(i), int64_t{h} * p.head_dim + col) =
          o[nt].c[i] / rs.l[half];
    }
  }
}

// cp.async copies (not yet committed) of a staged tile of kRowsT rows × kColsT bf16 (packed, from
// global memory) into shared memory rows of kColsT + 8, 16 bytes a piece over the block's
// 32·kWarps threads: K [kKeys][kDPad] into ks, or kCols rows of Vᵀ [kCols][kKeys] into vt.
template <int kRowsT, int kColsT>
__device__ inline void CopyTile(bf16* dst, const bf16* src) {
  constexpr int kPieces = kColsT / 8;
#pragma unroll
  for (int i = threadIdx.x; i < kRowsT * kPieces; i += 32 * kWarps) {
    const int t = i / kPieces, x = 8 * (i % kPieces);
    CpAsync16(dst + t * (kColsT + 8) + x, src + int64_t{t} * kColsT + x, 16);
  }
}

// kStaged: K and Vᵀ tiles from StageKvKernel's k_stage / vt_stage (full causal attention: tiles at
// positions 64i), else from the rows (kKv: the cache's element type, attention_args.cuh).
template <int kDPad, bool kStaged, int kKv = kKvF32>
__global__ void __launch_bounds__(32 * kWarps)
    TensorAttendKernel(AttnArgs p, int64_t si, const bf16* k_stage, const bf16* vt_stage) {
  PdlEnter();
  constexpr int kChunk = Chunk<kDPad>();
  constexpr int kLdQ = kDPad + 8, kLdV = kKeys + 8;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* qs = reinterpret_cast<bf16*>(smem_raw);  // [kRows][kLdQ]
  bf16* ks = qs + kRows * kLdQ;                  // [kKeys][kLdQ]
  bf16* vt = ks + kKeys * kLdQ;                  // [kChunk][kLdV]: vt[c][t] = V[j0 + t][c0 + c]
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int d = p.head_dim;
  const Row4 s = LoadSegment(p.segs, si);
  const int64_t r0 = int64_t{gridDim.x - 1 - blockIdx.x} * kRows;  // last rows first
  const int64_t r_end = r0 + kRows < s.num_tokens ? r0 + kRows : s.num_tokens;
  const int h = static_cast<int>(blockIdx.y);
  const int kvh = h / (p.q_heads / p.kv_heads);
  const int c0 = static_cast<int>(blockIdx.z) * kChunk;

  LoadQ<kDPad>(p, s, r0, r_end, h, qs, kLdQ);
  const int64_t pos_first = s.position + r0, pos_last = s.position + r_end - 1;
  int64_t lo_first = p.window > 0 ? pos_first - p.window + 1 : 0;
  if (lo_first < 0) lo_first = 0;

  RowState rs(s, r0, r_end);
  FragC o[kChunk / 8];
  const bool any_row = r0 + warp * 16 < r_end;  // warp-uniform: the warp has rows to compute

  for (int64_t j0 = lo_first; j0 <= pos_last; j0 += kKeys) {
    __syncthreads();  // the previous tile has been read (and, the first time, Q written)
    if constexpr (kStaged) {
      // Tile j0 / 64 of kv head kvh: K rows of kDPad, then this block's kChunk rows of Vᵀ.
      const int64_t tile = (j0 / kKeys) * p.kv_heads + kvh;
      CopyTile<kKeys, kDPad>(ks, k_stage + tile * kKeys * kDPad);
      CopyTile<kChunk, kKeys>(vt, vt_stage + (tile * kDPad + c0) * kKeys);
      CpAsyncCommitAndWaitAll();
    } else {
      // The warp's keys t = warp + kWarps·i (i < kPerWarp): lane i finds key i's K and V rows (all
      // the block lookups at once), then the rows are read kBatch keys at a time, every load of a
      // batch in flight before any is stored. (Key by key, a tile's staging waited out two memory
      // latencies per key: on an H200 this kernel ran Qwen3.5-0.8B's prefill at 17 TFLOP/s.)
      constexpr int kPerWarp = kKeys / kWarps, kBatch = 4;
      constexpr int kKPer = (kDPad + 31) / 32, kVPer = (kChunk + 31) / 32;
      KvRow k_row{}, v_row{};
      if (lane < kPerWarp && j0 + warp + kWarps * lane <= pos_last) {
        KeyValueRows<kKv>(p, si, s, j0 + warp + kWarps * lane, kvh, &k_row, &v_row);
      }
      for (int i0 = 0; i0 < kPerWarp; i0 += kBatch) {
        float kx[kBatch][kKPer], vx[kBatch][kVPer];
#pragma unroll
        for (int b = 0; b < kBatch; ++b) {
          const KvRow kj = k_row.FromLane(i0 + b), vj = v_row.FromLane(i0 + b);
#pragma unroll
          for (int e = 0; e < kKPer; ++e) {
            const int x = lane + 32 * e;
            kx[b][e] = kj && x < d ? kj.At<kKv>(x) : 0.0f;
          }
#pragma unroll
          for (int e = 0; e < kVPer; ++e) {
            const int c = lane + 32 * e;
            vx[b][e] = vj && c < kChunk && c0 + c < d ? vj.At<kKv>(c0 + c) : 0.0f;
          }
        }
#pragma unroll
        for (int b = 0; b < kBatch; ++b) {
          const int t = warp + kWarps * (i0 + b);
#pragma unroll
          for (int e = 0; e < kKPer; ++e) {
            const int x = lane + 32 * e;
            if (x < kDPad) ks[t * kLdQ + x] = __float2bfloat16(kx[b][e]);
          }
#pragma unroll
          for (int e = 0; e < kVPer; ++e) {
            const int c = lane + 32 * e;
            if (c < kChunk) vt[c * kLdV + t] = __float2bfloat16(vx[b][e]);
          }
        }
      }
    }  // the direct staging
    __syncthreads();
    if (!any_row) continue;  // every thread still reaches the barriers above
    // S = Q Kᵀ for the warp's 16 rows × 64 keys: 8 accumulator tiles of 16 × 8.
    FragC sc[kKeys / 8];
    MmaStrip<kDPad / 16>(sc, qs, kLdQ, ks, kLdQ);
    float corr[2];
    OnlineSoftmax(sc, j0, p, rs, corr);
    AccumulatePV(o, sc, corr, vt, kLdV);
  }
  StoreOut(o, p, s, r0, h, c0, rs);
}

// The flash kernel (LINFER_CUDA_ATTENTION=flash; the staged tiles, full causal attention only):
// a block computes all kDPad columns of its 64 rows (a 256-wide head no longer takes two blocks
// that both compute S = Q Kᵀ and both read every K tile), and each tile's copies overlap the
// arithmetic in FlashAttention-2's order, with one K and one Vᵀ buffer: Vᵀ(i) lands while the
// warps compute S = Q K(i)ᵀ and its softmax, K(i + 1) while they compute O += P V(i). The same
// products in the same order as the other tensor-core kernels, so the same output bits.
template <int kDPad>
constexpr size_t FlashSharedBytes() {
  return sizeof(bf16) * (2 * kRows * (kDPad + 8) + kDPad * (kKeys + 8));
}

template <int kDPad>
__global__ void __launch_bounds__(32 * kWarps, 2)
    FlashAttendKernel(AttnArgs p, int64_t si, const bf16* k_stage, const bf16* vt_stage) {
  PdlEnter();
  constexpr int kLdQ = kDPad + 8, kLdV = kKeys + 8;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* qs = reinterpret_cast<bf16*>(smem_raw);  // [kRows][kLdQ]
  bf16* ks = qs + kRows * kLdQ;                  // [kKeys][kLdQ]
  bf16* vt = ks + kKeys * kLdQ;                  // [kDPad][kLdV]: vt[c][t] = V[64i + t][c]
  const Row4 s = LoadSegment(p.segs, si);
  const int64_t r0 = int64_t{gridDim.x - 1 - blockIdx.x} * kRows;  // last rows first
  const int64_t r_end = r0 + kRows < s.num_tokens ? r0 + kRows : s.num_tokens;
  const int h = static_cast<int>(blockIdx.y);
  const int kvh = h / (p.q_heads / p.kv_heads);
  const int64_t tiles = (s.position + r_end - 1) / kKeys + 1;  // through the last row's position
  auto k_tile = [&](int64_t i) { return k_stage + (i * p.kv_heads + kvh) * kKeys * kDPad; };
  auto vt_tile = [&](int64_t i) { return vt_stage + (i * p.kv_heads + kvh) * kDPad * kKeys; };

  CopyTile<kKeys, kDPad>(ks, k_tile(0));
  CpAsyncCommit();
  LoadQ<kDPad>(p, s, r0, r_end, h, qs, kLdQ);
  RowState rs(s, r0, r_end);
  FragC o[kDPad / 8];
  const bool any_row = r0 + (threadIdx.x >> 5) * 16 < r_end;  // warp-uniform
  for (int64_t i = 0; i < tiles; ++i) {
    CpAsyncWaitAll();
    __syncthreads();  // K(i) (the first time, Q too) in place; every warp is done with Vᵀ(i − 1)
    CopyTile<kDPad, kKeys>(vt, vt_tile(i));
    CpAsyncCommit();
    FragC sc[kKeys / 8];
    float corr[2] = {1.0f, 1.0f};
    if (any_row) {
      MmaStrip<kDPad / 16>(sc, qs, kLdQ, ks, kLdQ);
      OnlineSoftmax(sc, i * kKeys, p, rs, corr);
    }
    CpAsyncWaitAll();
    __syncthreads();  // Vᵀ(i) in place; every warp is done with K(i)
    if (i + 1 < tiles) {
      CopyTile<kKeys, kDPad>(ks, k_tile(i + 1));
      CpAsyncCommit();
    }
    if (any_row) AccumulatePV(o, sc, corr, vt, kLdV);
  }
  StoreOut(o, p, s, r0, h, 0, rs);
}

// The staged kernel's operands for segment si: tile i holds positions 64i … 64i + 63 of kv head h
// as k_stage[i][h][t][x] = bf16(K_{64i+t}[x]) and vt_stage[i][h][x][t] = bf16(V_{64i+t}[x]), zero
// past the segment's last position and past head_dim. Grid (tiles, kv heads), kStageThreads
// threads: the first 64 find their key's K and V rows (a block-table read for cached keys), then
// the elements are copied with every load of a thread's unrolled batch in flight at once; Vᵀ goes
// through shared memory so that both the reads and the transposed writes are coalesced (row
// stride kDPad + 2: the column reads of 32 rows fall in 32 banks).
// (The direct kernel zeroes keys past its own row block's last position; these tiles hold the
// segment's real keys there. The kernel masks them to P = +0, and 0 · v = 0 for finite v: the
// outputs are the same bits.)
constexpr int kStageThreads = 256;
template <int kDPad, int kKv>
__global__ void __launch_bounds__(kStageThreads)
    StageKvKernel(AttnArgs p, int64_t si, bf16* k_stage, bf16* vt_stage) {
  PdlEnter();
  constexpr int kLd = kDPad + 2;
  __shared__ bf16 sv[kKeys * kLd];
  __shared__ KvRow rows[2][kKeys];  // K and V rows of each key (null: no such key)
  const Row4 s = LoadSegment(p.segs, si);
  const int64_t pos_last = s.position + s.num_tokens - 1;
  const int64_t tile = int64_t{blockIdx.x} * p.kv_heads + blockIdx.y;
  const int kvh = static_cast<int>(blockIdx.y), d = p.head_dim;
  if (threadIdx.x < kKeys) {
    const int64_t j = int64_t{blockIdx.x} * kKeys + threadIdx.x;
    KvRow k_row{}, v_row{};
    if (j <= pos_last) KeyValueRows<kKv>(p, si, s, j, kvh, &k_row, &v_row);
    rows[0][threadIdx.x] = k_row;
    rows[1][threadIdx.x] = v_row;
  }
  __syncthreads();
  bf16* kd = k_stage + tile * kKeys * kDPad;
  bf16* vd = vt_stage + tile * kDPad * kKeys;
#pragma unroll 8
  for (int i = threadIdx.x; i < kKeys * kDPad; i += kStageThreads) {
    const int t = i / kDPad, x = i % kDPad;
    const KvRow& k_row = rows[0][t];
    const bool ok = k_row && x < d;
    const float kv = ok ? k_row.At<kKv>(x) : 0.0f;
    const float vv = ok ? rows[1][t].At<kKv>(x) : 0.0f;
    kd[i] = __float2bfloat16(kv);
    sv[t * kLd + x] = __float2bfloat16(vv);
  }
  __syncthreads();
#pragma unroll 8
  for (int i = threadIdx.x; i < kKeys * kDPad; i += kStageThreads) {
    const int x = i / kKeys, t = i % kKeys;
    vd[i] = sv[t * kLd + x];
  }
}

// kDPad for a head: 64, 128 or 256 (0: wider than 256).
int PaddedHeadDim(int head_dim) {
  return head_dim <= 64 ? 64 : head_dim <= 128 ? 128 : head_dim <= 256 ? 256 : 0;
}

// Whether the kernels this process may launch got their shared memory (once): the direct one for
// each cache type always (the staged modes still take it for windowed layers), the staged or flash
// one in its mode.
template <int kDPad>
bool ReadyPad() {
  static const bool ready =
      OptInShared(TensorAttendKernel<kDPad, false, kKvF32>, SharedBytes<kDPad>()) &&
      OptInShared(TensorAttendKernel<kDPad, false, kKvBf16>, SharedBytes<kDPad>()) &&
      OptInShared(TensorAttendKernel<kDPad, false, kKvFp8>, SharedBytes<kDPad>()) &&
      (Mode() != AttentionMode::kStaged ||
       OptInShared(TensorAttendKernel<kDPad, true>, SharedBytes<kDPad>())) &&
      (Mode() != AttentionMode::kFlash ||
       OptInShared(FlashAttendKernel<kDPad>, FlashSharedBytes<kDPad>()));
  return ready;
}
bool Ready(int pad) {
  return pad == 64 ? ReadyPad<64>() : pad == 128 ? ReadyPad<128>() : ReadyPad<256>();
}

template <int kDPad>
absl::Status Launch(cudaStream_t stream, const AttnArgs& p, int64_t si, int64_t n,
                    const TensorAttendStage* stage) {
  const dim3 grid(static_cast<unsigned>(CeilDiv(n, kRows)), static_cast<unsigned>(p.q_heads),
                  static_cast<unsigned>(kDPad / Chunk<kDPad>()));
  if (stage == nullptr) {
    WithKvDType(p.kv_store, [&](auto kv) {
      LaunchKernel(TensorAttendKernel<kDPad, false, decltype(kv)::value>, grid, 32 * kWarps,
                   SharedBytes<kDPad>(), stream, p, si, nullptr, nullptr);
    });
    return CheckLaunch("TensorAttendKernel");
  }
  WithKvDType(p.kv_store, [&](auto kv) {
    LaunchKernel(StageKvKernel<kDPad, decltype(kv)::value>,
                 dim3(static_cast<unsigned>(stage->key_tiles), static_cast<unsigned>(p.kv_heads)),
                 kStageThreads, 0, stream, p, si, stage->k, stage->vt);
  });
  RETURN_IF_ERROR(CheckLaunch("StageKvKernel"));
  if (Mode() == AttentionMode::kFlash) {
    LaunchKernel(FlashAttendKernel<kDPad>, dim3(grid.x, grid.y), 32 * kWarps,
                 FlashSharedBytes<kDPad>(), stream, p, si, stage->k, stage->vt);
    return CheckLaunch("FlashAttendKernel");
  }
  LaunchKernel(TensorAttendKernel<kDPad, true>, grid, 32 * kWarps, SharedBytes<kDPad>(), stream, p,
               si, stage->k, stage->vt);
  return CheckLaunch("TensorAttendKernel (staged)");
}

}  // namespace

bool TensorAttendReady(int head_dim) {
  const int pad = PaddedHeadDim(head_dim);
  return pad != 0 && Ready(pad);
}

int64_t TensorAttendStageElements(int head_dim, int kv_heads, int64_t key_tiles) {
  return key_tiles * kv_heads * kKeys * PaddedHeadDim(head_dim);
}

int64_t TensorAttendKeyTiles(int64_t keys) { return CeilDiv(keys, kKeys); }

absl::Status LaunchTensorAttend(cudaStream_t stream, const AttnArgs& p, int64_t si, int64_t n,
                                const TensorAttendStage* stage) {
  if (stage != nullptr && p.window > 0) {
    return absl::InternalError("staged tensor-core attention: a windowed layer");
  }
  switch (PaddedHeadDim(p.head_dim)) {
    case 64:
      return Launch<64>(stream, p, si, n, stage);
    case 128:
      return Launch<128>(stream, p, si, n, stage);
    case 256:
      return Launch<256>(stream, p, si, n, stage);
    default:
      return absl::InternalError(absl::StrCat("tensor-core attention: head_dim ", p.head_dim));
  }
}

}  // namespace linfer::cuda
