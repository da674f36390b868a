// Linear with fp8 weights kept as stored (kernels/tensor.h kF8E4M3 + row-expanded f32 scales):
//   y[M,N] (+)= x[M,K] · Wᵀ (+ bias),  W[n, c] = f32(Q[n, c] · S[n, c / bc])  (Q e4m3, S f32)
// W's values are those the CPU reads (kernels/cpu: the e4m3 value times its scale, rounded once
// in f32), so a product differs from the CPU's only in the f32 summation order. Two paths:
//   Fp8GemvKernel (1–32 rows of x: decode; in passes of 8 rows): the weights streamed once a
//     pass, 16 bytes (16 values) a lane and load, converted in registers (cvt e4m3x2 → f16x2,
//     exact, then f32) and scaled.
//     A block of kFp8Warps warps: groups of `split` warps share kFp8Cols outputs, their lanes
//     striding over K by pieces of 16; x staged in shared memory as f32 slabs of a few thousand
//     columns (padded 16 → 20 floats so a quarter warp's float4 reads hit distinct banks), the
//     partial sums reduced by shuffles then across the group's warps in a fixed order.
//     Needs K % 16 == 0, 16-byte aligned rows and scale blocks of a multiple of 16 columns (or
//     one block a row).
//   Otherwise (more rows, prefill): x is rounded to bf16 once (as cuBLASLt's bf16 path rounds it)
//     and the weights are widened to bf16 a chunk of rows at a time (DequantFp8Kernel:
//     round-to-nearest-even of the f32 value, exactly what dequantizing on load uploads) into step
//     scratch, each chunk multiplied by cuBLASLt's bf16 path — the same product as bf16 weights
//     dequantized on load, for a pass over the fp8 bytes and the chunk's bf16 write and read.
//   Fp8MmaKernel (33–256 rows: larger decode batches): x rounded to bf16 once, the e4m3 bytes
//     widened in shared memory, mma.sync tiles — the widening path's operands without its bf16
//     copy of the weights in memory.
// LINFER_CUDA_FP8=dequantize takes the widening at every row count, =mma the tensor-core kernel
// wherever the shapes allow it (auto, the default: GEMV ≤ 32 rows, tensor cores ≤ 256, widening).
#include <cuda_bf16.h>

#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/env_option.h"
#include "kernels/cuda/fp8.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/ops.h"

namespace linfer::cuda {
namespace {

constexpr int kFp8Warps = 8, kFp8Cols = 2, kFp8PassRows = 8;
// Rows of x the GEMV takes, in passes of kFp8PassRows: each pass reads the fp8 bytes (1 byte a
// weight) again, where widening reads them, writes and reads bf16 (5 bytes a weight) — so up to
// 32 rows (4 passes) the passes move fewer bytes. A guess until a GPU run has timed both.
constexpr int64_t kFp8MaxRows = 32;
constexpr int kPiece = 16;                  // weight values (bytes) per lane and load
constexpr int kPadded = 20;                 // floats a piece of x takes in shared memory
constexpr int kSlabFloats = 8192;           // x floats staged at a time (before padding)
constexpr int64_t kDequantChunk = 8 << 20;  // weight values widened to bf16 at a time

struct Fp8GemvArgs {
  const float* x;
  int64_t ldx;
  const unsigned char* w;  // [n, k] e4m3
  const float* scales;     // [n, scale_cols]
  int64_t scale_cols, block_cols;
  const float* bias;  // [n] or null
  float* y;
  int64_t ldy, n, k;
  bool accumulate;
  int split;  // warps per output group: 1, 2, 4 or 8
};

// Columns of x per slab for kRows rows: a multiple of kPiece.
template <int kRows>
__host__ __device__ constexpr int SlabCols() {
  return (kSlabFloats / kRows) / kPiece * kPiece;
}

template <int kRows>
__global__ void __launch_bounds__(32 * kFp8Warps) Fp8GemvKernel(Fp8GemvArgs a) {
  PdlEnter();
  constexpr int kSlab = SlabCols<kRows>(), kSlabPieces = kSlab / kPiece;
  __shared__ __align__(16) float xs[kRows][kSlabPieces * kPadded];
  __shared__ float partial[kFp8Warps][kRows][kFp8Cols];
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int groups = kFp8Warps / a.split, group = warp / a.split;
  const int lanes = 32 * a.split, me = (warp % a.split) * 32 + lane;
  const int64_t n0 = (int64_t{blockIdx.x} * groups + group) * kFp8Cols;
  float acc[kRows][kFp8Cols] = {};
  for (int64_t c0 = 0; c0 < a.k; c0 += kSlab) {
    const int width = static_cast<int>(Min64(kSlab, a.k - c0));  // a multiple of kPiece
    for (int i = tid; i < kRows * width; i += 32 * kFp8Warps) {
      const int r = i / width, c = i % width;
      xs[r][c / kPiece * kPadded + c % kPiece] = a.x[r * a.ldx + c0 + c];
    }
    __syncthreads();
    for (int p = me; p < width / kPiece; p += lanes) {
      const int64_t col = c0 + int64_t{p} * kPiece;
      float wv[kFp8Cols][kPiece];
#pragma unroll
      for (int j = 0; j < kFp8Cols; ++j) {
        const int64_t n = n0 + j;
        if (n >= a.n) {
#pragma unroll
          for (int e = 0; e < kPiece; ++e) wv[j][e] = 0.0f;
          continue;
        }
        const uint4 raw = __ldg(reinterpret_cast<const uint4*>(a.w + n * a.k + col));
        const float s = __ldg(a.scales + n * a.scale_cols + col / a.block_cols);
        const unsigned words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const float2 lo = E4m3x2(static_cast<unsigned short>(words[q] & 0xffffu));
          const float2 hi = E4m3x2(static_cast<unsigned short>(words[q] >> 16));
          wv[j][4 * q] = lo.x * s, wv[j][4 * q + 1] = lo.y * s;
          wv[j][4 * q + 2] = hi.x * s, wv[j][4 * q + 3] = hi.y * s;
        }
      }
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const float4* xr = reinterpret_cast<const float4*>(&xs[r][p * kPadded]);
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const float4 v = xr[q];
#pragma unroll
          for (int j = 0; j < kFp8Cols; ++j) {
            acc[r][j] += wv[j][4 * q] * v.x;
            acc[r][j] += wv[j][4 * q + 1] * v.y;
            acc[r][j] += wv[j][4 * q + 2] * v.z;
            acc[r][j] += wv[j][4 * q + 3] * v.w;
          }
        }
      }
    }
    __syncthreads();  // the slab is read before the next one lands
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
#pragma unroll
    for (int j = 0; j < kFp8Cols; ++j) {
      const float v = WarpSum(acc[r][j]);
      if (lane == 0) partial[warp][r][j] = v;
    }
  }
  __syncthreads();
  if (tid >= groups * kRows * kFp8Cols) return;
  const int g = tid / (kRows * kFp8Cols), r = tid / kFp8Cols % kRows, j = tid % kFp8Cols;
  const int64_t n = (int64_t{blockIdx.x} * groups + g) * kFp8Cols + j;
  if (n >= a.n) return;
  float sum = 0.0f;
  for (int w = 0; w < a.split; ++w) sum += partial[g * a.split + w][r][j];
  if (a.bias != nullptr) sum += a.bias[n];
  float* out = a.y + r * a.ldy + n;
  *out = a.accumulate ? *out + sum : sum;
}

// out[r, c] = bf16(E4m3(Q[r, c]) · S[r, c / bc]) for `rows` rows of k values: a block per row at
// a time (32-bit column arithmetic: k < 2³¹).
__global__ void DequantFp8Kernel(const unsigned char* q, const float* scales, int scale_cols,
                                 int block_cols, int64_t rows, int k, __nv_bfloat16* out) {
  PdlEnter();
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const unsigned char* qr = q + r * k;
    const float* sr = scales + r * scale_cols;
    __nv_bfloat16* o = out + r * k;
    for (int c = threadIdx.x; c < k; c += blockDim.x) {
      o[c] = FloatToBf16(E4m3(qr[c]) * sr[c / block_cols]);
    }
  }
}

// Fp8MmaKernel: y[m0 + r, n0 + c] (+)= Σ_k bf16(x)[r, k] · bf16(W)[c, k] (+ bias) for a tile of
// kMmaM rows × kMmaN outputs, over K in steps of kMmaK: both operands staged in shared memory as
// bf16 (x already rounded by RoundToBf16; W's e4m3 bytes widened and scaled as
// DequantFp8Kernel does), then mma.sync m16n8k16 (kernels/cuda/mma.cuh) with f32 accumulators.
// 8 warps: warp w takes rows 16·(w % 4)… of the tile and outputs 64·(w / 4)…, 8 n-tiles of 8.
// The same operands as the widening path (its oracle holds), the weights read as fp8 once a
// row tile (1 byte a weight) instead of widened to bf16 in memory and read back (5 bytes).
constexpr int kMmaM = 64, kMmaN = 128, kMmaK = 64, kMmaLd = kMmaK + 8, kMmaWarps = 8;

__global__ void __launch_bounds__(32 * kMmaWarps)
    Fp8MmaKernel(const __nv_bfloat16* xb, int64_t m, const unsigned char* w, const float* scales,
                 int scale_cols, int block_cols, const float* bias, float* y, int64_t ldy,
                 int64_t n, int k, bool accumulate) {
  PdlEnter();
  __shared__ __align__(16) bf16 as[kMmaM][kMmaLd];
  __shared__ __align__(16) bf16 bs[kMmaN][kMmaLd];
  const int tid = threadIdx.x, warp = tid >> 5;
  const int64_t m0 = int64_t{blockIdx.y} * kMmaM, n0 = int64_t{blockIdx.x} * kMmaN;
  const int strip = warp % 4, half = warp / 4;
  FragC acc[8];
  for (int k0 = 0; k0 < k; k0 += kMmaK) {
    {  // x: 64 rows × 64 columns, 16 a thread (two 16-byte loads); zeros past m and k
      const int r = tid / 4, c = (tid % 4) * 16;
      uint4 v[2] = {make_uint4(0, 0, 0, 0), make_uint4(0, 0, 0, 0)};
      if (m0 + r < m) {
        const __nv_bfloat16* src = xb + (m0 + r) * k + k0 + c;
        if (k0 + c < k) v[0] = *reinterpret_cast<const uint4*>(src);
        if (k0 + c + 8 < k) v[1] = *reinterpret_cast<const uint4*>(src + 8);
      }
      *reinterpret_cast<uint4*>(&as[r][c]) = v[0];
      *reinterpret_cast<uint4*>(&as[r][c + 8]) = v[1];
    }
    {  // W: 128 rows × 64 columns, 32 a thread (two pieces of 16 bytes); zeros past n and k
      const int r = tid / 2, c = (tid % 2) * 32;
      const int64_t row = n0 + r;
#pragma unroll
      for (int piece = 0; piece < 2; ++piece) {
        const int col = k0 + c + 16 * piece;
        float f[16];
        if (row < n && col < k) {
          const uint4 raw = __ldg(reinterpret_cast<const uint4*>(w + row * k + col));
          const float s = __ldg(scales + row * scale_cols + col / block_cols);
          const unsigned words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
          for (int q = 0; q < 4; ++q) {
            const float2 lo = E4m3x2(static_cast<unsigned short>(words[q] & 0xffffu));
            const float2 hi = E4m3x2(static_cast<unsigned short>(words[q] >> 16));
            f[4 * q] = lo.x * s, f[4 * q + 1] = lo.y * s, f[4 * q + 2] = hi.x * s,
                  f[4 * q + 3] = hi.y * s;
          }
        } else {
#pragma unroll
          for (int e = 0; e < 16; ++e) f[e] = 0.0f;
        }
        uint32_t packed[8];
#pragma unroll
        for (int e = 0; e < 8; ++e)
          packed[e] = Pack(FloatToBf16(f[2 * e]), FloatToBf16(f[2 * e + 1]));
        *reinterpret_cast<uint4*>(&bs[r][c + 16 * piece]) =
            make_uint4(packed[0], packed[1], packed[2], packed[3]);
        *reinterpret_cast<uint4*>(&bs[r][c + 16 * piece + 8]) =
            make_uint4(packed[4], packed[5], packed[6], packed[7]);
      }
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kMmaK / 16; ++kk) {
      const FragA fa = LoadA(&as[16 * strip][16 * kk], kMmaLd);
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        Mma(acc[nt], fa, LoadBT(&bs[64 * half + 8 * nt][16 * kk], kMmaLd));
      }
    }
    __syncthreads();  // the tiles are read before the next ones land
  }
#pragma unroll
  for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t r = m0 + 16 * strip + AccRow(i), c = n0 + 64 * half + 8 * nt + AccCol(i);
      if (r >= m || c >= n) continue;
      float v = acc[nt].c[i];
      if (bias != nullptr) v += bias[c];
      float* out = y + r * ldy + c;
      *out = accumulate ? *out + v : v;
    }
  }
}

absl::string_view Fp8Mode() {
  static const absl::string_view mode = EnvOption("LINFER_CUDA_FP8", {"auto", "dequantize", "mma"});
  return mode;
}

// The shapes the GEMV and the tensor-core kernel read 16 bytes at a time: K a multiple of 16,
// contiguous 16-byte aligned rows, a 16-value piece always within one scale block.
bool Fp8PiecesFit(const TensorView& w) {
  const int64_t k = w.dim(-1);
  return k >= kPiece && k % kPiece == 0 && w.row_stride() == k &&
         reinterpret_cast<uintptr_t>(w.raw()) % 16 == 0 &&
         (w.scale_block_cols() % kPiece == 0 || w.scale_block_cols() >= k);
}

// The tensor-core kernel up to this many rows of x (auto), bf16 widening + cuBLASLt beyond
// (prefill: compute-bound, where cuBLASLt's kernels are the faster and the widening's extra
// bytes do not count). A guess until a GPU run has timed them.
constexpr int64_t kFp8MmaMaxRows = 256;

bool Fp8MmaApplies(int64_t m, const TensorView& w) {
  const absl::string_view mode = Fp8Mode();
  return Fp8PiecesFit(w) && m >= 1 && m <= int64_t{65535} * kMmaM &&
         (mode == "mma" || (mode == "auto" && m > kFp8MaxRows && m <= kFp8MmaMaxRows));
}

// Warps per output group: the most (≤ kFp8Warps) that keep about two blocks an SM busy while
// every lane still gets a couple of pieces of K.
int Fp8Split(int64_t n, int64_t k, int sms) {
  const int64_t groups = CeilDiv(n, kFp8Cols);
  int split = 1;
  while (split < kFp8Warps && CeilDiv(groups * split, kFp8Warps) < 2 * int64_t{sms} &&
         k / kPiece >= int64_t{64} * split) {
    split *= 2;
  }
  return split;
}

// Fp8GemvKernel's instances by rows of x (1–kFp8PassRows).
constexpr void (*kGemvKernels[])(Fp8GemvArgs) = {
    Fp8GemvKernel<1>, Fp8GemvKernel<2>, Fp8GemvKernel<3>, Fp8GemvKernel<4>,
    Fp8GemvKernel<5>, Fp8GemvKernel<6>, Fp8GemvKernel<7>, Fp8GemvKernel<8>};
static_assert(sizeof(kGemvKernels) / sizeof(kGemvKernels[0]) == kFp8PassRows);

// Whether the GEMV takes m rows over w (auto mode, the shapes fit).
bool Fp8GemvApplies(int64_t m, const TensorView& w) {
  return Fp8Mode() == "auto" && m >= 1 && m <= kFp8MaxRows && Fp8PiecesFit(w);
}

}  // namespace

const char* Fp8Path(int64_t m, const TensorView& w) {
  return Fp8GemvApplies(m, w) ? "gemv" : Fp8MmaApplies(m, w) ? "mma" : "widen";
}

absl::Status LinearFp8(const ExecContext& ctx, const TensorView& x, const TensorView& w,
                       const TensorView& y, const TensorView* bias, bool accumulate) {
  const int64_t m = x.dim(0), k = x.dim(1), n = w.dim(0);
  if (!w.has_scales() || x.dtype() != DType::kF32) {
    return absl::InternalError(
        absl::StrCat("Linear (CUDA, fp8): weights ", w.DebugString(), " with x ", x.DebugString()));
  }
  // A block at least as wide as the row is the row (c / bc is 0 either way): 32-bit arithmetic.
  const int64_t scale_cols = w.scale_cols(), block_cols = std::min(w.scale_block_cols(), k);
  if (Fp8GemvApplies(m, w)) {
    ASSIGN_OR_RETURN(const int sms, DeviceAttribute(cudaDevAttrMultiProcessorCount));
    Fp8GemvArgs a{x.data<const float>(),
                  x.row_stride(),
                  static_cast<const unsigned char*>(w.raw()),
                  w.scales(),
                  scale_cols,
                  block_cols,
                  bias != nullptr ? bias->data<const float>() : nullptr,
                  y.data<float>(),
                  y.row_stride(),
                  n,
                  k,
                  accumulate,
                  Fp8Split(n, k, sms)};
    const int64_t blocks = CeilDiv(n, int64_t{kFp8Warps / a.split} * kFp8Cols);
    const dim3 grid(static_cast<unsigned>(blocks));
    constexpr int kThreads = 32 * kFp8Warps;
    const cudaStream_t stream = Stream(ctx);
    // Passes of up to kFp8PassRows rows, each streaming the weights once more (from L2 when they
    // fit there).
    for (int64_t r0 = 0; r0 < m; r0 += kFp8PassRows) {
      a.x = x.data<const float>() + r0 * x.row_stride();
      a.y = y.data<float>() + r0 * y.row_stride();
      const int64_t rows = std::min<int64_t>(kFp8PassRows, m - r0);
      LaunchKernel(kGemvKernels[rows - 1], grid, kThreads, 0, stream, a);
      RETURN_IF_ERROR(CheckLaunch("Fp8GemvKernel"));
    }
    return absl::OkStatus();
  }
  // x rounded to bf16 once; then the tensor-core kernel, or a chunk of weight rows at a time
  // widened to bf16 into one scratch buffer the chunks reuse (the stream orders each chunk's
  // product before the next chunk's widening), each product taking the bf16 x as it is.
  if (k > int64_t{1} << 30) {
    return absl::InvalidArgumentError(
        absl::StrCat("Linear (CUDA, fp8): weights ", w.DebugString(), " wider than 2^30"));
  }
  ScratchScope scope(ctx);
  constexpr int kThreads = 256;
  ASSIGN_OR_RETURN(const TensorView xb, Scratch(ctx, DType::kBF16, {m, k}));
  RETURN_IF_ERROR(RoundToBf16(ctx, x, xb));
  if (Fp8MmaApplies(m, w)) {
    const dim3 grid(static_cast<unsigned>(CeilDiv(n, kMmaN)),
                    static_cast<unsigned>(CeilDiv(m, kMmaM)));
    LaunchKernel(Fp8MmaKernel, grid, 32 * kMmaWarps, 0, Stream(ctx), xb.data<const __nv_bfloat16>(),
                 m, static_cast<const unsigned char*>(w.raw()), w.scales(),
                 static_cast<int>(scale_cols), static_cast<int>(block_cols),
                 bias != nullptr ? bias->data<const float>() : nullptr, y.data<float>(),
                 y.row_stride(), n, static_cast<int>(k), accumulate);
    return CheckLaunch("Fp8MmaKernel");
  }
  const int64_t chunk = std::min(n, std::max<int64_t>(1, kDequantChunk / k));
  ASSIGN_OR_RETURN(const TensorView buffer, Scratch(ctx, DType::kBF16, {chunk, k}));
  const auto* q = static_cast<const unsigned char*>(w.raw());
  for (int64_t r0 = 0; r0 < n; r0 += chunk) {
    const int64_t rows = std::min(chunk, n - r0);
    LaunchKernel(DequantFp8Kernel, GridFor(rows, 1, 8192), kThreads, 0, Stream(ctx), q + r0 * k,
                 w.scales() + r0 * scale_cols, static_cast<int>(scale_cols),
                 static_cast<int>(block_cols), rows, static_cast<int>(k),
                 buffer.data<__nv_bfloat16>());
    RETURN_IF_ERROR(CheckLaunch("DequantFp8Kernel"));
    const TensorView part = buffer.Rows(0, rows);
    std::optional<TensorView> bias_part;
    if (bias != nullptr) {
      bias_part = TensorView(const_cast<float*>(bias->data<const float>()) + r0, DType::kF32,
                             {rows}, Device::kCuda);
    }
    RETURN_IF_ERROR(cuda::Linear(ctx, xb, part, y.Cols(r0, rows), bias_part ? &*bias_part : nullptr,
                                 accumulate));
  }
  return absl::OkStatus();
}

}  // namespace linfer::cuda
