// Chunked recurrence, step 1 of 2 (no decay or a scalar decay per token): for every 64-token
// chunk and head, the intra-chunk matrices that the scan (chunk_scan.cu) applies. With b the
// in-chunk cumulative log-decay and q_s = scale·q:
//   M_ij = (q_s,i · k_j) e^{b_i − b_j}                         j ≤ i  (0 above the diagonal)
//   delta rule: A_ij = β_i e^{b_i − b_j} (k_i · k_j)  (j < i),  T = (I + A)⁻¹ diag(β)
// so that in the scan u = T (V − diag(e^b) K h) is the UT/WY form of the token-by-token update.
// Mapping: one block (4 warps) per (chunk, head); q and k go to shared memory as bf16; warp w
// computes rows 16w..16w+15 of QKᵀ and KKᵀ on tensor cores (mma m16n8k16, f32 accumulators, only
// the n-tiles at or below the diagonal); T comes from a forward substitution in f32, one thread
// per column (64 threads, the chunk's A read as shared-memory broadcasts), or with
// LINFER_CUDA_PREP=blocked by 16×16 blocks over all 128 threads (InvertUnitLowerBlocked). M and T
// are stored as bf16 [chunk, head, 64, 64]. Fully parallel over chunks; O(64² · dk) tensor work per
// chunk. For the pipelined and split scans it also writes q_s and k as bf16 tiles and the decay
// factors; for the split scan U0 = T V (else V) and W = T diag(e^b) K (WriteSplitOperands).
#include "kernels/cuda/chunk_stage.cuh"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/recurrence_kernels.cuh"

namespace linfer::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kAld = kChunk + 4;  // f32 row stride of A in shared memory
constexpr int kTld = kChunk + 8;  // bf16 row stride of the split scan's [64, 64] tiles

// Lower-triangular 16-row strip of X·Yᵀ for warp w: acc[nt] = rows 16w.., columns 8nt.. (only
// nt < 2(w+1) are computed; the others stay 0).
template <int kDk>
__device__ void StripXYt(const bf16* x, const bf16* y, FragC (&acc)[8]) {
  constexpr int ld = kDk + 8;
  const int w = threadIdx.x / 32;
#pragma unroll
  for (int kk = 0; kk < kDk / 16; ++kk) {
    const FragA a = LoadA(x + 16 * w * ld + 16 * kk, ld);
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      if (nt < 2 * (w + 1)) Mma(acc[nt], a, LoadBT(y + 8 * nt * ld + 16 * kk, ld));
    }
  }
}

// The split scan's operands (p.split) for one (chunk, head): U0 = V without the delta rule;
// with it W = T diag(γ) K and U0 = T V, from T and Tγ = T diag(γ) staged as bf16 in `ts`, `tgs`
// (and made visible) by the caller. Warp w computes rows 16w..16w+15, 64 columns at a time; V
// goes through `vt` as a bf16 [64, 64] operand tile.
template <int kDk>
__device__ void WriteSplitOperands(const RecParams& p, int64_t pkg, int64_t r0, int len, int h,
                                   const bf16* ks, const bf16* ts, const bf16* tgs, bf16* vt) {
  constexpr int ld = kDk + 8;
  const int w = threadIdx.x / 32;
  float* u0 = p.u0 + pkg * kChunk * p.u_ld;
  if (!p.delta) {
    for (int idx = threadIdx.x; idx < kChunk * p.u_ld; idx += kThreads) {
      const int r = idx / p.u_ld, col = idx % p.u_ld;
      u0[idx] = r < len && col < p.dv ? p.v.Row(r0 + r, h, p.dv)[col] : 0.0f;
    }
    return;
  }
  bf16* w_out = p.w + pkg * kChunk * kDk;
  for (int n0 = 0; n0 < kDk; n0 += 64) {
    FragC acc[8];
#pragma unroll
    for (int kk = 0; kk < kChunk / 16; ++kk) {
      const FragA a = LoadA(tgs + 16 * w * kTld + 16 * kk, kTld);
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) Mma(acc[nt], a, LoadB(ks + 16 * kk * ld + n0 + 8 * nt, ld));
    }
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int r = 16 * w + AccRow(2 * half), col = n0 + 8 * nt + AccCol(2 * half);
        *reinterpret_cast<uint32_t*>(w_out + r * kDk + col) =
            Pack(FloatToBf16(acc[nt].c[2 * half]), FloatToBf16(acc[nt].c[2 * half + 1]));
      }
    }
  }
  constexpr int kBatch = 8;
  for (int n0 = 0; n0 < p.u_ld; n0 += 64) {
    __syncthreads();  // the previous tile's readers are done with vt
    for (int base = threadIdx.x; base < kChunk * 64; base += kThreads * kBatch) {
      float x[kBatch];
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int idx = base + b * kThreads, r = idx / 64, col = n0 + idx % 64;
        x[b] = r < len && col < p.dv ? __ldg(p.v.Row(r0 + r, h, p.dv) + col) : 0.0f;
      }
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int idx = base + b * kThreads;
        vt[(idx / 64) * kTld + idx % 64] = FloatToBf16(x[b]);
      }
    }
    __syncthreads();
    FragC acc[8];
#pragma unroll
    for (int kk = 0; kk < kChunk / 16; ++kk) {
      const FragA a = LoadA(ts + 16 * w * kTld + 16 * kk, kTld);
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) Mma(acc[nt], a, LoadB(vt + 16 * kk * kTld + 8 * nt, kTld));
    }
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int r = 16 * w + AccRow(2 * half), col = n0 + 8 * nt + AccCol(2 * half);
        *reinterpret_cast<float2*>(u0 + r * p.u_ld + col) =
            make_float2(acc[nt].c[2 * half], acc[nt].c[2 * half + 1]);
      }
    }
  }
}

// X = (I + A)⁻¹ in place of A (a_mat: f32 [64][kAld], A strictly lower triangular), by 16×16
// blocks (LINFER_CUDA_PREP=blocked): first the diagonal blocks X_ii = (I + A_ii)⁻¹ by forward
// substitution, 16 threads per block (a column each); then the block rows i = 1, 2, 3 in turn,
//   Y_j = Σ_{k=j}^{i−1} A_ik X_kj,  X_ij = −X_ii Y_j   (j < i),
// every (j, row, column) of a block row in parallel over the 128 threads. A_ik (k < i) is still A
// when block row i starts; Y goes through `y` (f32 [16][kAld]). The critical path is ≈ 600
// multiply-adds where one thread per column of (I + A)⁻¹ walks ≈ 2,000, the other 64 threads
// idle. Ends with a barrier.
__device__ void InvertUnitLowerBlocked(float* a_mat, float* y) {
  const int tid = threadIdx.x;
  float x[16];
  const int bi = tid / 16, bc = tid % 16, base = 16 * bi;
  if (tid < 64) {  // column bc of X_{bi,bi}
#pragma unroll
    for (int r = 0; r < 16; ++r) {
      float v = r == bc ? 1.0f : 0.0f;
#pragma unroll
      for (int m = 0; m < r; ++m) v -= a_mat[(base + r) * kAld + base + m] * x[m];
      x[r] = v;
    }
  }
  __syncthreads();  // every column read A_ii before any is overwritten
  if (tid < 64) {
#pragma unroll
    for (int r = 0; r < 16; ++r) a_mat[(base + r) * kAld + base + bc] = x[r];
  }
  __syncthreads();
  for (int i = 1; i < 4; ++i) {
    for (int e = tid; e < 256 * i; e += kThreads) {  // Y_j[s][c], j = e / 256
      const int j = e / 256, s = e / 16 % 16, c = e % 16;
      const float* arow = a_mat + (16 * i + s) * kAld;
      float acc = 0.0f;
      for (int k = j; k < i; ++k) {
#pragma unroll
        for (int t = 0; t < 16; ++t)
          acc += arow[16 * k + t] * a_mat[(16 * k + t) * kAld + 16 * j + c];
      }
      y[s * kAld + 16 * j + c] = acc;
    }
    __syncthreads();
    for (int e = tid; e < 256 * i; e += kThreads) {  // X_ij[r][c] = −Σ_{s ≤ r} X_ii[r][s] Y_j[s][c]
      const int j = e / 256, r = e / 16 % 16, c = e % 16;
      const float* xrow = a_mat + (16 * i + r) * kAld + 16 * i;
      float acc = 0.0f;
      for (int t = 0; t <= r; ++t) acc += xrow[t] * y[t * kAld + 16 * j + c];
      a_mat[(16 * i + r) * kAld + 16 * j + c] = -acc;
    }
    __syncthreads();
  }
}

// kBlocked: (I + A)⁻¹ by InvertUnitLowerBlocked (p.blocked_inverse), else by substitution; a
// template argument so that each kernel holds only its own method's registers.
template <int kDk, bool kBlocked>
__global__ void __launch_bounds__(kThreads) ChunkPrepKernel(RecParams p, int num_segments) {
  PdlEnter();
  constexpr int ld = kDk + 8;
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* qs = reinterpret_cast<bf16*>(smem);
  bf16* ks = qs + kChunk * ld;
  float* a_mat = reinterpret_cast<float*>(ks + kChunk * ld);  // [64][kAld]
  float* b = a_mat + kChunk * kAld;                           // [64] cumulative log-decay
  float* beta = b + kChunk;                                   // [64]
  // The split scan's T, T diag(γ) and V tile (bf16 [64][kTld] each; p.split only).
  bf16* ts = reinterpret_cast<bf16*>(beta + kChunk);
  bf16* tgs = ts + kChunk * kTld;
  bf16* vt = tgs + kChunk * kTld;

  const int64_t chunk = blockIdx.x;
  const int h = blockIdx.y, tid = threadIdx.x, lane = tid & 31, w = tid / 32;
  const int s = FindSegment(p.chunk_offsets, num_segments, chunk);
  const Row4 seg = LoadSegment(p.segs, s);
  const int64_t c = chunk - p.chunk_offsets[s], r0 = seg.row_begin + c * kChunk;
  const int len = static_cast<int>(Min64(kChunk, seg.num_tokens - c * kChunk));
  const int64_t pkg = chunk * p.heads + h;

  StageQK<kDk, kThreads>(p, r0, len, h, p.scale, qs, ks);
  if (w == 0) {  // inclusive scan of the log-decay over the chunk, two rows per lane
    const float g0 = lane * 2 < len ? ScalarLogDecay(p, r0 + lane * 2, h) : 0.0f;
    const float g1 = lane * 2 + 1 < len ? ScalarLogDecay(p, r0 + lane * 2 + 1, h) : 0.0f;
    float x = g0 + g1;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const float y = __shfl_up_sync(0xffffffffu, x, o);
      if (lane >= o) x += y;
    }
    b[2 * lane] = x - g1;
    b[2 * lane + 1] = x;
  }
  if (tid < kChunk) beta[tid] = p.delta && tid < len ? *p.beta.Row(r0 + tid, h, 1) : 0.0f;
  __syncthreads();

  if (p.qb != nullptr) {  // the pipelined scan's operands: the staged tiles and decay factors
    constexpr int kPieces = kDk / 8;  // 16-byte pieces per row
    uint4* q_out = reinterpret_cast<uint4*>(p.qb + pkg * kChunk * kDk);
    uint4* k_out = reinterpret_cast<uint4*>(p.kb + pkg * kChunk * kDk);
    for (int idx = tid; idx < 2 * kChunk * kPieces; idx += kThreads) {
      const bool is_k = idx >= kChunk * kPieces;
      const int j = is_k ? idx - kChunk * kPieces : idx;
      const int r = j / kPieces, piece = j % kPieces;
      (is_k ? k_out : q_out)[j] =
          *reinterpret_cast<const uint4*>((is_k ? ks : qs) + r * ld + 8 * piece);
    }
    if (tid < kChunk) {
      float* g = p.gates + pkg * kGateLd;
      const float bl = b[kChunk - 1];  // padding rows add 0
      g[tid] = tid < len ? expf(b[tid]) : 0.0f;
      g[kChunk + tid] = tid < len ? expf(bl - b[tid]) : 0.0f;
      if (tid < kGateLd - 2 * kChunk) g[2 * kChunk + tid] = tid == 0 ? expf(bl) : 0.0f;
    }
  }

  FragC acc[8];
  StripXYt<kDk>(qs, ks, acc);
  bf16* m_out = p.m + pkg * kChunk * kChunk;
#pragma unroll
  for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {  // elements (0,1) and (2,3): one row, two columns
      const int r = 16 * w + AccRow(2 * half), col = 8 * nt + AccCol(2 * half);
      float v[2];
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int cc = col + e;
        v[e] = cc <= r && r < len ? acc[nt].c[2 * half + e] * expf(b[r] - b[cc]) : 0.0f;
      }
      *reinterpret_cast<uint32_t*>(m_out + r * kChunk + col) =
          Pack(FloatToBf16(v[0]), FloatToBf16(v[1]));
    }
  }
  if (!p.delta) {
    if (p.split) WriteSplitOperands<kDk>(p, pkg, r0, len, h, ks, ts, tgs, vt);
    return;
  }

  FragC akk[8];
  StripXYt<kDk>(ks, ks, akk);
#pragma unroll
  for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int r = 16 * w + AccRow(i), cc = 8 * nt + AccCol(i);
      a_mat[r * kAld + cc] = cc < r && r < len ? beta[r] * expf(b[r] - b[cc]) * akk[nt].c[i] : 0.0f;
    }
  }
  __syncthreads();
  if constexpr (kBlocked) {
    // q's tile is dead (M and A are formed): it holds the inversion's Y.
    InvertUnitLowerBlocked(a_mat, reinterpret_cast<float*>(qs));
    // Thread tid writes column tid % 64 of every other row.
    static_assert(kThreads == 2 * kChunk, "two threads per column");
    bf16* t_out = p.split ? nullptr : p.t + pkg * kChunk * kChunk;
    const int col = tid % kChunk;
    const float beta_c = beta[col], gamma_c = col < len ? expf(b[col]) : 0.0f;
    for (int r = tid / kChunk; r < kChunk; r += kThreads / kChunk) {
      const float t = a_mat[r * kAld + col] * beta_c;
      if (p.split) {
        ts[r * kTld + col] = FloatToBf16(t);
        tgs[r * kTld + col] = FloatToBf16(t * gamma_c);
      } else {
        t_out[r * kChunk + col] = FloatToBf16(t);
      }
    }
  } else if (tid < kChunk) {
    // Column `tid` of (I + A)⁻¹ by forward substitution: x_r = δ_rc − Σ_{m<r} A_rm x_m.
    float x[kChunk];
    bf16* t_out = p.split ? nullptr : p.t + pkg * kChunk * kChunk;
    const float beta_c = beta[tid];
    const float gamma_c = tid < len ? expf(b[tid]) : 0.0f;
#pragma unroll
    for (int r = 0; r < kChunk; ++r) {
      float part[4] = {r == tid ? 1.0f : 0.0f, 0.0f, 0.0f, 0.0f};  // 4 chains: less FMA latency
#pragma unroll
      for (int m = 0; m < r; ++m) part[m & 3] -= a_mat[r * kAld + m] * x[m];
      x[r] = (part[0] + part[1]) + (part[2] + part[3]);
      const float t = x[r] * beta_c;
      if (p.split) {  // only W and U0 leave the kernel
        ts[r * kTld + tid] = FloatToBf16(t);
        tgs[r * kTld + tid] = FloatToBf16(t * gamma_c);
      } else {
        t_out[r * kChunk + tid] = FloatToBf16(t);
      }
    }
  }
  if (!p.split) return;
  __syncthreads();
  WriteSplitOperands<kDk>(p, pkg, r0, len, h, ks, ts, tgs, vt);
}

// One warp, 32 segments at a time: lane i loads segment s0 + i's length, inclusive scans over
// the warp (shuffles) of the chunk counts and of the chunked flags give the offsets and the
// positions in the chunked list; lane 31's totals carry on. (A single thread walking the segments
// waited out one global load per segment: tens of µs per layer for a mixed step of hundreds of
// decode rows.)
__global__ void ChunkOffsetsKernel(RecParams p, int n, int32_t* offsets, int32_t* chunked_segs) {
  PdlEnter();
  const int lane = static_cast<int>(threadIdx.x);
  int32_t base = 0, listed = 0;
  for (int s0 = 0; s0 < n; s0 += 32) {  // uniform over the warp: full-mask shuffles
    const int s = s0 + lane;
    int32_t count = 0;
    if (s < n) {
      const int64_t tokens = p.segs[4 * s + 1];
      if (tokens >= p.min_chunk_tokens) {
        count = static_cast<int32_t>((tokens + kChunk - 1) / kChunk);
      }
    }
    const int32_t flag = count > 0 ? 1 : 0;
    int32_t inclusive = count, position = flag;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
      const int32_t below = __shfl_up_sync(0xffffffffu, inclusive, d);
      const int32_t flags_below = __shfl_up_sync(0xffffffffu, position, d);
      if (lane >= d) {
        inclusive += below;
        position += flags_below;
      }
    }
    if (s < n) offsets[s] = base + inclusive - count;
    if (flag) chunked_segs[listed + position - 1] = s;
    base += __shfl_sync(0xffffffffu, inclusive, 31);
    listed += __shfl_sync(0xffffffffu, position, 31);
  }
  if (lane == 0) offsets[n] = base;
}

template <int kDk>
absl::Status Launch(const RecParams& p, int num_segments, int64_t total_chunks,
                    cudaStream_t stream) {
  constexpr size_t kBase =
      2 * kChunk * (kDk + 8) * sizeof(bf16) + (kChunk * kAld + 2 * kChunk) * sizeof(float);
  constexpr size_t kSplit = kBase + 3 * kChunk * kTld * sizeof(bf16);  // + T, Tγ, V tile
  const size_t smem = p.split ? kSplit : kBase;
  const auto launch = [&](auto kernel) -> absl::Status {
    CUDA_RETURN_IF_ERROR(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSplit));
    const dim3 grid(static_cast<unsigned>(total_chunks), static_cast<unsigned>(p.heads));
    LaunchKernel(kernel, grid, kThreads, smem, stream, p, num_segments);
    return CheckLaunch("ChunkPrepKernel");
  };
  return p.blocked_inverse ? launch(ChunkPrepKernel<kDk, true>)
                           : launch(ChunkPrepKernel<kDk, false>);
}

}  // namespace

absl::Status LaunchChunkOffsets(const RecParams& p, int num_segments, int32_t* offsets,
                                int32_t* chunked_segs, cudaStream_t stream) {
  LaunchKernel(ChunkOffsetsKernel, 1, 32, 0, stream, p, num_segments, offsets, chunked_segs);
  return CheckLaunch("ChunkOffsetsKernel");
}

absl::Status LaunchChunkPrep(const RecParams& p, int num_segments, int64_t total_chunks,
                             cudaStream_t stream) {
  return ForDkTile(p.dk, [&](auto tile) {
    return Launch<decltype(tile)::value>(p, num_segments, total_chunks, stream);
  });
}

}  // namespace linfer::cuda
