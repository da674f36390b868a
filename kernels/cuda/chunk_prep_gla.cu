// Chunked recurrence, step 1 of 2 for a per-key-channel decay (GLA): per 64-token chunk and head,
//   M_ij = scale · Σ_c q_ic k_jc e^{B_ic − B_jc}   (j ≤ i, B = in-chunk cumulative log-decay)
// No exponent may be positive (B only decreases, and e^{B_j − B_i} can overflow), so the chunk is
// cut into four 16-row blocks. Below the diagonal blocks, block I uses its first row r = 16I as
// the reference: q̃_i = q_i e^{B_i − B_r} and k̃_j = k_j e^{B_r − B_j} (both exponents ≤ 0) and
// M[I, <I] = q̃ k̃ᵀ runs on tensor cores (mma m16n8k16, bf16 operands); inside the diagonal
// blocks every (i, j, c) term takes its own exponential on CUDA cores, in f32.
// Mapping: one block (4 warps) per (chunk, head), walking 64-channel slabs of dk: per slab the
// q, k, B tiles (f32) and the q̃/k̃ operands (bf16) are staged in shared memory; the 12
// off-diagonal 16×8 tiles go 3 per warp and the 544 diagonal-block pairs ≤ 5 per thread, all
// accumulating across slabs; M is assembled in shared memory and stored as bf16.
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/recurrence_kernels.cuh"

namespace linfer::cuda {
namespace {

constexpr int kThreads = 128, kSlab = 64, kLdf = kSlab + 1, kLdb = kSlab + 8;
constexpr int kDiagPairs = 4 * 136;  // 16·17/2 pairs (i ≥ j) per diagonal block
constexpr int kPairsPerThread = (kDiagPairs + kThreads - 1) / kThreads;

struct GlaSmem {
  float q[kChunk][kLdf], k[kChunk][kLdf], b[kChunk][kLdf], m[kChunk][kLdf];
  bf16 qt[3][16][kLdb];  // q̃ of blocks 1..3
  bf16 kt[96][kLdb];     // k̃ for block 1 (rows 0..15), 2 (16..47), 3 (48..95)
};

__device__ inline int KtBase(int block) { return block == 1 ? 0 : (block == 2 ? 16 : 48); }

// (i, j), i ≥ j, of diagonal pair `n` (block-major, then row-major within the block).
__device__ inline void DiagPair(int n, int& i, int& j) {
  const int block = n / 136, q = n % 136;
  int r = static_cast<int>((sqrtf(8.0f * q + 1.0f) - 1.0f) * 0.5f);
  while (r * (r + 1) / 2 > q) --r;
  while ((r + 1) * (r + 2) / 2 <= q) ++r;
  i = 16 * block + r;
  j = 16 * block + (q - r * (r + 1) / 2);
}

__global__ void __launch_bounds__(kThreads) ChunkPrepVectorKernel(RecParams p, int num_segments) {
  PdlEnter();
  extern __shared__ __align__(16) unsigned char raw[];
  GlaSmem& sm = *reinterpret_cast<GlaSmem*>(raw);
  const int64_t chunk = blockIdx.x;
  const int h = blockIdx.y, tid = threadIdx.x, w = tid / 32;
  const int s = FindSegment(p.chunk_offsets, num_segments, chunk);
  const Row4 seg = LoadSegment(p.segs, s);
  const int64_t c = chunk - p.chunk_offsets[s], r0 = seg.row_begin + c * kChunk;
  const int len = static_cast<int>(Min64(kChunk, seg.num_tokens - c * kChunk));

  // The 12 off-diagonal 16×8 tiles, numbered n = 0..11 block by block (block I has 2I n-tiles:
  // n < 2 → block 1, n < 6 → block 2, else block 3); warp w takes tiles w, w + 4 and w + 8.
  FragC off[3];
  int tile_block[3], tile_nt[3];
#pragma unroll
  for (int e = 0; e < 3; ++e) {
    const int n = w + 4 * e;
    tile_block[e] = n < 2 ? 1 : (n < 6 ? 2 : 3);
    tile_nt[e] = n < 2 ? n : (n < 6 ? n - 2 : n - 6);
  }
  float diag[kPairsPerThread] = {};

  for (int ch0 = 0; ch0 < p.dk; ch0 += kSlab) {
    for (int idx = tid; idx < kChunk * kSlab; idx += kThreads) {
      const int r = idx / kSlab, cc = idx % kSlab, ch = ch0 + cc;
      const bool live = r < len && ch < p.dk;
      sm.q[r][cc] = live ? p.q.Row(r0 + r, h, p.dk)[ch] * p.scale : 0.0f;
      sm.k[r][cc] = live ? p.k.Row(r0 + r, h, p.dk)[ch] : 0.0f;
    }
    if (tid < kSlab) {
      float acc = 0.0f;
      const int ch = ch0 + tid;
      for (int r = 0; r < kChunk; ++r) {
        if (r < len && ch < p.dk) acc += p.g.Row(r0 + r, h, p.dk)[ch];
        sm.b[r][tid] = acc;
      }
    }
    __syncthreads();
    for (int idx = tid; idx < 3 * 16 * kSlab; idx += kThreads) {  // q̃ for blocks 1..3
      const int blk = idx / (16 * kSlab) + 1, r = (idx / kSlab) % 16, cc = idx % kSlab;
      const int i = 16 * blk + r;
      sm.qt[blk - 1][r][cc] = FloatToBf16(sm.q[i][cc] * expf(sm.b[i][cc] - sm.b[16 * blk][cc]));
    }
    for (int idx = tid; idx < 96 * kSlab; idx += kThreads) {  // k̃ for blocks 1..3
      const int row = idx / kSlab, cc = idx % kSlab;
      const int blk = row < 16 ? 1 : (row < 48 ? 2 : 3), j = row - KtBase(blk);
      sm.kt[row][cc] = FloatToBf16(sm.k[j][cc] * expf(sm.b[16 * blk][cc] - sm.b[j][cc]));
    }
    __syncthreads();
#pragma unroll
    for (int e = 0; e < 3; ++e) {
      const int blk = tile_block[e], nt = tile_nt[e];
#pragma unroll
      for (int kk = 0; kk < kSlab / 16; ++kk) {
        const FragA a = LoadA(&sm.qt[blk - 1][0][16 * kk], kLdb);
        Mma(off[e], a, LoadBT(&sm.kt[KtBase(blk) + 8 * nt][16 * kk], kLdb));
      }
    }
#pragma unroll
    for (int e = 0; e < kPairsPerThread; ++e) {
      const int n = tid + e * kThreads;
      if (n >= kDiagPairs) break;
      int i, j;
      DiagPair(n, i, j);
      float acc = 0.0f;
      for (int cc = 0; cc < kSlab; ++cc) {
        acc += sm.q[i][cc] * sm.k[j][cc] * expf(sm.b[i][cc] - sm.b[j][cc]);
      }
      diag[e] += acc;
    }
    __syncthreads();  // the next slab restages q, k, b, q̃, k̃
  }

  for (int idx = tid; idx < kChunk * kChunk; idx += kThreads) sm.m[idx / kChunk][idx % kChunk] = 0;
  __syncthreads();
#pragma unroll
  for (int e = 0; e < 3; ++e) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      sm.m[16 * tile_block[e] + AccRow(i)][8 * tile_nt[e] + AccCol(i)] = off[e].c[i];
    }
  }
#pragma unroll
  for (int e = 0; e < kPairsPerThread; ++e) {
    const int n = tid + e * kThreads;
    if (n >= kDiagPairs) break;
    int i, j;
    DiagPair(n, i, j);
    sm.m[i][j] = diag[e];
  }
  __syncthreads();
  bf16* out = p.m + (chunk * p.heads + h) * kChunk * kChunk;
  for (int idx = tid; idx < kChunk * kChunk; idx += kThreads) {
    const int i = idx / kChunk, j = idx % kChunk;
    out[idx] = FloatToBf16(i < len && j <= i ? sm.m[i][j] : 0.0f);
  }
}

}  // namespace

absl::Status LaunchChunkPrepVector(const RecParams& p, int num_segments, int64_t total_chunks,
                                   cudaStream_t stream) {
  constexpr size_t kSmem = sizeof(GlaSmem);
  CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(ChunkPrepVectorKernel,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  const dim3 grid(static_cast<unsigned>(total_chunks), static_cast<unsigned>(p.heads));
  LaunchKernel(ChunkPrepVectorKernel, grid, kThreads, kSmem, stream, p, num_segments);
  return CheckLaunch("ChunkPrepVectorKernel");
}

}  // namespace linfer::cuda
