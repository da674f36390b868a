// Chunked recurrence, step 2 of 2 (3 with the split scan): the scan over a segment's 64-token
// chunks, carrying the state h [dk, BV] (a tile of value columns) in registers. Per chunk, with γ_i
// = e^{b_i} (scalar decay; the vector decay folds e^{B} into Q̃ and e^{B_L − B} into K̃), d_j =
// e^{b_L − b_j}:
//   delta rule: X = V − diag(γ) K h,  U = T X            (T = (I + A)⁻¹diag(β) from chunk_prep)
//   otherwise:  U = V
//   o = diag(scale·γ) Q h + M U;   h ← e^{b_L} h + Kᵀ diag(d) U
// Mapping: one block (4 warps) per (BV-column tile, head, chunked segment), walking its chunks
// in order. Warp w owns token rows 16w..16w+15 of every [64, BV] product and key rows
// [w·dk/4, (w+1)·dk/4) of h. All products run on tensor cores (mma m16n8k16: bf16 operands staged
// in shared memory, f32 accumulators; h itself stays f32 in registers and is rounded to bf16 only
// as an operand). Per chunk: 4·64·dk·BV + 4·64²·BV FLOPs for ≈ 64·(2·dk + 2·BV) f32 loads/stores.
// Two kernels share that arithmetic (ScanChunk):
//   ChunkScanKernel      stages each chunk's inputs from the f32 inputs when the chunk begins
//                        (loads batched, still one round trip of latency per batch per chunk);
//   ChunkScanPipeKernel  (no vector decay) copies chunk c + 1's
//                        operands with cp.async into a second set of buffers while chunk c
//                        computes: q·scale and k as bf16 and the decay factors, which chunk_prep
//                        wrote for it (p.qb, p.kb, p.gates), M, T and the v tile. Software
//                        pipelining, as Triton's num_stages gives fla's kernels: the walk over
//                        the chunks stops waiting on memory. The default (LINFER_CUDA_SCAN=plain
//                        takes ChunkScanKernel): 1.9–4.0× it on an H200.
// A third splits the work as fla's chunk_fwd_h / chunk_fwd_o do:
//   ChunkScanSplitKernel (LINFER_CUDA_SCAN=split; no vector decay) keeps only what feeds the next
//                        chunk's state on the sequential path: U = U0 − W h with U0 = T V and
//                        W = T diag(γ) K from chunk_prep, h ← e^{b_L} h + Kᵀ diag(d) U (two
//                        products, operands copied a chunk ahead); it writes U and each chunk's
//                        starting state, and ChunkOutKernel (chunk_out.cu) forms the outputs for
//                        all chunks in parallel. Opt-in: it passed on an H200 but ran slower than
//                        the pipelined scan on all but one benchmark shape.
#include "kernels/cuda/chunk_stage.cuh"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/env_option.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/recurrence_kernels.cuh"

namespace linfer::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kLdc = kChunk + 8;  // bf16 row stride of [.., 64] tiles

template <int kDk, int kBv>
struct ScanSmem {
  static constexpr int kLdk = kDk + 8, kLdv = kBv + 4;
  static constexpr size_t kQ = 0;                         // bf16 [64][kLdk]
  static constexpr size_t kK = kQ + kChunk * kLdk * 2;    // bf16 [64][kLdk]
  static constexpr size_t kH = kK + kChunk * kLdk * 2;    // bf16 hᵀ [kBv][kLdk]
  static constexpr size_t kX = kH + kBv * kLdk * 2;       // bf16 Xᵀ [kBv][kLdc]
  static constexpr size_t kU = kX + kBv * kLdc * 2;       // bf16 Uᵀ
  static constexpr size_t kUd = kU + kBv * kLdc * 2;      // bf16 (dU)ᵀ
  static constexpr size_t kM = kUd + kBv * kLdc * 2;      // bf16 [64][kLdc]
  static constexpr size_t kT = kM + kChunk * kLdc * 2;    // bf16 [64][kLdc]
  static constexpr size_t kV = kT + kChunk * kLdc * 2;    // f32 [64][kLdv]
  static constexpr size_t kGam = kV + kChunk * kLdv * 4;  // f32 [64]
  static constexpr size_t kDec = kGam + kChunk * 4;       // f32 [64]
  static constexpr size_t kHd = kDec + kChunk * 4;        // f32 [kDk] (vector decay)
  static constexpr size_t kHdScalar = kHd + kDk * 4;      // f32
  static constexpr size_t kBytes = kHdScalar + 16;
};

// Loads/stores one element of the state (f32 or bf16 in memory).
__device__ inline float LoadState(const RecParams& p, int64_t at) {
  return p.state_bf16 ? Bf16ToFloat(static_cast<const bf16*>(p.state)[at])
                      : static_cast<const float*>(p.state)[at];
}
__device__ inline void StoreState(const RecParams& p, int64_t at, float v) {
  if (p.state_bf16) {
    static_cast<bf16*>(p.state)[at] = FloatToBf16(v);
  } else {
    static_cast<float*>(p.state)[at] = v;
  }
}

// Batches of global loads for the rest of a chunk's staging too (see chunk_stage.cuh).
constexpr int kBatch = kStageBatch;

// The chunk's [64, kBv] tile of v (f32) and M, T (bf16, [64, 64] each, the delta rule's T only).
template <int kBv, int kLdv>
__device__ void StageVMT(const RecParams& p, int64_t r0, int len, int h, int col0, int64_t pkg,
                         float* vs, bf16* ms, bf16* ts) {
  constexpr int kItems = kChunk * kBv;
  static_assert(kItems % (kThreads * kBatch) == 0, "whole batches");
  for (int base = threadIdx.x; base < kItems; base += kThreads * kBatch) {
    float x[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int idx = base + b * kThreads, r = idx / kBv, col = col0 + idx % kBv;
      x[b] = r < len && col < p.dv ? p.v.Row(r0 + r, h, p.dv)[col] : 0.0f;
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int idx = base + b * kThreads;
      vs[(idx / kBv) * kLdv + idx % kBv] = x[b];
    }
  }
  // 512 uint4 (8 bf16 each) per matrix: 4 per thread, M's and T's loads all in flight at once.
  constexpr int kPer = kChunk * kChunk / 8 / kThreads;
  const uint4* m_src = reinterpret_cast<const uint4*>(p.m + pkg * kChunk * kChunk);
  const uint4* t_src =
      p.delta ? reinterpret_cast<const uint4*>(p.t + pkg * kChunk * kChunk) : nullptr;
  uint4 m[kPer], t[kPer];
#pragma unroll
  for (int b = 0; b < kPer; ++b) {
    const int idx = threadIdx.x + b * kThreads;
    m[b] = m_src[idx];
    if (t_src != nullptr) t[b] = t_src[idx];
  }
#pragma unroll
  for (int b = 0; b < kPer; ++b) {
    const int idx = threadIdx.x + b * kThreads;
    const int r = idx / (kChunk / 8), c8 = (idx % (kChunk / 8)) * 8;
    *reinterpret_cast<uint4*>(ms + r * kLdc + c8) = m[b];
    if (t_src != nullptr) *reinterpret_cast<uint4*>(ts + r * kLdc + c8) = t[b];
  }
}

// Vector decay: per key channel, B_i = Σ_{m≤i} g_m; Q̃ = scale·q·e^{B_i}, K̃ = k·e^{B_L − B_i},
// hd = e^{B_L}. One thread per channel walks the rows (reads coalesced across channels).
template <int kDk>
__device__ void StageVector(const RecParams& p, int64_t r0, int len, int h, bf16* qs, bf16* ks,
                            float* hd) {
  constexpr int ld = kDk + 8;
  for (int ch = threadIdx.x; ch < kDk; ch += kThreads) {
    const bool live = ch < p.dk;
    float bl = 0.0f;
    for (int i = 0; i < len && live; ++i) bl += p.g.Row(r0 + i, h, p.dk)[ch];
    float acc = 0.0f;
    for (int i = 0; i < kChunk; ++i) {
      float qv = 0.0f, kv = 0.0f;
      if (live && i < len) {
        acc += p.g.Row(r0 + i, h, p.dk)[ch];
        qv = p.q.Row(r0 + i, h, p.dk)[ch] * p.scale * expf(acc);
        kv = p.k.Row(r0 + i, h, p.dk)[ch] * expf(bl - acc);
      }
      qs[i * ld + ch] = FloatToBf16(qv);
      ks[i * ld + ch] = FloatToBf16(kv);
    }
    hd[ch] = live ? expf(bl) : 0.0f;
  }
}

// The state tile h (f32 fragments; warp w holds key rows ch0 = w·dk/4 onwards) as the bf16
// operand hᵀ [kBv][kLdk].
template <int kDk, int kBv>
__device__ void WriteHt(const FragC (&hf)[kDk / 64][kBv / 8], int ch0, bf16* ht) {
  constexpr int kLdk = kDk + 8;
#pragma unroll
  for (int mt = 0; mt < kDk / 64; ++mt) {
#pragma unroll
    for (int nt = 0; nt < kBv / 8; ++nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int ch = ch0 + 16 * mt + AccRow(i), cl = 8 * nt + AccCol(i);
        ht[cl * kLdk + ch] = FloatToBf16(hf[mt][nt].c[i]);
      }
    }
  }
}

// h ← f ⊙ h + Kᵀ (d ⊙ U) for warp w's key rows ch0.. of the state tile: f = hd[channel] (the
// vector decay) or hd_scalar where hd is null; k [64][kDk + 8] and (d ⊙ U)ᵀ [kBv][kLdc] are bf16
// operands in shared memory.
template <int kDk, int kBv>
__device__ void UpdateState(FragC (&hf)[kDk / 64][kBv / 8], const bf16* k, const bf16* udt,
                            const float* hd, float hd_scalar, int ch0) {
  constexpr int kLdk = kDk + 8;
#pragma unroll
  for (int mt = 0; mt < kDk / 64; ++mt) {
    float f[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      f[half] = hd != nullptr ? hd[ch0 + 16 * mt + AccRow(2 * half)] : hd_scalar;
    }
#pragma unroll
    for (int nt = 0; nt < kBv / 8; ++nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) hf[mt][nt].c[i] *= f[i / 2];
    }
#pragma unroll
    for (int kk = 0; kk < kChunk / 16; ++kk) {
      const FragA a = LoadAT(k + 16 * kk * kLdk + ch0 + 16 * mt, kLdk);
#pragma unroll
      for (int nt = 0; nt < kBv / 8; ++nt) {
        Mma(hf[mt][nt], a, LoadBT(udt + 8 * nt * kLdc + 16 * kk, kLdc));
      }
    }
  }
}

// One chunk's staged operands in shared memory, as ScanChunk reads them.
struct ChunkTiles {
  const bf16 *q, *k, *m, *t;  // [64][kLdk], [64][kLdk], [64][kLdc], [64][kLdc]
  const float* v;             // [64][ldv]
  int ldv;
  const float *gam, *dec;  // [64] each: e^{b_i} and e^{b_L − b_i} (0 on padding rows)
  const float* hd;         // vector decay: [dk] e^{B_L}; else null
  float hd_scalar;         // scalar/no decay: e^{b_L}
  float q_scale;           // what multiplies Q h besides γ: scale, or 1 where q is pre-scaled
};

// Steps (b)–(d) of one chunk for the block's value tile: U, the outputs, the state update. The
// caller has staged `c` and hᵀ and synchronised; every thread of the block calls this.
template <int kDk, int kBv>
__device__ void ScanChunk(const RecParams& p, const ChunkTiles& c, FragC (&hf)[kDk / 64][kBv / 8],
                          const bf16* ht, bf16* xt, bf16* ut, bf16* udt, int64_t r0, int len, int h,
                          int col0, int ch0, bool vector) {
  constexpr int kLdk = kDk + 8, kNt = kBv / 8;
  const int w = threadIdx.x / 32;
  // (b) U = T (V − diag(γ) K h) for the delta rule, else V; also d ⊙ U for the state update.
  if (p.delta) {
    FragC x[kNt];
    MmaStrip<kDk / 16>(x, c.k, kLdk, ht, kLdk);
#pragma unroll
    for (int nt = 0; nt < kNt; ++nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int r = 16 * w + AccRow(i), cl = 8 * nt + AccCol(i);
        xt[cl * kLdc + r] = FloatToBf16(c.v[r * c.ldv + cl] - c.gam[r] * x[nt].c[i]);
      }
    }
    __syncthreads();
    FragC u[kNt];
    MmaStrip<kChunk / 16>(u, c.t, kLdc, xt, kLdc);
#pragma unroll
    for (int nt = 0; nt < kNt; ++nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int r = 16 * w + AccRow(i), cl = 8 * nt + AccCol(i);
        ut[cl * kLdc + r] = FloatToBf16(u[nt].c[i]);
        udt[cl * kLdc + r] = FloatToBf16(u[nt].c[i] * c.dec[r]);
      }
    }
  } else {
    for (int idx = threadIdx.x; idx < kChunk * kBv; idx += kThreads) {
      const int r = idx % kChunk, cl = idx / kChunk;
      const float v = c.v[r * c.ldv + cl];
      ut[cl * kLdc + r] = FloatToBf16(v);
      udt[cl * kLdc + r] = FloatToBf16(v * c.dec[r]);
    }
  }
  __syncthreads();

  // (c) o = diag(q_scale·γ) Q h + M U (vector decay: Q̃ already carries scale·e^B).
  FragC o[kNt];
  MmaStrip<kDk / 16>(o, c.q, kLdk, ht, kLdk);
  if (!vector) {
#pragma unroll
    for (int nt = 0; nt < kNt; ++nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) o[nt].c[i] *= c.q_scale * c.gam[16 * w + AccRow(i)];
    }
  }
  MmaStrip<kChunk / 16>(o, c.m, kLdc, ut, kLdc);
#pragma unroll
  for (int nt = 0; nt < kNt; ++nt) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int r = 16 * w + AccRow(i), col = col0 + 8 * nt + AccCol(i);
      if (r < len && col < p.dv) p.o[(r0 + r) * p.o_ld + int64_t{h} * p.dv + col] = o[nt].c[i];
    }
  }

  // (d) h ← e^{b_L} h + Kᵀ (d ⊙ U)  (vector decay: per-channel e^{B_L}, K̃ already decayed).
  UpdateState<kDk, kBv>(hf, c.k, udt, vector ? c.hd : nullptr, c.hd_scalar, ch0);
}

// The state tile of (slot, head, value tile) in and out of registers.
template <int kDk, int kBv>
__device__ void LoadStateTile(const RecParams& p, int64_t state_base, int ch0, int col0,
                              FragC (&hf)[kDk / 64][kBv / 8]) {
#pragma unroll
  for (int mt = 0; mt < kDk / 64; ++mt) {
#pragma unroll
    for (int nt = 0; nt < kBv / 8; ++nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int ch = ch0 + 16 * mt + AccRow(i), col = col0 + 8 * nt + AccCol(i);
        hf[mt][nt].c[i] =
            ch < p.dk && col < p.dv ? LoadState(p, state_base + int64_t{ch} * p.dv + col) : 0.0f;
      }
    }
  }
}
template <int kDk, int kBv>
__device__ void StoreStateTile(const RecParams& p, int64_t state_base, int ch0, int col0,
                               const FragC (&hf)[kDk / 64][kBv / 8]) {
#pragma unroll
  for (int mt = 0; mt < kDk / 64; ++mt) {
#pragma unroll
    for (int nt = 0; nt < kBv / 8; ++nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int ch = ch0 + 16 * mt + AccRow(i), col = col0 + 8 * nt + AccCol(i);
        if (ch < p.dk && col < p.dv) {
          StoreState(p, state_base + int64_t{ch} * p.dv + col, hf[mt][nt].c[i]);
        }
      }
    }
  }
}

template <int kDk, int kBv>
__global__ void __launch_bounds__(kThreads) ChunkScanKernel(RecParams p) {
  PdlEnter();
  using L = ScanSmem<kDk, kBv>;
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* qs = reinterpret_cast<bf16*>(smem + L::kQ);
  bf16* ks = reinterpret_cast<bf16*>(smem + L::kK);
  bf16* ht = reinterpret_cast<bf16*>(smem + L::kH);
  bf16* xt = reinterpret_cast<bf16*>(smem + L::kX);
  bf16* ut = reinterpret_cast<bf16*>(smem + L::kU);
  bf16* udt = reinterpret_cast<bf16*>(smem + L::kUd);
  bf16* ms = reinterpret_cast<bf16*>(smem + L::kM);
  bf16* ts = reinterpret_cast<bf16*>(smem + L::kT);
  float* vs = reinterpret_cast<float*>(smem + L::kV);
  float* gam = reinterpret_cast<float*>(smem + L::kGam);
  float* dec = reinterpret_cast<float*>(smem + L::kDec);
  float* hd = reinterpret_cast<float*>(smem + L::kHd);
  float* hd_scalar = reinterpret_cast<float*>(smem + L::kHdScalar);

  const int si = p.chunked_segs[blockIdx.z];  // a chunked segment (the step kernel owns the rest)
  const Row4 seg = LoadSegment(p.segs, si);
  const int h = blockIdx.y, col0 = blockIdx.x * kBv, tid = threadIdx.x, lane = tid & 31;
  const int w = tid / 32, ch0 = w * (kDk / 4);
  const bool vector = p.decay == kDecayVector;
  const int64_t state_base = (seg.slot * p.heads + h) * int64_t{p.dk} * p.dv;

  FragC hf[kDk / 64][kBv / 8];
  LoadStateTile<kDk, kBv>(p, state_base, ch0, col0, hf);

  const int64_t chunks = (seg.num_tokens + kChunk - 1) / kChunk;
  const int64_t chunk0 = p.chunk_offsets[si];
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t r0 = seg.row_begin + c * kChunk;
    const int len = static_cast<int>(Min64(kChunk, seg.num_tokens - c * kChunk));
    const int64_t pkg = (chunk0 + c) * p.heads + h;
    // (a) Stage q, k, the decay factors, the v tile, M and T; write hᵀ as a bf16 operand.
    if (vector) {
      StageVector<kDk>(p, r0, len, h, qs, ks, hd);
      if (tid < kChunk) gam[tid] = 1.0f, dec[tid] = tid < len ? 1.0f : 0.0f;
    } else {
      StageQK<kDk, kThreads>(p, r0, len, h, 1.0f, qs, ks);  // raw q: γ·scale later
      if (w == 0) {
        const float g0 = 2 * lane < len ? ScalarLogDecay(p, r0 + 2 * lane, h) : 0.0f;
        const float g1 = 2 * lane + 1 < len ? ScalarLogDecay(p, r0 + 2 * lane + 1, h) : 0.0f;
        float x = g0 + g1;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
          const float y = __shfl_up_sync(0xffffffffu, x, o);
          if (lane >= o) x += y;
        }
        const float bl = __shfl_sync(0xffffffffu, x, 31);  // padding rows add 0
        const float b0 = x - g1, b1 = x;
        gam[2 * lane] = 2 * lane < len ? expf(b0) : 0.0f;
        gam[2 * lane + 1] = 2 * lane + 1 < len ? expf(b1) : 0.0f;
        dec[2 * lane] = 2 * lane < len ? expf(bl - b0) : 0.0f;
        dec[2 * lane + 1] = 2 * lane + 1 < len ? expf(bl - b1) : 0.0f;
        if (lane == 0) *hd_scalar = expf(bl);
      }
    }
    StageVMT<kBv, L::kLdv>(p, r0, len, h, col0, pkg, vs, ms, ts);
    WriteHt<kDk, kBv>(hf, ch0, ht);
    __syncthreads();
    const ChunkTiles tiles{qs,
                           ks,
                           ms,
                           ts,
                           vs,
                           L::kLdv,
                           gam,
                           dec,
                           vector ? hd : nullptr,
                           vector ? 0.0f : *hd_scalar,
                           p.scale};
    ScanChunk<kDk, kBv>(p, tiles, hf, ht, xt, ut, udt, r0, len, h, col0, ch0, vector);
    __syncthreads();  // the next chunk restages every buffer
  }
  StoreStateTile<kDk, kBv>(p, state_base, ch0, col0, hf);
}

// Copies chunk `pkg`'s decay factors (p.gates, kGateLd floats) to shared memory at `dst`.
__device__ inline void IssueGates(const RecParams& p, int64_t pkg, unsigned char* dst) {
  const float* g = p.gates + pkg * kGateLd;
  for (int idx = threadIdx.x; idx < kGateLd / 4; idx += kThreads) {
    CpAsync16(dst + idx * 16, g + idx * 4, 16);
  }
}

// The pipelined kernel's shared memory: two stages of one chunk's operands, then hᵀ and the
// single-buffered products.
template <int kDk, int kBv>
struct PipeSmem {
  static constexpr int kLdk = kDk + 8, kLdv = kBv + 4;
  static constexpr size_t kQ = 0;                       // bf16 [64][kLdk], q·scale
  static constexpr size_t kK = kQ + kChunk * kLdk * 2;  // bf16 [64][kLdk]
  static constexpr size_t kM = kK + kChunk * kLdk * 2;  // bf16 [64][kLdc]
  static constexpr size_t kT = kM + kChunk * kLdc * 2;  // bf16 [64][kLdc]
  static constexpr size_t kV = kT + kChunk * kLdc * 2;  // f32 [64][kLdv]
  static constexpr size_t kG = kV + kChunk * kLdv * 4;  // f32 [kGateLd]
  static constexpr size_t kStage = kG + kGateLd * 4;    // one stage
  static constexpr size_t kH = 2 * kStage;              // bf16 hᵀ [kBv][kLdk]
  static constexpr size_t kX = kH + kBv * kLdk * 2;     // bf16 Xᵀ [kBv][kLdc]
  static constexpr size_t kU = kX + kBv * kLdc * 2;     // bf16 Uᵀ
  static constexpr size_t kUd = kU + kBv * kLdc * 2;    // bf16 (dU)ᵀ
  static constexpr size_t kBytes = kUd + kBv * kLdc * 2;
  static_assert(kStage % 16 == 0 && kV % 16 == 0 && kG % 16 == 0, "16-byte cp.async targets");
  static_assert(kBytes <= 232448, "over Hopper's 227 KB of shared memory per block");
};

// Issues chunk c's copies into `stage` (this thread's share; committed by the caller).
template <int kDk, int kBv>
__device__ void IssueChunk(const RecParams& p, const Row4& seg, int64_t chunk0, int64_t c, int h,
                           int col0, unsigned char* stage) {
  using L = PipeSmem<kDk, kBv>;
  const int64_t r0 = seg.row_begin + c * kChunk;
  const int len = static_cast<int>(Min64(kChunk, seg.num_tokens - c * kChunk));
  const int64_t pkg = (chunk0 + c) * p.heads + h;
  constexpr int kPieces = kDk / 8;  // 16-byte pieces of a q or k row
  const bf16* q = p.qb + pkg * kChunk * kDk;
  const bf16* k = p.kb + pkg * kChunk * kDk;
  for (int idx = threadIdx.x; idx < 2 * kChunk * kPieces; idx += kThreads) {
    const bool is_k = idx >= kChunk * kPieces;
    const int j = is_k ? idx - kChunk * kPieces : idx;
    const int r = j / kPieces, c8 = (j % kPieces) * 8;
    CpAsync16(stage + (is_k ? L::kK : L::kQ) + (r * L::kLdk + c8) * 2,
              (is_k ? k : q) + r * kDk + c8, 16);
  }
  const bf16* m = p.m + pkg * kChunk * kChunk;
  const bf16* t = p.delta ? p.t + pkg * kChunk * kChunk : nullptr;
  for (int idx = threadIdx.x; idx < kChunk * kChunk / 8; idx += kThreads) {
    const int r = idx / (kChunk / 8), c8 = (idx % (kChunk / 8)) * 8;
    CpAsync16(stage + L::kM + (r * kLdc + c8) * 2, m + r * kChunk + c8, 16);
    if (t != nullptr) CpAsync16(stage + L::kT + (r * kLdc + c8) * 2, t + r * kChunk + c8, 16);
  }
  // The v tile: 16-byte pieces where the rows allow (p.v.vec4: dv % 4 == 0, so a piece that
  // starts inside dv ends inside it), zero-filled past the chunk and dv; else plain loads.
  constexpr int kVPieces = kBv / 4;
  float* vs = reinterpret_cast<float*>(stage + L::kV);
  for (int idx = threadIdx.x; idx < kChunk * kVPieces; idx += kThreads) {
    const int r = idx / kVPieces, c4 = (idx % kVPieces) * 4, col = col0 + c4;
    float* dst = vs + r * L::kLdv + c4;
    if (p.v.vec4) {
      const bool live = r < len && col < p.dv;
      CpAsync16(dst, live ? p.v.Row(r0 + r, h, p.dv) + col : p.v.p, live ? 16 : 0);
    } else {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        dst[e] = r < len && col + e < p.dv ? p.v.Row(r0 + r, h, p.dv)[col + e] : 0.0f;
      }
    }
  }
  IssueGates(p, pkg, stage + L::kG);
}

// Scalar or no decay, with q·scale, k and the decay factors prepared by chunk_prep (p.qb, p.kb,
// p.gates): chunk c + 1's operands are in flight while chunk c computes.
template <int kDk, int kBv>
__global__ void __launch_bounds__(kThreads) ChunkScanPipeKernel(RecParams p) {
  PdlEnter();
  using L = PipeSmem<kDk, kBv>;
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* ht = reinterpret_cast<bf16*>(smem + L::kH);
  bf16* xt = reinterpret_cast<bf16*>(smem + L::kX);
  bf16* ut = reinterpret_cast<bf16*>(smem + L::kU);
  bf16* udt = reinterpret_cast<bf16*>(smem + L::kUd);

  const int si = p.chunked_segs[blockIdx.z];
  const Row4 seg = LoadSegment(p.segs, si);
  const int h = blockIdx.y, col0 = blockIdx.x * kBv, ch0 = (threadIdx.x / 32) * (kDk / 4);
  const int64_t state_base = (seg.slot * p.heads + h) * int64_t{p.dk} * p.dv;
  const int64_t chunks = (seg.num_tokens + kChunk - 1) / kChunk;
  const int64_t chunk0 = p.chunk_offsets[si];

  IssueChunk<kDk, kBv>(p, seg, chunk0, 0, h, col0, smem);
  CpAsyncCommit();
  FragC hf[kDk / 64][kBv / 8];
  LoadStateTile<kDk, kBv>(p, state_base, ch0, col0, hf);
  for (int64_t c = 0; c < chunks; ++c) {
    unsigned char* cur = smem + (c & 1) * L::kStage;
    // Chunk c + 1 into the other stage: the previous iteration's closing barrier guarantees no
    // thread still reads it (it held chunk c − 1).
    if (c + 1 < chunks)
      IssueChunk<kDk, kBv>(p, seg, chunk0, c + 1, h, col0, smem + ((c + 1) & 1) * L::kStage);
    CpAsyncCommit();  // possibly empty: the wait below then still means "chunk c landed"
    CpAsyncWaitAllButOne();
    WriteHt<kDk, kBv>(hf, ch0, ht);
    __syncthreads();  // every thread's copies of chunk c, and hᵀ, visible to all
    const float* gates = reinterpret_cast<const float*>(cur + L::kG);
    const ChunkTiles tiles{reinterpret_cast<const bf16*>(cur + L::kQ),
                           reinterpret_cast<const bf16*>(cur + L::kK),
                           reinterpret_cast<const bf16*>(cur + L::kM),
                           reinterpret_cast<const bf16*>(cur + L::kT),
                           reinterpret_cast<const float*>(cur + L::kV),
                           L::kLdv,
                           gates,
                           gates + kChunk,
                           nullptr,
                           gates[2 * kChunk],
                           1.0f};
    const int64_t r0 = seg.row_begin + c * kChunk;
    const int len = static_cast<int>(Min64(kChunk, seg.num_tokens - c * kChunk));
    ScanChunk<kDk, kBv>(p, tiles, hf, ht, xt, ut, udt, r0, len, h, col0, ch0, false);
    __syncthreads();  // done with `cur` and the products before they are refilled
  }
  StoreStateTile<kDk, kBv>(p, state_base, ch0, col0, hf);
}

// The split scan's shared memory (p.split): two stages of one chunk's W, K (bf16 [64][kLdk]),
// U0 tile (f32 [64][kLdv]) and decay factors, then hᵀ and the U tiles.
template <int kDk, int kBv>
struct SplitSmem {
  static constexpr int kLdk = kDk + 8, kLdv = kBv + 4;
  static constexpr size_t kW = 0;                        // bf16 [64][kLdk]
  static constexpr size_t kK = kW + kChunk * kLdk * 2;   // bf16 [64][kLdk]
  static constexpr size_t kU0 = kK + kChunk * kLdk * 2;  // f32 [64][kLdv]
  static constexpr size_t kG = kU0 + kChunk * kLdv * 4;  // f32 [kGateLd]
  static constexpr size_t kStage = kG + kGateLd * 4;     // one stage
  static constexpr size_t kH = 2 * kStage;               // bf16 hᵀ [kBv][kLdk]
  static constexpr size_t kU = kH + kBv * kLdk * 2;      // bf16 Uᵀ [kBv][kLdc]
  static constexpr size_t kUd = kU + kBv * kLdc * 2;     // bf16 (dU)ᵀ
  static constexpr size_t kBytes = kUd + kBv * kLdc * 2;
  static_assert(kStage % 16 == 0 && kU0 % 16 == 0 && kG % 16 == 0 && kU % 16 == 0,
                "16-byte cp.async targets and row copies");
  static_assert(kBytes <= 232448, "over Hopper's 227 KB of shared memory per block");
};

// Issues chunk c's copies for the split scan into `stage` (committed by the caller).
template <int kDk, int kBv>
__device__ void IssueSplitChunk(const RecParams& p, int64_t pkg, int col0, unsigned char* stage) {
  using L = SplitSmem<kDk, kBv>;
  constexpr int kPieces = kDk / 8;  // 16-byte pieces of a W or K row
  const bf16* k = p.kb + pkg * kChunk * kDk;
  const bf16* w = p.delta ? p.w + pkg * kChunk * kDk : nullptr;
  for (int idx = threadIdx.x; idx < kChunk * kPieces; idx += kThreads) {
    const int r = idx / kPieces, c8 = (idx % kPieces) * 8;
    CpAsync16(stage + L::kK + (r * L::kLdk + c8) * 2, k + r * kDk + c8, 16);
    if (w != nullptr) CpAsync16(stage + L::kW + (r * L::kLdk + c8) * 2, w + r * kDk + c8, 16);
  }
  constexpr int kVPieces = kBv / 4;  // u_ld is a multiple of 64: every piece lies inside a row
  const float* u0 = p.u0 + pkg * kChunk * p.u_ld + col0;
  for (int idx = threadIdx.x; idx < kChunk * kVPieces; idx += kThreads) {
    const int r = idx / kVPieces, c4 = (idx % kVPieces) * 4;
    CpAsync16(stage + L::kU0 + (r * L::kLdv + c4) * 4, u0 + int64_t{r} * p.u_ld + c4, 16);
  }
  IssueGates(p, pkg, stage + L::kG);
}

// The split scan (p.split; no vector decay): per chunk U = U0 − W h (U = U0 without the delta
// rule), h ← e^{b_L} h + Kᵀ (d ⊙ U); writes U and the chunk's starting state (transposed, bf16)
// for ChunkOutKernel. Two products per chunk on the path from one chunk's state to the next, their
// operands copied a chunk ahead.
template <int kDk, int kBv>
__global__ void __launch_bounds__(kThreads) ChunkScanSplitKernel(RecParams p) {
  PdlEnter();
  using L = SplitSmem<kDk, kBv>;
  constexpr int kLdk = L::kLdk, kNt = kBv / 8;
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* ht = reinterpret_cast<bf16*>(smem + L::kH);
  bf16* ut = reinterpret_cast<bf16*>(smem + L::kU);
  bf16* udt = reinterpret_cast<bf16*>(smem + L::kUd);

  const int si = p.chunked_segs[blockIdx.z];
  const Row4 seg = LoadSegment(p.segs, si);
  const int h = blockIdx.y, col0 = blockIdx.x * kBv, tid = threadIdx.x, w = tid / 32;
  const int ch0 = w * (kDk / 4);
  const int64_t state_base = (seg.slot * p.heads + h) * int64_t{p.dk} * p.dv;
  const int64_t chunks = (seg.num_tokens + kChunk - 1) / kChunk;
  const int64_t chunk0 = p.chunk_offsets[si];

  IssueSplitChunk<kDk, kBv>(p, chunk0 * p.heads + h, col0, smem);
  CpAsyncCommit();
  FragC hf[kDk / 64][kNt];
  LoadStateTile<kDk, kBv>(p, state_base, ch0, col0, hf);
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t pkg = (chunk0 + c) * p.heads + h;
    const unsigned char* cur = smem + (c & 1) * L::kStage;
    if (c + 1 < chunks) {
      IssueSplitChunk<kDk, kBv>(p, pkg + p.heads, col0, smem + ((c + 1) & 1) * L::kStage);
    }
    CpAsyncCommit();  // possibly empty: the wait below then still means "chunk c landed"
    CpAsyncWaitAllButOne();
    WriteHt<kDk, kBv>(hf, ch0, ht);
    __syncthreads();  // chunk c's copies and hᵀ visible to every thread

    // The state at the chunk's start → hc[pkg] rows col0.. ([u_ld][kDk], 16-byte pieces).
    constexpr int kPieces = kDk / 8;
    uint4* hc = reinterpret_cast<uint4*>(p.hc + (pkg * p.u_ld + col0) * kDk);
    for (int idx = tid; idx < kBv * kPieces; idx += kThreads) {
      hc[idx] = *reinterpret_cast<const uint4*>(ht + (idx / kPieces) * kLdk + 8 * (idx % kPieces));
    }

    // U = U0 − W h, and d ⊙ U.
    const float* u0 = reinterpret_cast<const float*>(cur + L::kU0);
    const float* gates = reinterpret_cast<const float*>(cur + L::kG);
    FragC wh[kNt];
    if (p.delta) {
      MmaStrip<kDk / 16>(wh, reinterpret_cast<const bf16*>(cur + L::kW), kLdk, ht, kLdk);
    }
#pragma unroll
    for (int nt = 0; nt < kNt; ++nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int r = 16 * w + AccRow(i), cl = 8 * nt + AccCol(i);
        const float u = u0[r * L::kLdv + cl] - wh[nt].c[i];
        ut[cl * kLdc + r] = FloatToBf16(u);
        udt[cl * kLdc + r] = FloatToBf16(u * gates[kChunk + r]);
      }
    }
    __syncthreads();

    // U → ut[pkg] rows col0.. ([u_ld][64]).
    uint4* u_out = reinterpret_cast<uint4*>(p.ut + (pkg * p.u_ld + col0) * kChunk);
    for (int idx = tid; idx < kBv * (kChunk / 8); idx += kThreads) {
      u_out[idx] = *reinterpret_cast<const uint4*>(ut + (idx / 8) * kLdc + 8 * (idx % 8));
    }
    UpdateState<kDk, kBv>(hf, reinterpret_cast<const bf16*>(cur + L::kK), udt, nullptr,
                          gates[2 * kChunk], ch0);
    __syncthreads();  // done with `cur`, hᵀ and the U tiles before they are refilled
  }
  StoreStateTile<kDk, kBv>(p, state_base, ch0, col0, hf);
}

template <int kDk, int kBv>
absl::Status Launch(const RecParams& p, int64_t chunked_segments, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(CeilDiv(p.dv, kBv)), static_cast<unsigned>(p.heads),
                  static_cast<unsigned>(chunked_segments));
  if (p.split) {
    if (p.decay == kDecayVector) {
      return absl::InternalError("the split chunked scan has no per-channel decay");
    }
    constexpr size_t kSmem = SplitSmem<kDk, kBv>::kBytes;
    CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(ChunkScanSplitKernel<kDk, kBv>,
                                              cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
    LaunchKernel(ChunkScanSplitKernel<kDk, kBv>, grid, kThreads, kSmem, stream, p);
    return CheckLaunch("ChunkScanSplitKernel");
  }
  if (p.qb != nullptr) {  // chunk_prep wrote the pipelined kernel's operands
    if (p.decay == kDecayVector) {
      return absl::InternalError("the pipelined chunked scan has no per-channel decay");
    }
    constexpr size_t kSmem = PipeSmem<kDk, kBv>::kBytes;
    CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(ChunkScanPipeKernel<kDk, kBv>,
                                              cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
    LaunchKernel(ChunkScanPipeKernel<kDk, kBv>, grid, kThreads, kSmem, stream, p);
    return CheckLaunch("ChunkScanPipeKernel");
  }
  constexpr size_t kSmem = ScanSmem<kDk, kBv>::kBytes;
  CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(ChunkScanKernel<kDk, kBv>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  LaunchKernel(ChunkScanKernel<kDk, kBv>, grid, kThreads, kSmem, stream, p);
  return CheckLaunch("ChunkScanKernel");
}

// LINFER_CUDA_SCAN_TILE: unset or "auto" (the value-tile width from the blocks wanted, below), or
// "16", "32", "64" (a fixed width; 64 only for dk ≤ 128): for measuring the widths against each
// other on a GPU (run_on_gpu.sh's bench stage), not for serving.
int ForcedTile() {
  static const int tile = [] {
    const absl::string_view v = EnvOption("LINFER_CUDA_SCAN_TILE", {"auto", "16", "32", "64"});
    return v == "auto" ? 0 : v == "16" ? 16 : v == "32" ? 32 : 64;
  }();
  return tile;
}

template <int kDk>
absl::Status LaunchDk(const RecParams& p, int64_t chunked_segments, int64_t ctas_wanted,
                      cudaStream_t stream) {
  switch (ForcedTile()) {
    case 16:
      return Launch<kDk, 16>(p, chunked_segments, stream);
    case 32:
      return Launch<kDk, 32>(p, chunked_segments, stream);
    case 64:
      if (kDk <= 128) return Launch<kDk, (kDk <= 128 ? 64 : 32)>(p, chunked_segments, stream);
      break;
  }
  auto ctas = [&](int bv) { return chunked_segments * p.heads * CeilDiv(p.dv, bv); };
  if (kDk <= 128 && ctas(64) >= ctas_wanted)
    return Launch<kDk, (kDk <= 128 ? 64 : 32)>(p, chunked_segments, stream);
  if (ctas(32) >= ctas_wanted) return Launch<kDk, 32>(p, chunked_segments, stream);
  return Launch<kDk, 16>(p, chunked_segments, stream);
}

}  // namespace

absl::Status LaunchChunkScan(const RecParams& p, int64_t chunked_segments, int64_t ctas_wanted,
                             cudaStream_t stream) {
  // The pipelined kernel's two stages fit one block per SM at most shapes, and a wider value tile
  // shares each chunk's q/k/M/T copies among more columns: it asks for half as many blocks.
  if (p.qb != nullptr && !p.split) ctas_wanted = (ctas_wanted + 1) / 2;
  return ForDkTile(p.dk, [&](auto tile) {
    return LaunchDk<decltype(tile)::value>(p, chunked_segments, ctas_wanted, stream);
  });
}

}  // namespace linfer::cuda
