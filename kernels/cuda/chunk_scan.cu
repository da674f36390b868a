// Chunked recurrence, step 2 of 2: the scan over a segment's 64-token chunks, carrying the state h
// [dk, BV] (a tile of value columns) in registers. Per chunk, with γ_i = e^{b_i} (scalar decay;
// the vector decay folds e^{B} into Q̃ and e^{B_L − B} into K̃), d_j = e^{b_L − b_j}:
//   delta rule: X = V − diag(γ) K h,  U = T X            (T = (I + A)⁻¹diag(β) from chunk_prep)
//   otherwise:  U = V
//   o = diag(scale·γ) Q h + M U;   h ← e^{b_L} h + Kᵀ diag(d) U
// Mapping: one block (4 warps) per (BV-column tile, head, chunked segment), walking its chunks
// in order. Warp w owns token rows 16w..16w+15 of every [64, BV] product and key rows
// [w·dk/4, (w+1)·dk/4) of h. All products run on tensor cores (mma m16n8k16: bf16 operands staged
// in shared memory, f32 accumulators; h itself stays f32 in registers and is rounded to bf16 only
// as an operand). Per chunk: 4·64·dk·BV + 4·64²·BV FLOPs for ≈ 64·(2·dk + 2·BV) f32 loads/stores.
#include "kernels/cuda/cuda_check.cuh"
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

// Batches of global loads: the staging loops below are latency-bound (one block per SM walks its
// chunks in order, nothing else hides a load's latency), so each thread issues kBatch loads
// before it uses any of them. One load at a time, the q/k staging of one chunk took 32 dependent
// round trips per thread: 27 µs per chunk on an H200 (Nsight Compute: ChunkScanKernel 13.7 ms of
// a 1 × 32768 Qwen3.5-0.8B layer).
constexpr int kBatch = 8;

// q, k of the chunk as raw bf16 (scalar/no decay): the decay factors are applied to products.
template <int kDk>
__device__ void StagePlain(const RecParams& p, int64_t r0, int len, int h, bf16* qs, bf16* ks) {
  constexpr int ld = kDk + 8, kGroups = kDk / 4, kItems = 2 * kChunk * kGroups;
  static_assert(kItems % (kThreads * kBatch) == 0, "whole batches");
  for (int base = threadIdx.x; base < kItems; base += kThreads * kBatch) {
    float4 x[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int idx = base + b * kThreads;
      const bool is_k = idx >= kChunk * kGroups;
      const int j = is_k ? idx - kChunk * kGroups : idx;
      const int r = j / kGroups, c = (j % kGroups) * 4;
      const PackedInput& in = is_k ? p.k : p.q;
      x[b] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (r < len) {
        const float* src = in.Row(r0 + r, h, p.dk) + c;
        if (in.vec4 && c + 4 <= p.dk) {
          x[b] = *reinterpret_cast<const float4*>(src);
        } else {
          x[b].x = c < p.dk ? src[0] : 0.0f;
          x[b].y = c + 1 < p.dk ? src[1] : 0.0f;
          x[b].z = c + 2 < p.dk ? src[2] : 0.0f;
          x[b].w = c + 3 < p.dk ? src[3] : 0.0f;
        }
      }
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int idx = base + b * kThreads;
      const bool is_k = idx >= kChunk * kGroups;
      const int j = is_k ? idx - kChunk * kGroups : idx;
      bf16* dst = (is_k ? ks : qs) + (j / kGroups) * ld + (j % kGroups) * 4;
      *reinterpret_cast<uint32_t*>(dst) = Pack(FloatToBf16(x[b].x), FloatToBf16(x[b].y));
      *reinterpret_cast<uint32_t*>(dst + 2) = Pack(FloatToBf16(x[b].z), FloatToBf16(x[b].w));
    }
  }
}

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

template <int kDk, int kBv>
__global__ void __launch_bounds__(kThreads) ChunkScanKernel(RecParams p) {
  using L = ScanSmem<kDk, kBv>;
  constexpr int kLdk = L::kLdk, kMt = kDk / 64, kNt = kBv / 8;
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

  FragC hf[kMt][kNt];
#pragma unroll
  for (int mt = 0; mt < kMt; ++mt) {
#pragma unroll
    for (int nt = 0; nt < kNt; ++nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int ch = ch0 + 16 * mt + AccRow(i), col = col0 + 8 * nt + AccCol(i);
        hf[mt][nt].c[i] =
            ch < p.dk && col < p.dv ? LoadState(p, state_base + int64_t{ch} * p.dv + col) : 0.0f;
      }
    }
  }

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
      StagePlain<kDk>(p, r0, len, h, qs, ks);
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
#pragma unroll
    for (int mt = 0; mt < kMt; ++mt) {
#pragma unroll
      for (int nt = 0; nt < kNt; ++nt) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int ch = ch0 + 16 * mt + AccRow(i), cl = 8 * nt + AccCol(i);
          ht[cl * kLdk + ch] = FloatToBf16(hf[mt][nt].c[i]);
        }
      }
    }
    __syncthreads();

    // (b) U = T (V − diag(γ) K h) for the delta rule, else V; also d ⊙ U for the state update.
    if (p.delta) {
      FragC x[kNt];
#pragma unroll
      for (int kk = 0; kk < kDk / 16; ++kk) {
        const FragA a = LoadA(ks + 16 * w * kLdk + 16 * kk, kLdk);
#pragma unroll
        for (int nt = 0; nt < kNt; ++nt) Mma(x[nt], a, LoadBT(ht + 8 * nt * kLdk + 16 * kk, kLdk));
      }
#pragma unroll
      for (int nt = 0; nt < kNt; ++nt) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int r = 16 * w + AccRow(i), cl = 8 * nt + AccCol(i);
          xt[cl * kLdc + r] = FloatToBf16(vs[r * L::kLdv + cl] - gam[r] * x[nt].c[i]);
        }
      }
      __syncthreads();
      FragC u[kNt];
#pragma unroll
      for (int kk = 0; kk < kChunk / 16; ++kk) {
        const FragA a = LoadA(ts + 16 * w * kLdc + 16 * kk, kLdc);
#pragma unroll
        for (int nt = 0; nt < kNt; ++nt) Mma(u[nt], a, LoadBT(xt + 8 * nt * kLdc + 16 * kk, kLdc));
      }
#pragma unroll
      for (int nt = 0; nt < kNt; ++nt) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int r = 16 * w + AccRow(i), cl = 8 * nt + AccCol(i);
          ut[cl * kLdc + r] = FloatToBf16(u[nt].c[i]);
          udt[cl * kLdc + r] = FloatToBf16(u[nt].c[i] * dec[r]);
        }
      }
    } else {
      for (int idx = tid; idx < kChunk * kBv; idx += kThreads) {
        const int r = idx % kChunk, cl = idx / kChunk;
        const float v = vs[r * L::kLdv + cl];
        ut[cl * kLdc + r] = FloatToBf16(v);
        udt[cl * kLdc + r] = FloatToBf16(v * dec[r]);
      }
    }
    __syncthreads();

    // (c) o = diag(scale·γ) Q h + M U (vector decay: Q̃ already carries scale·e^B).
    FragC o[kNt];
#pragma unroll
    for (int kk = 0; kk < kDk / 16; ++kk) {
      const FragA a = LoadA(qs + 16 * w * kLdk + 16 * kk, kLdk);
#pragma unroll
      for (int nt = 0; nt < kNt; ++nt) Mma(o[nt], a, LoadBT(ht + 8 * nt * kLdk + 16 * kk, kLdk));
    }
    if (!vector) {
#pragma unroll
      for (int nt = 0; nt < kNt; ++nt) {
#pragma unroll
        for (int i = 0; i < 4; ++i) o[nt].c[i] *= p.scale * gam[16 * w + AccRow(i)];
      }
    }
#pragma unroll
    for (int kk = 0; kk < kChunk / 16; ++kk) {
      const FragA a = LoadA(ms + 16 * w * kLdc + 16 * kk, kLdc);
#pragma unroll
      for (int nt = 0; nt < kNt; ++nt) Mma(o[nt], a, LoadBT(ut + 8 * nt * kLdc + 16 * kk, kLdc));
    }
#pragma unroll
    for (int nt = 0; nt < kNt; ++nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int r = 16 * w + AccRow(i), col = col0 + 8 * nt + AccCol(i);
        if (r < len && col < p.dv) p.o[(r0 + r) * p.o_ld + int64_t{h} * p.dv + col] = o[nt].c[i];
      }
    }

    // (d) h ← e^{b_L} h + Kᵀ (d ⊙ U)  (vector decay: per-channel e^{B_L}, K̃ already decayed).
#pragma unroll
    for (int mt = 0; mt < kMt; ++mt) {
      float f[2];
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        f[half] = vector ? hd[ch0 + 16 * mt + AccRow(2 * half)] : *hd_scalar;
      }
#pragma unroll
      for (int nt = 0; nt < kNt; ++nt) {
#pragma unroll
        for (int i = 0; i < 4; ++i) hf[mt][nt].c[i] *= f[i / 2];
      }
#pragma unroll
      for (int kk = 0; kk < kChunk / 16; ++kk) {
        const FragA a = LoadAT(ks + 16 * kk * kLdk + ch0 + 16 * mt, kLdk);
#pragma unroll
        for (int nt = 0; nt < kNt; ++nt) {
          Mma(hf[mt][nt], a, LoadBT(udt + 8 * nt * kLdc + 16 * kk, kLdc));
        }
      }
    }
    __syncthreads();  // the next chunk restages every buffer
  }

#pragma unroll
  for (int mt = 0; mt < kMt; ++mt) {
#pragma unroll
    for (int nt = 0; nt < kNt; ++nt) {
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
absl::Status Launch(const RecParams& p, int64_t chunked_segments, cudaStream_t stream) {
  constexpr size_t kSmem = ScanSmem<kDk, kBv>::kBytes;
  CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(ChunkScanKernel<kDk, kBv>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  const dim3 grid(static_cast<unsigned>(CeilDiv(p.dv, kBv)), static_cast<unsigned>(p.heads),
                  static_cast<unsigned>(chunked_segments));
  ChunkScanKernel<kDk, kBv><<<grid, kThreads, kSmem, stream>>>(p);
  return CheckLaunch("ChunkScanKernel");
}

template <int kDk>
absl::Status LaunchDk(const RecParams& p, int64_t chunked_segments, int64_t ctas_wanted,
                      cudaStream_t stream) {
  auto ctas = [&](int bv) { return chunked_segments * p.heads * CeilDiv(p.dv, bv); };
  if (kDk <= 128 && ctas(64) >= ctas_wanted)
    return Launch<kDk, (kDk <= 128 ? 64 : 32)>(p, chunked_segments, stream);
  if (ctas(32) >= ctas_wanted) return Launch<kDk, 32>(p, chunked_segments, stream);
  return Launch<kDk, 16>(p, chunked_segments, stream);
}

}  // namespace

absl::Status LaunchChunkScan(const RecParams& p, int64_t chunked_segments, int64_t ctas_wanted,
                             cudaStream_t stream) {
  if (p.dk <= 64) return LaunchDk<64>(p, chunked_segments, ctas_wanted, stream);
  if (p.dk <= 128) return LaunchDk<128>(p, chunked_segments, ctas_wanted, stream);
  if (p.dk <= 256) return LaunchDk<256>(p, chunked_segments, ctas_wanted, stream);
  return absl::UnimplementedError(absl::StrCat("chunked recurrence: dk ", p.dk, " > 256"));
}

}  // namespace linfer::cuda
