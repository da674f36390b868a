// Chunked recurrence with the split scan (LINFER_CUDA_SCAN=split), step 3 of 3: every chunk's
// outputs, in parallel over chunks, heads and 64-column value tiles. With h_c the state at the
// chunk's start and U the chunk's (delta-rule) values, both written by ChunkScanSplitKernel:
//   o = diag(γ) Q_s h_c + M U        (γ_i = e^{b_i}, Q_s = scale·q, M from chunk_prep)
// Operands (bf16 unless said): Q_s [64, dk_tile] (p.qb), γ (f32, p.gates), M [64, 64] (p.m),
// h_cᵀ rows n0..n0+63 of [u_ld, dk_tile] (p.hc), Uᵀ rows n0.. of [u_ld, 64] (p.ut).
// Mapping: one block (4 warps) per (chunk, head, value tile); every operand arrives by cp.async;
// warp w computes rows 16w..16w+15 of the [64, 64] output tile on tensor cores (m16n8k16, f32
// accumulators): dk/16 + 4 k-steps × 8 n-tiles. Rows of h_cᵀ and Uᵀ past the scan's last value
// tile (dv not a multiple of its width) are never written: they only reach output columns ≥ dv,
// which are not stored.
#include "kernels/cuda/chunk_stage.cuh"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/recurrence_kernels.cuh"

namespace linfer::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kTile = 64;         // value columns per block
constexpr int kLdc = kChunk + 8;  // bf16 row stride of [.., 64] tiles
static_assert(kTile == kChunk, "the copies below walk M's and Uᵀ's rows together");

template <int kDk>
struct OutSmem {
  static constexpr int kLdk = kDk + 8;
  static constexpr size_t kQ = 0;                        // bf16 [64][kLdk]
  static constexpr size_t kH = kQ + kChunk * kLdk * 2;   // bf16 h_cᵀ [kTile][kLdk]
  static constexpr size_t kM = kH + kTile * kLdk * 2;    // bf16 [64][kLdc]
  static constexpr size_t kU = kM + kChunk * kLdc * 2;   // bf16 Uᵀ [kTile][kLdc]
  static constexpr size_t kGam = kU + kTile * kLdc * 2;  // f32 [64]
  static constexpr size_t kBytes = kGam + kChunk * 4;
  static_assert(kH % 16 == 0 && kM % 16 == 0 && kU % 16 == 0 && kGam % 16 == 0, "16-byte copies");
};

template <int kDk>
__global__ void __launch_bounds__(kThreads) ChunkOutKernel(RecParams p, int num_segments) {
  PdlEnter();
  using L = OutSmem<kDk>;
  constexpr int kLdk = L::kLdk, kPieces = kDk / 8;
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* qs = reinterpret_cast<bf16*>(smem + L::kQ);
  bf16* hts = reinterpret_cast<bf16*>(smem + L::kH);
  bf16* ms = reinterpret_cast<bf16*>(smem + L::kM);
  bf16* uts = reinterpret_cast<bf16*>(smem + L::kU);
  float* gam = reinterpret_cast<float*>(smem + L::kGam);

  const int64_t chunk = blockIdx.x;
  const int h = blockIdx.y, n0 = blockIdx.z * kTile, tid = threadIdx.x, w = tid / 32;
  const int s = FindSegment(p.chunk_offsets, num_segments, chunk);
  const Row4 seg = LoadSegment(p.segs, s);
  const int64_t c = chunk - p.chunk_offsets[s], r0 = seg.row_begin + c * kChunk;
  const int len = static_cast<int>(Min64(kChunk, seg.num_tokens - c * kChunk));
  const int64_t pkg = chunk * p.heads + h;

  const bf16* q = p.qb + pkg * kChunk * kDk;
  const bf16* hc = p.hc + (pkg * p.u_ld + n0) * kDk;
  for (int idx = tid; idx < kChunk * kPieces; idx += kThreads) {
    const int r = idx / kPieces, c8 = (idx % kPieces) * 8;
    CpAsync16(qs + r * kLdk + c8, q + r * kDk + c8, 16);
    CpAsync16(hts + r * kLdk + c8, hc + r * kDk + c8, 16);
  }
  const bf16* m = p.m + pkg * kChunk * kChunk;
  const bf16* u = p.ut + (pkg * p.u_ld + n0) * kChunk;
  for (int idx = tid; idx < kChunk * (kChunk / 8); idx += kThreads) {
    const int r = idx / (kChunk / 8), c8 = (idx % (kChunk / 8)) * 8;
    CpAsync16(ms + r * kLdc + c8, m + r * kChunk + c8, 16);
    CpAsync16(uts + r * kLdc + c8, u + r * kChunk + c8, 16);
  }
  if (tid < kChunk / 4) CpAsync16(gam + 4 * tid, p.gates + pkg * kGateLd + 4 * tid, 16);
  CpAsyncCommit();
  CpAsyncWaitAll();
  __syncthreads();

  FragC o[kTile / 8];
  MmaStrip<kDk / 16>(o, qs, kLdk, hts, kLdk);
#pragma unroll
  for (int nt = 0; nt < kTile / 8; ++nt) {
#pragma unroll
    for (int i = 0; i < 4; ++i) o[nt].c[i] *= gam[16 * w + AccRow(i)];
  }
  MmaStrip<kChunk / 16>(o, ms, kLdc, uts, kLdc);
#pragma unroll
  for (int nt = 0; nt < kTile / 8; ++nt) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int r = 16 * w + AccRow(i), col = n0 + 8 * nt + AccCol(i);
      if (r < len && col < p.dv) p.o[(r0 + r) * p.o_ld + int64_t{h} * p.dv + col] = o[nt].c[i];
    }
  }
}

template <int kDk>
absl::Status Allow() {
  CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(
      ChunkOutKernel<kDk>, cudaFuncAttributeMaxDynamicSharedMemorySize, OutSmem<kDk>::kBytes));
  return absl::OkStatus();
}

template <int kDk>
absl::Status Launch(const RecParams& p, int num_segments, int64_t total_chunks,
                    cudaStream_t stream) {
  constexpr size_t kSmem = OutSmem<kDk>::kBytes;
  const dim3 grid(static_cast<unsigned>(total_chunks), static_cast<unsigned>(p.heads),
                  static_cast<unsigned>(p.u_ld / kTile));
  LaunchKernel(ChunkOutKernel<kDk>, grid, kThreads, kSmem, stream, p, num_segments);
  return CheckLaunch("ChunkOutKernel");
}

}  // namespace

absl::Status PrepareChunkOut(const RecParams& p) {
  return ForDkTile(p.dk, [&](auto tile) { return Allow<decltype(tile)::value>(); });
}

absl::Status LaunchChunkOut(const RecParams& p, int num_segments, int64_t total_chunks,
                            cudaStream_t stream) {
  return ForDkTile(p.dk, [&](auto tile) {
    return Launch<decltype(tile)::value>(p, num_segments, total_chunks, stream);
  });
}

}  // namespace linfer::cuda
