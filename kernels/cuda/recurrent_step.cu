// Token-by-token recurrence (decode, and short segments), every decay/delta/normaliser variant:
//   α = decay(g_t) (1, e^g or e^{g_c} per key row);  sk = (αS)ᵀk,  sq = (αS)ᵀq_s   (q_s = scale·q)
//   u = β(v − sk) (delta rule) or v;  S ← αS + k uᵀ;  o = sq + u·(k·q_s)  [/ (q_s·(z += k) +
//   1e-10)]
// With GdnPrep (Gated DeltaNet) q, k arrive raw and the gates as projections: α and β are formed
// from them, and the L2 norms enter as factors, sk·(1/‖k‖), sq·(scale/‖q‖), k·q_s·(both), and
// the update's k·(1/‖k‖). One pass over the state computes both reductions before the update:
// per token the state is read once and written once, and it stays in registers across a segment's
// tokens (f32 or bf16 in memory, f32 arithmetic). Mapping: one block per (tile of dv, head,
// segment) — 32 columns, or 128 / 64 with LINFER_CUDA_STEP=wide; a warp's lanes are tile/4 column
// groups of 4 (float4 rows, coalesced) × 32/(tile/4) row lanes (8 × 4 for 32 columns); the kWarps
// warps stack row blocks; each thread holds kRows × 4 state values. Column sums reduce
// by warp shuffles, then across warps through shared memory. Memory-bound: bytes = 2 · state, the
// target is the copy bandwidth.
#include <algorithm>

#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/env_option.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/recurrence_kernels.cuh"

namespace linfer::cuda {
namespace {

constexpr int kTile = 32;  // state columns per block

// kSmem (LINFER_CUDA_STEP=smem, the default; "registers" turns it off): the state tile
// lives in shared memory instead of registers (each thread still touches only its own kRows × 4
// values), the tiles arriving by cp.async. Why: with the tile in registers the kernel needs 128
// registers a thread at dk = 128, so 4 blocks fit an SM and at most their 64 KB of state are in
// flight — on an H200 the decode step moved 0.52 of the copy bandwidth at batch 256; without
// them about 12 blocks fit. bf16 states are loaded synchronously (a bf16 step moved 0.35 of the
// copy bandwidth at batch 256 on an H200), or with LINFER_CUDA_STEP_BF16=async (opt-in until a GPU
// run has passed and timed it) by cp.async too: each thread's 4 values of a row (8 bytes) land in
// the upper half of its 16-byte spot and are widened in place (LandTile) — only in instances with
// kAsyncBf16 (the code for it cost the f32 instance 16 registers at dk = 128).
// One block's work item: the kCols-column tile bx of head by of segment bz. With kPipe the state
// tile was already copied into `tile` (PrefetchTile) and its copies waited for by the caller.
template <int kWarps, int kRows, bool kSmem, bool kPipe, int kCols = kTile, bool kAsyncBf16 = true>
__device__ __forceinline__ void StepItem(const RecParams& p, int bx, int by, int bz, float* tile) {
  // A warp's lanes: kGroups column groups of 4 (a row's kCols columns, 16 bytes a lane) × kRowLanes
  // row lanes.
  constexpr int kGroups = kCols / 4, kRowLanes = 32 / kGroups;
  static_assert(kGroups * kRowLanes == 32 && kCols <= kWarps * 32, "tile width: 32, 64 or 128");
  constexpr int kThreads = kWarps * 32;
  constexpr int kMaxDk = kRowLanes * kWarps * kRows;
  __shared__ float qs[kMaxDk], ks[kMaxDk], al[kMaxDk], zs[kMaxDk];
  __shared__ __align__(16) float red[kWarps][2][kCols];
  __shared__ __align__(16) float us[kCols];
  __shared__ float vs[kCols];
  // α (scalar decay), β, k·q_s, normaliser, and GdnPrep's factors of Sᵀk and Sᵀq: 1/‖k‖ and
  // scale/‖q‖ (both 1 without it: q is staged already scaled and k as it is)
  __shared__ float scalars[6];

  const Row4 seg = LoadSegment(p.segs, bz);
  if (seg.num_tokens >= p.min_chunk_tokens) return;  // the chunked path owns this segment
  const int h = by, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int cg = lane % kGroups, rs = lane / kGroups;
  const int col0 = bx * kCols + cg * 4;
  const int dk = p.dk, dv = p.dv;
  const int64_t head_base = (seg.slot * p.heads + h) * int64_t{dk} * dv;
  const bool vec = dv % 4 == 0 && col0 + 4 <= dv;

  // State value (m, c) of this thread: row rs + kRowLanes·(warp + kWarps·m), column col0 + c.
  float regs[kSmem ? 1 : kRows][4];
  auto S = [&](int m, int c) -> float& {
    if constexpr (kSmem) {
      return tile[(rs + kRowLanes * (warp + kWarps * m)) * kCols + cg * 4 + c];
    } else {
      return regs[m][c];
    }
  };
  // A thread's 4 values of row m at once (one 16-byte shared access: no bank conflicts).
  auto Get4 = [&](int m, float(&v)[4]) {
    if constexpr (kSmem) {
      const float4 x = *reinterpret_cast<const float4*>(&S(m, 0));
      v[0] = x.x, v[1] = x.y, v[2] = x.z, v[3] = x.w;
    } else {
#pragma unroll
      for (int c = 0; c < 4; ++c) v[c] = regs[m][c];
    }
  };
  auto Put4 = [&](int m, const float(&v)[4]) {
    if constexpr (kSmem) {
      *reinterpret_cast<float4*>(&S(m, 0)) = make_float4(v[0], v[1], v[2], v[3]);
    } else {
#pragma unroll
      for (int c = 0; c < 4; ++c) regs[m][c] = v[c];
    }
  };
#pragma unroll
  for (int m = 0; m < kRows; ++m) {
    if constexpr (kPipe) break;  // prefetched
    const int i = rs + kRowLanes * (warp + kWarps * m);
    const int64_t at = head_base + int64_t{i} * dv + col0;
    if (i >= dk) {
#pragma unroll
      for (int c = 0; c < 4; ++c) S(m, c) = 0.0f;
      continue;
    }
    if (kSmem && !p.state_bf16 && vec) {  // 16 bytes straight into this thread's spot
      CpAsync16(&S(m, 0), static_cast<const float*>(p.state) + at, 16);
      continue;
    }
    if (kSmem && kAsyncBf16 && p.state_bf16 && p.bf16_cp_async &&
        vec) {                                         // its 4 bf16 into the upper half
      CpAsync8(reinterpret_cast<char*>(&S(m, 0)) + 8,  // of its spot, widened in place (LandTile)
               static_cast<const __nv_bfloat16*>(p.state) + at);
      continue;
    }
    if (p.state_bf16) {
      const __nv_bfloat16* st = static_cast<const __nv_bfloat16*>(p.state) + at;
      if (vec) {
        const uint2 raw = *reinterpret_cast<const uint2*>(st);
        const __nv_bfloat162 lo = *reinterpret_cast<const __nv_bfloat162*>(&raw.x);
        const __nv_bfloat162 hi = *reinterpret_cast<const __nv_bfloat162*>(&raw.y);
        S(m, 0) = __low2float(lo), S(m, 1) = __high2float(lo);
        S(m, 2) = __low2float(hi), S(m, 3) = __high2float(hi);
      } else {
        for (int c = 0; c < 4; ++c) S(m, c) = col0 + c < dv ? Bf16ToFloat(st[c]) : 0.0f;
      }
    } else {
      const float* st = static_cast<const float*>(p.state) + at;
      if (vec) {
        const float4 x = *reinterpret_cast<const float4*>(st);
        S(m, 0) = x.x, S(m, 1) = x.y, S(m, 2) = x.z, S(m, 3) = x.w;
      } else {
        for (int c = 0; c < 4; ++c) S(m, c) = col0 + c < dv ? st[c] : 0.0f;
      }
    }
  }
  // Waits for this thread's state copies (kSmem) and widens the bf16 ones in place: each thread
  // reads and writes only its own 16-byte spots (its 4 bf16 sit in a spot's upper 8 bytes).
  auto LandTile = [&]() {
    if constexpr (kSmem && !kPipe) CpAsyncCommitAndWaitAll();
    if constexpr (kSmem && !kPipe && kAsyncBf16) {
      if (!p.state_bf16 || !p.bf16_cp_async || !vec) return;
#pragma unroll
      for (int m = 0; m < kRows; ++m) {
        if (rs + kRowLanes * (warp + kWarps * m) >= dk) continue;
        const uint2 raw =
            *reinterpret_cast<const uint2*>(reinterpret_cast<const char*>(&S(m, 0)) + 8);
        const __nv_bfloat162 lo = *reinterpret_cast<const __nv_bfloat162*>(&raw.x);
        const __nv_bfloat162 hi = *reinterpret_cast<const __nv_bfloat162*>(&raw.y);
        *reinterpret_cast<float4*>(&S(m, 0)) =
            make_float4(__low2float(lo), __high2float(lo), __low2float(hi), __high2float(hi));
      }
    }
  };
  float* z = p.normalize ? p.z + (seg.slot * p.heads + h) * int64_t{dk} : nullptr;
  if (p.normalize) {
    for (int i = tid; i < dk; i += kThreads) zs[i] = z[i];
  }

  for (int64_t t = 0; t < seg.num_tokens; ++t) {
    const int64_t row = seg.row_begin + t;
    const float* q = p.q.Row(row, h, dk);
    const float* k = p.k.Row(row, h, dk);
    for (int i = tid; i < dk; i += kThreads) {
      qs[i] = p.gdn ? q[i] : q[i] * p.scale;
      ks[i] = k[i];
      if (p.decay == kDecayVector) al[i] = expf(p.g.Row(row, h, dk)[i]);
    }
    if (tid < kCols) {
      const int col = bx * kCols + tid;
      vs[tid] = col < dv ? p.v.Row(row, h, dv)[col] : 0.0f;
    }
    if (tid == 0 && p.gdn) {  // GdnGates' formulas (pointwise.cu)
      const int hg = h / p.g.share;
      scalars[0] = expf(-expf(p.a_log[hg]) * DeviceSoftplus(*p.g.Row(row, h, 1) + p.dt_bias[hg]));
      scalars[1] = DeviceSigmoid(*p.beta.Row(row, h, 1)) * p.beta_scale;
    } else if (tid == 0) {
      scalars[0] = expf(ScalarLogDecay(p, row, h));
      scalars[1] = p.delta ? *p.beta.Row(row, h, 1) : 1.0f;
    }
    // The state tile's copies (kSmem, f32): each thread reads only its own values, so its own
    // wait suffices; issued after this token's q/k/v loads so that both latencies overlap.
    if (t == 0) LandTile();
    __syncthreads();
    const float alpha = scalars[0];
    float pk[4] = {0.0f, 0.0f, 0.0f, 0.0f}, pq[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int m = 0; m < kRows; ++m) {
      const int i = rs + kRowLanes * (warp + kWarps * m);
      if (i >= dk) continue;
      const float a = p.decay == kDecayVector ? al[i] : alpha;
      const float kw = a * ks[i], qw = a * qs[i];
      float sv[4];
      Get4(m, sv);
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        pk[c] += sv[c] * kw;
        pq[c] += sv[c] * qw;
      }
    }
#pragma unroll
    for (int o = kGroups; o < 32; o <<= 1) {  // over the row lanes (none when kRowLanes = 1)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        pk[c] += __shfl_xor_sync(0xffffffffu, pk[c], o);
        pq[c] += __shfl_xor_sync(0xffffffffu, pq[c], o);
      }
    }
    if (rs == 0) {  // one 16-byte store each (scalar stores 4 apart conflict at 128 columns)
      *reinterpret_cast<float4*>(&red[warp][0][cg * 4]) = make_float4(pk[0], pk[1], pk[2], pk[3]);
      *reinterpret_cast<float4*>(&red[warp][1][cg * 4]) = make_float4(pq[0], pq[1], pq[2], pq[3]);
    }
    if (warp == 0) {  // k·q_s, the normaliser (z += k, then q_s·z), GdnPrep's norms, over dk
      float kq = 0.0f, den = 0.0f, qq = 0.0f, kk = 0.0f;
      for (int i = lane; i < dk; i += 32) {
        kq += ks[i] * qs[i];
        if (p.normalize) {
          zs[i] += ks[i];
          den += qs[i] * zs[i];
        }
        if (p.gdn) qq += qs[i] * qs[i], kk += ks[i] * ks[i];
      }
      kq = WarpSum(kq);
      den = WarpSum(den);
      float rk = 1.0f, fq = 1.0f;
      if (p.gdn) {  // L2Normalize's factors (norm.cu), and q's scale
        rk = rsqrtf(WarpSum(kk) + p.l2_eps);
        fq = rsqrtf(WarpSum(qq) + p.l2_eps) * p.scale;
        kq *= rk * fq;
      }
      if (lane == 0) scalars[2] = kq, scalars[3] = den, scalars[4] = rk, scalars[5] = fq;
    }
    __syncthreads();
    if (tid < kCols) {
      float sk = 0.0f, sq = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) sk += red[w][0][tid], sq += red[w][1][tid];
      sk *= scalars[4];
      sq *= scalars[5];
      const float u = p.delta ? scalars[1] * (vs[tid] - sk) : vs[tid];
      float out = sq + u * scalars[2];
      if (p.normalize) out /= scalars[3] + 1e-10f;
      const int col = bx * kCols + tid;
      if (col < dv) p.o[row * p.o_ld + int64_t{h} * dv + col] = out;
      us[tid] = u;
    }
    __syncthreads();
    const float rk = scalars[4];
    // This thread's 4 columns of u, once (read per row, they would be reloaded: `tile` may alias).
    const float4 u4 = *reinterpret_cast<const float4*>(&us[cg * 4]);
    const float uc[4] = {u4.x, u4.y, u4.z, u4.w};
#pragma unroll
    for (int m = 0; m < kRows; ++m) {
      const int i = rs + kRowLanes * (warp + kWarps * m);
      if (i >= dk) continue;
      const float a = p.decay == kDecayVector ? al[i] : alpha, ki = ks[i] * rk;
      float sv[4];
      Get4(m, sv);
#pragma unroll
      for (int c = 0; c < 4; ++c) sv[c] = a * sv[c] + ki * uc[c];
      Put4(m, sv);
    }
    __syncthreads();  // qs/ks/al/us/scalars are restaged by the next token
  }
  // A segment of no tokens never waited in the loop: its copies must land before the store.
  if (seg.num_tokens == 0) LandTile();

#pragma unroll
  for (int m = 0; m < kRows; ++m) {
    const int i = rs + kRowLanes * (warp + kWarps * m);
    if (i >= dk) continue;
    const int64_t at = head_base + int64_t{i} * dv + col0;
    if (p.state_bf16) {
      __nv_bfloat16* st = static_cast<__nv_bfloat16*>(p.state) + at;
      if (vec) {
        uint2 raw;
        *reinterpret_cast<__nv_bfloat162*>(&raw.x) = __floats2bfloat162_rn(S(m, 0), S(m, 1));
        *reinterpret_cast<__nv_bfloat162*>(&raw.y) = __floats2bfloat162_rn(S(m, 2), S(m, 3));
        *reinterpret_cast<uint2*>(st) = raw;
      } else {
        for (int c = 0; c < 4; ++c) {
          if (col0 + c < dv) st[c] = FloatToBf16(S(m, c));
        }
      }
    } else {
      float* st = static_cast<float*>(p.state) + at;
      if (vec) {
        *reinterpret_cast<float4*>(st) = make_float4(S(m, 0), S(m, 1), S(m, 2), S(m, 3));
      } else {
        for (int c = 0; c < 4; ++c) {
          if (col0 + c < dv) st[c] = S(m, c);
        }
      }
    }
  }
  if (p.normalize && bx == 0) {  // committed by CommitZKernel (other tiles read z)
    float* zn = p.z_next + (int64_t{bz} * p.heads + h) * dk;
    for (int i = tid; i < dk; i += kThreads) zn[i] = zs[i];
  }
}

// kPipe's copy of a work item's f32 state tile into `tile` (cp.async, 16 bytes a thread and row;
// rows past dk zeroed): each thread fills exactly the values it alone reads in StepItem.
template <int kWarps, int kRows>
__device__ __forceinline__ void PrefetchTile(const RecParams& p, int bx, int by, int bz,
                                             float* tile) {
  const Row4 seg = LoadSegment(p.segs, bz);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, cg = lane & 7, rs = lane >> 3;
  const int64_t head_base = (seg.slot * p.heads + by) * int64_t{p.dk} * p.dv;
  const float* state = static_cast<const float*>(p.state) + head_base + bx * kTile + cg * 4;
#pragma unroll
  for (int m = 0; m < kRows; ++m) {
    const int i = rs + 4 * (warp + kWarps * m);
    float* dst = tile + i * kTile + cg * 4;
    if (i >= p.dk) {
      *reinterpret_cast<float4*>(dst) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      continue;
    }
    CpAsync16(dst, state + int64_t{i} * p.dv, 16);
  }
}

// The step kernel: one block per work item (grid: dv tiles × heads × segments). kMinBlocks: the
// blocks an SM must hold (registers capped to fit). The smem default keeps the occupancy it had
// when the H200 measured it (ba0e522): 8 blocks an SM up to dk = 128 (64 registers; 128 KB of state
// tiles in flight), 5 at dk = 256 (96 registers) — SmemMinBlocks; later changes (the bf16 cp.async
// path, PDL's launch, the tile-width template) had let nvcc 13.0 take 80 / 128 registers there
// unasked, 6 / 4 blocks. LINFER_CUDA_STEP=dense (opt-in until a GPU run has passed and timed it):
// 10 at dk ≤ 128 (48 registers, 44 bytes spilled at dk = 128) — beside "wide", it tells whether the
// step waits on the state in flight per SM or on DRAM's access order. kAsyncBf16: the instance
// for bf16 states by cp.async (LINFER_CUDA_STEP_BF16=async); the others load bf16 states
// synchronously.
template <int kWarps, int kRows, bool kSmem, int kMinBlocks, bool kAsyncBf16>
__global__ void __launch_bounds__(kWarps * 32, kMinBlocks) StepKernel(RecParams p) {
  PdlEnter();
  __shared__ __align__(16) float tile[kSmem ? 4 * kWarps * kRows * kTile : 4];
  StepItem<kWarps, kRows, kSmem, false, kTile, kAsyncBf16>(p, blockIdx.x, blockIdx.y, blockIdx.z,
                                                           tile);
}

// LINFER_CUDA_STEP=pipe (f32 state, dv a multiple of 32, dk ≤ 128, no normaliser): persistent
// blocks walk the work items (tile fastest, then head, then segment) gridDim.x apart, and copy
// the next item's state tile into the second shared buffer while they compute the current one —
// the state stream never waits on the per-token arithmetic. Why: with one tile per block, a
// block's copies are in flight only before its compute; the copy bandwidth needs ≈ 40 KB in
// flight per SM all the time. Six blocks a SM (≈ 36 KB of shared memory each at dk = 128).
template <int kWarps, int kRows>
__global__ void __launch_bounds__(kWarps * 32, 6) StepPipeKernel(RecParams p, int num_segments) {
  PdlEnter();
  constexpr int kMaxDk = 4 * kWarps * kRows;
  static_assert(kMaxDk <= 128, "two shared tiles of ≤ 16 KB");
  __shared__ __align__(16) float tile[2][kMaxDk * kTile];
  const int tiles = p.dv / kTile;
  const int64_t items = int64_t{tiles} * p.heads * num_segments;
  // Item i: tile i % tiles, head i / tiles % heads, segment i / (tiles · heads), and whether the
  // step kernel owns its segment (else nothing is copied or computed for it).
  struct Item {
    int x = 0, y = 0, z = 0;
    bool stepped = false;
  };
  auto item = [&](int64_t i) {
    Item it;
    it.x = static_cast<int>(i % tiles);
    it.y = static_cast<int>(i / tiles % p.heads);
    it.z = static_cast<int>(i / tiles / p.heads);
    it.stepped = LoadSegment(p.segs, it.z).num_tokens < p.min_chunk_tokens;
    return it;
  };
  Item cur;
  if (blockIdx.x < items) cur = item(blockIdx.x);
  if (cur.stepped) PrefetchTile<kWarps, kRows>(p, cur.x, cur.y, cur.z, tile[0]);
  CpAsyncCommit();
  int buf = 0;
  for (int64_t i = blockIdx.x; i < items; i += gridDim.x, buf ^= 1) {
    // The next item's copies go out first (into the buffer the previous item used: each thread
    // stored its own values from it before), then this item's are waited for (all groups but
    // the newest; an item of the chunked path committed an empty group).
    Item next;
    if (i + gridDim.x < items) next = item(i + gridDim.x);
    if (next.stepped) PrefetchTile<kWarps, kRows>(p, next.x, next.y, next.z, tile[buf ^ 1]);
    CpAsyncCommit();
    CpAsyncWaitAllButOne();
    if (cur.stepped) {
      StepItem<kWarps, kRows, true, true, kTile, false>(p, cur.x, cur.y, cur.z, tile[buf]);
    }
    cur = next;
  }
  CpAsyncWaitAll();
}

// LINFER_CUDA_STEP=wide (opt-in until a GPU run has passed and timed it; 32 < dk ≤ 256): one
// block per 128-column tile (64 at dk > 128) of a head, its state tile (64 KB at dk = 128 or 256)
// in dynamic shared memory, a warp's 32 lanes × 16 bytes covering one state row's tile: every
// cp.async of a warp reads one contiguous 512-byte run (256 at 64 columns) — the narrow 32-column
// tiles read 128-byte pieces 512 bytes apart (dv = 128), and the four tiles of a head are fetched
// by four blocks at unrelated times. Why: the smem step moved 0.59–0.67 of the copy bandwidth at
// batch ≥ 64 on an H200 with its SMs 43 % busy, i.e. waiting on memory with ≈ 128 KB of state in
// flight per SM (8 blocks of 16 KB, bounded by registers): here 3 blocks of 64 KB fit an SM, and
// DRAM sees whole rows. Fewer, larger blocks: at batch 64 the Qwen3.5 layer has 1,024 of them.
// Registers bounded so that the blocks the shared memory allows fit too (3 of 64 KB; 5 of 32 KB).
// LINFER_CUDA_STEP=wide64 takes 64-column tiles at dk ≤ 128 too: 32 KB, 5 blocks (160 KB) an SM,
// 256-byte runs, twice the blocks of "wide" — between it and the 32-column default.
template <int kWarps, int kRows, int kCols>
__global__ void __launch_bounds__(kWarps * 32, kRows >= 32 ? 3 : 5) StepWideKernel(RecParams p) {
  PdlEnter();
  extern __shared__ float4 wide_smem[];
  StepItem<kWarps, kRows, true, false, kCols>(p, blockIdx.x, blockIdx.y, blockIdx.z,
                                              reinterpret_cast<float*>(wide_smem));
}

// z[slot, h] ← z_next[segment, h] for the segments the step kernel ran. Grid (heads, segments).
__global__ void CommitZKernel(RecParams p) {
  PdlEnter();
  const Row4 seg = LoadSegment(p.segs, blockIdx.y);
  if (seg.num_tokens >= p.min_chunk_tokens || seg.num_tokens == 0) return;
  const int h = blockIdx.x;
  const float* zn = p.z_next + (int64_t{blockIdx.y} * p.heads + h) * p.dk;
  float* z = p.z + (seg.slot * p.heads + h) * int64_t{p.dk};
  for (int i = threadIdx.x; i < p.dk; i += blockDim.x) z[i] = zn[i];
}

// LINFER_CUDA_STEP: unset or "smem" (the state tile in shared memory, the default since the H200
// run of 2026-11-27 at ba0e522: 1.2–1.5× "registers" at batch ≥ 64, ≥ 0.96× below), "registers"
// (the state tile in registers), "pipe" (StepPipeKernel where it applies, else "smem"; it passed
// but ran 0.87–0.90× smem where it applies), "wide" (StepWideKernel where it applies, else
// "smem"), "wide64" (the same with 64-column tiles at dk ≤ 128) or "dense" (StepKernel with 10
// blocks an SM at dk ≤ 128, else "smem"; bf16 states loaded synchronously there, whatever
// LINFER_CUDA_STEP_BF16 says).
absl::string_view StepMode() {
  static const absl::string_view mode =
      EnvOption("LINFER_CUDA_STEP", {"smem", "registers", "pipe", "wide", "wide64", "dense"});
  return mode;
}
// LINFER_CUDA_STEP_BF16: unset or "sync", or "async" (bf16 tiles by cp.async; see kSmem).
bool Bf16CpAsync() {
  static const bool on = EnvOption("LINFER_CUDA_STEP_BF16", {"sync", "async"}) == "async";
  return on;
}

// The normaliser's commit after a step kernel (only with p.normalize).
absl::Status CommitZ(const RecParams& p, int num_segments, cudaStream_t stream) {
  if (!p.normalize) return absl::OkStatus();
  LaunchKernel(CommitZKernel,
               dim3(static_cast<unsigned>(p.heads), static_cast<unsigned>(num_segments)), 128, 0,
               stream, p);
  return CheckLaunch("CommitZKernel");
}

// The smem step's blocks an SM (see StepKernel): 8 up to dk = 128, 5 at 256 (4 warps); none asked
// of the 8-warp instance (dk ≤ 512).
constexpr int SmemMinBlocks(int warps, int rows) {
  return warps != 4 ? 1 : rows <= 8 ? 8 : rows <= 16 ? 5 : 1;
}

template <int kWarps, int kRows>
absl::Status Launch(const RecParams& params, int num_segments, cudaStream_t stream) {
  constexpr int kMaxDk = 4 * kWarps * kRows;
  RecParams p = params;
  p.bf16_cp_async = p.state_bf16 && Bf16CpAsync();
  const dim3 grid(static_cast<unsigned>(CeilDiv(p.dv, kTile)), static_cast<unsigned>(p.heads),
                  static_cast<unsigned>(num_segments));
  const absl::string_view mode = StepMode();
  bool launched = false;
  if constexpr (kMaxDk <= 128) {
    if (mode == "pipe" && !p.state_bf16 && !p.normalize && p.dv % kTile == 0) {
      // Resident blocks per SM, once per instantiation (a host computation the driver need not
      // repeat every step); a failed query leaves one.
      static const int per_sm = [] {
        int n = 0;
        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, StepPipeKernel<kWarps, kRows>,
                                                          kWarps * 32, 0) != cudaSuccess) {
          cudaGetLastError();  // cleared: the launch below reports its own
        }
        return std::max(n, 1);
      }();
      ASSIGN_OR_RETURN(const int sms, DeviceAttribute(cudaDevAttrMultiProcessorCount));
      const int64_t resident = int64_t{per_sm} * sms;
      const int64_t items = int64_t{p.dv / kTile} * p.heads * num_segments;
      LaunchKernel(StepPipeKernel<kWarps, kRows>, static_cast<unsigned>(std::min(items, resident)),
                   kWarps * 32, 0, stream, p, num_segments);
      launched = true;
    }
  }
  // The shared tile of kSmem takes 4·kWarps·kRows·kTile floats of static shared memory: dk ≤ 256.
  if constexpr (kMaxDk <= 128) {
    if (!launched && mode == "dense") {
      LaunchKernel(StepKernel<kWarps, kRows, true, 10, false>, grid, kWarps * 32, 0, stream, p);
      launched = true;
    }
  }
  if constexpr (kMaxDk <= 256) {
    if (!launched && mode != "registers") {
      constexpr int kMin = SmemMinBlocks(kWarps, kRows);
      if (p.bf16_cp_async) {
        LaunchKernel(StepKernel<kWarps, kRows, true, kMin, true>, grid, kWarps * 32, 0, stream, p);
      } else {
        LaunchKernel(StepKernel<kWarps, kRows, true, kMin, false>, grid, kWarps * 32, 0, stream, p);
      }
      launched = true;
    }
  }
  if (!launched) {
    LaunchKernel(StepKernel<kWarps, kRows, false, 1, false>, grid, kWarps * 32, 0, stream, p);
  }
  RETURN_IF_ERROR(CheckLaunch("StepKernel"));
  return CommitZ(p, num_segments, stream);
}

template <int kWarps, int kRows, int kCols>
constexpr size_t WideBytes() {
  return sizeof(float) * (32 / (kCols / 4) * kWarps * kRows) * kCols;
}

// Dynamic shared memory beyond 48 KB must be allowed per kernel: once (a failure is kept and
// returned again, its error cleared).
template <int kWarps, int kRows, int kCols>
absl::Status AllowWide() {
  static const cudaError_t allowed = [] {
    const cudaError_t err = cudaFuncSetAttribute(
        StepWideKernel<kWarps, kRows, kCols>, cudaFuncAttributeMaxDynamicSharedMemorySize,
        static_cast<int>(WideBytes<kWarps, kRows, kCols>()));
    if (err != cudaSuccess) (void)cudaGetLastError();
    return err;
  }();
  CUDA_RETURN_IF_ERROR(allowed);
  return absl::OkStatus();
}

template <int kWarps, int kRows, int kCols>
absl::Status LaunchWide(const RecParams& params, int num_segments, cudaStream_t stream) {
  constexpr size_t kBytes = WideBytes<kWarps, kRows, kCols>();
  RETURN_IF_ERROR((AllowWide<kWarps, kRows, kCols>()));
  RecParams p = params;
  p.bf16_cp_async = p.state_bf16 && Bf16CpAsync();
  const dim3 grid(static_cast<unsigned>(CeilDiv(p.dv, kCols)), static_cast<unsigned>(p.heads),
                  static_cast<unsigned>(num_segments));
  LaunchKernel(StepWideKernel<kWarps, kRows, kCols>, grid, kWarps * 32, kBytes, stream, p);
  RETURN_IF_ERROR(CheckLaunch("StepWideKernel"));
  return CommitZ(p, num_segments, stream);
}

bool Wide(const RecParams& p) {
  return (StepMode() == "wide" || StepMode() == "wide64") && p.dk > 32 && p.dk <= 256;
}

// StepWideKernel's instantiation for p (rows per thread, tile columns): 128-column tiles up to
// d_k 128 (64 with "wide64": half the shared memory, 5 blocks an SM), 64 above.
enum class WideShape { kR16C128, kR32C128, kR8C64, kR16C64, kR32C64 };
WideShape WideOf(const RecParams& p) {
  const bool narrow = StepMode() == "wide64";
  if (p.dk <= 64) return narrow ? WideShape::kR8C64 : WideShape::kR16C128;
  if (p.dk <= 128) return narrow ? WideShape::kR16C64 : WideShape::kR32C128;
  return WideShape::kR32C64;
}

}  // namespace

absl::Status PrepareStep(const RecParams& p) {
  if (!Wide(p)) return absl::OkStatus();
  switch (WideOf(p)) {
    case WideShape::kR16C128:
      return AllowWide<4, 16, 128>();
    case WideShape::kR32C128:
      return AllowWide<4, 32, 128>();
    case WideShape::kR8C64:
      return AllowWide<4, 8, 64>();
    case WideShape::kR16C64:
      return AllowWide<4, 16, 64>();
    case WideShape::kR32C64:
      return AllowWide<4, 32, 64>();
  }
  return absl::InternalError("PrepareStep: unknown wide shape");
}

absl::Status LaunchStep(const RecParams& p, int num_segments, cudaStream_t stream) {
  if (Wide(p)) {
    switch (WideOf(p)) {
      case WideShape::kR16C128:
        return LaunchWide<4, 16, 128>(p, num_segments, stream);
      case WideShape::kR32C128:
        return LaunchWide<4, 32, 128>(p, num_segments, stream);
      case WideShape::kR8C64:
        return LaunchWide<4, 8, 64>(p, num_segments, stream);
      case WideShape::kR16C64:
        return LaunchWide<4, 16, 64>(p, num_segments, stream);
      case WideShape::kR32C64:
        return LaunchWide<4, 32, 64>(p, num_segments, stream);
    }
  }
  // Rows covered = 4 · warps · rows per thread ≥ dk.
  if (p.dk <= 16) return Launch<4, 1>(p, num_segments, stream);
  if (p.dk <= 32) return Launch<4, 2>(p, num_segments, stream);
  if (p.dk <= 64) return Launch<4, 4>(p, num_segments, stream);
  if (p.dk <= 128) return Launch<4, 8>(p, num_segments, stream);
  if (p.dk <= 256) return Launch<4, 16>(p, num_segments, stream);
  if (p.dk <= 512) return Launch<8, 16>(p, num_segments, stream);
  return absl::UnimplementedError(
      absl::StrCat("recurrence on CUDA: key dim ", p.dk, " > 512 is not supported"));
}

}  // namespace linfer::cuda
