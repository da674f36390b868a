// Linear (kernels/gemm.h) through cuBLASLt: y[M,N] (+)= x[M,K] · w[N,K]ᵀ (+ bias[N]).
// cuBLASLt is column-major, so the row-major product is computed as its transpose:
//   yᵀ (N×M, ld = ldy) = op_T(w as K×N, ld = K) · (xᵀ as K×M, ld = ldx),  m = N, n = M, k = K.
// f32 weights: f32 operands, CUBLAS_COMPUTE_32F (no TF32). bf16 weights: x is first rounded to
// bf16 into arena scratch (ConvertKernel, one thread per element), then bf16 × bf16 with f32
// accumulation and f32 output — or, with LINFER_CUDA_BF16_INPUTS=1, x arrives in bf16 from its
// producer (kernels/gemm.h MatmulInputDType) and goes in as it is. The bias is one more pointwise
// pass. Algorithm choices are cached per (handle, shape, alignment): the heuristic's first pick, or
// with LINFER_CUDA_GEMM_TUNE=1 the fastest of its candidates at the decode buckets' row counts
// (gemm_tune.cuh); descriptors are cheap and built per call.
// LINFER_CUDA_GEMV=1 (opt-in until a GPU run has passed and timed it): bf16 weights and at most
// kGemvMaxRows rows of x (decode at small batches) take GemvKernel instead — no conversion pass,
// no bias pass, the weights streamed once with 16-byte loads; x is rounded to bf16 in registers,
// so the product is the same as cuBLASLt's up to the f32 summation order. Why: on an H200 the
// cuBLASLt kernels for M = 1 moved the weights at ≈ 55 % of the copy bandwidth, and the x
// conversion and bias were two more launches per product.
#include <cublasLt.h>

#include <algorithm>
#include <cstring>
#include <tuple>
#include <type_traits>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/env_option.h"
#include "kernels/cuda/gemm_tune.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/resources.h"

namespace linfer::cuda {
namespace {

absl::Status LtStatus(cublasStatus_t st, const char* call) {
  if (st == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(call, " failed: ", CublasStatusName(st)));
}

// The per-device resources used when the context carries none (tests, tools). Created on first
// use and kept for the life of the process (destroying them at exit would race the driver's own
// teardown).
absl::StatusOr<const BlasResources*> DefaultBlas() {
  static absl::Mutex mu(absl::kConstInit);
  static BlasResources* per_device[64] = {};
  int device = 0;
  CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  if (device < 0 || device >= 64) return absl::InternalError("device ordinal out of range");
  absl::MutexLock lock(&mu);
  if (per_device[device] == nullptr) {
    auto* blas = new BlasResources;
    const absl::Status s = CreateBlas(size_t{32} << 20, blas);
    if (!s.ok()) {
      delete blas;
      return s;
    }
    per_device[device] = blas;
  }
  return per_device[device];
}

// Largest power of two (≤ 256) dividing the address: cuBLASLt must not assume more.
uint32_t Alignment(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  uint32_t al = 256;
  while (al > 1 && a % al != 0) al /= 2;
  return al;
}

using AlgoKey = std::tuple<void*, int, int64_t, int64_t, int64_t, int64_t, int64_t, bool, size_t,
                           uint32_t, uint32_t, uint32_t>;

// Owns the cuBLASLt descriptors of one call.
struct Descs {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~Descs() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

// The algorithm for a product: tuned (gemm_tune.cuh) where TunedRows says so — kept for the
// life of the process, and so is the heuristic's first pick for a tunable shape first met while a
// graph was captured (a graph and the eager steps beside it then run the same algorithm) — else the
// heuristic's first pick, cached until the cache outgrows 4096 shapes (prefill lengths vary).
absl::StatusOr<cublasLtMatmulAlgo_t> FindAlgo(const BlasResources& blas, const Descs& d,
                                              const AlgoKey& key, const LtProduct& product) {
  static absl::Mutex mu(absl::kConstInit);
  static auto* cache = new absl::flat_hash_map<AlgoKey, cublasLtMatmulAlgo_t>();
  static auto* tuned = new absl::flat_hash_map<AlgoKey, cublasLtMatmulAlgo_t>();
  const bool bucket = TunedRows(product.m);
  {
    absl::MutexLock lock(&mu);
    auto* map = bucket ? tuned : cache;
    auto it = map->find(key);
    if (it != map->end()) return it->second;
  }
  cublasLtMatmulAlgo_t algo;
  if (bucket && !Capturing(product.stream)) {
    ASSIGN_OR_RETURN(algo, TuneAlgo(product));
    if (OpWindow* window = ActiveOpWindow(); window != nullptr) {  // not the product's own time
      MarkLaunch(*window, absl::StrCat("cublasLt tuning ", product.m, "x", product.n),
                 product.stream, /*entries=*/1);
    }
  } else {
    cublasLtMatmulHeuristicResult_t result;
    int found = 0;
    RETURN_IF_ERROR(
        LtStatus(cublasLtMatmulAlgoGetHeuristic(static_cast<cublasLtHandle_t>(blas.handle), d.op,
                                                d.a, d.b, d.c, d.c, d.pref, 1, &result, &found),
                 "cublasLtMatmulAlgoGetHeuristic"));
    if (found == 0 || result.state != CUBLAS_STATUS_SUCCESS) {
      return absl::UnimplementedError("cuBLASLt has no algorithm for this Linear");
    }
    algo = result.algo;
  }
  // The first choice stored wins (two threads may have missed the same key): every call of a
  // shape, graphed or eager, runs the same algorithm.
  absl::MutexLock lock(&mu);
  if (bucket) return tuned->try_emplace(key, algo).first->second;
  if (cache->size() > 4096) cache->clear();
  return cache->try_emplace(key, algo).first->second;
}

// out = bf16(x), or with `up` (SwiGluLinear) bf16(silu(x)·up).
__global__ void ConvertKernel(Mat x, Mat up, int64_t rows, int64_t cols, __nv_bfloat16* out) {
  PdlEnter();
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / cols, c = i % cols;
    out[i] = FloatToBf16(up.p != nullptr ? DeviceSwiGlu(x(r, c), up(r, c)) : x(r, c));
  }
}

__global__ void BiasKernel(Mat y, int64_t rows, int64_t cols, const float* bias, bool overwrite) {
  PdlEnter();
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    float& v = y(i / cols, i % cols);
    v = (overwrite ? 0.0f : v) + (bias != nullptr ? bias[i % cols] : 0.0f);
  }
}

// GemvKernel: `split` warps (GemvSplit) per `cols` consecutive outputs n (2, or 4 from 3 rows of x
// on: GemvCols); their lanes stride over k in pieces of 8 (one 16-byte load of each of the warp's
// weight rows per piece, kGemvLoads loads in flight: 4 pieces × 2 rows or 2 × 4), dot them with
// every x row, and join their partial sums by shuffles, then the split's through shared memory;
// one lane writes y (+ bias, + y when accumulating). Why 4 columns for more rows: every x row is
// reloaded (from L1) for each piece a warp sums, so at 8 f32 rows and 2 columns a warp reads 8×
// more bytes of x than of weights and L1, not DRAM, bounds it (the H200 run at ba0e522: 0.24–0.57×
// cuBLASLt at 4 and 8 rows, 1.03–1.18× at 1); 4 columns halve that. RmsNormLinear (kernels/
// gemm.h) runs here with `norm`: x normalised as it is read, each warp having summed its rows'
// squares first (a 4 KB row at d = 1024, from L2: cheaper than the norm's launch).
constexpr int kGemvMaxRows = 8, kGemvWarps = 8, kGemvLoads = 8, kGemvNormRows = 4;

struct GemvArgs {
  const float* x;
  const __nv_bfloat16* xb;  // x in bf16 instead (kernels/gemm.h MatmulInputDType), else null
  int64_t ldx;
  const float* up;  // SwiGluLinear: the input is silu(x)·up (same shape as x), else null
  int64_t ldup;
  bool x_vec4;             // 16-byte aligned rows (of x and up): 16-byte loads
  const __nv_bfloat16* w;  // [n, k], k % 8 == 0, 16-byte aligned
  const float* bias;       // [n] or null
  float* y;
  int64_t ldy, n, k;
  bool accumulate;
  int cols;  // outputs per warp group: 2 or 4 (the kernel's kCols)
  // RmsNormLinear (GemvKernel's kNorm): x (f32) is normalised as it is read — x·inv_r·(norm_w +
  // shift), inv_r = rsqrt(mean of row r's squares + eps), formed by every warp from the whole row
  // first.
  const float* norm_w;  // [k] or null (no weight)
  bool norm_vec4;       // norm_w 16-byte aligned
  float norm_eps, norm_shift;
  int split;      // warps per column group (1, 2, 4 or 8): GemvSplit
  bool prefetch;  // the first pass's weights into L2 before the wait (with PDL): GemvPrefetch
};

// Warps per column group: enough warps in all for ≈ 32 per SM (a product of few outputs, e.g. an
// MLP's down projection of 2,048 columns, would otherwise keep 8 warps per SM streaming), while
// every warp still gets at least one full 32-piece stretch of k. A power of two ≤ kGemvWarps.
int GemvSplit(int64_t n, int64_t k, int sms, int cols) {
  const int64_t groups = CeilDiv(n, int64_t{cols});
  int split = 1;
  while (split < kGemvWarps && groups * split < int64_t{32} * sms && k / 8 >= 64 * split) {
    split *= 2;
  }
  return split;
}

__device__ inline float RoundBf16(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

// v[0..8) = p[0..8) through the read-only path (two float4 loads when `vec4`).
__device__ inline void Load8(const float* p, bool vec4, float (&v)[8]) {
  if (vec4) {
    const float4 lo = __ldg(reinterpret_cast<const float4*>(p));
    const float4 hi = __ldg(reinterpret_cast<const float4*>(p) + 1);
    v[0] = lo.x, v[1] = lo.y, v[2] = lo.z, v[3] = lo.w;
    v[4] = hi.x, v[5] = hi.y, v[6] = hi.z, v[7] = hi.w;
  } else {
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = __ldg(p + j);
  }
}

// v[0..8) = p[0..8) widened from bf16 (one 16-byte load when `vec`).
__device__ inline void Load8(const __nv_bfloat16* p, bool vec, float (&v)[8]) {
  if (vec) {
    const uint4 raw = __ldg(reinterpret_cast<const uint4*>(p));
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float2 f = __bfloat1622float2(h[j]);
      v[2 * j] = f.x, v[2 * j + 1] = f.y;
    }
  } else {
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = __bfloat162float(p[j]);
  }
}

// Where a thread of GemvKernel works: a.split warps share a column group (first output n0), each
// summing every a.split-th 32-piece stretch of k.
struct GemvPlace {
  int lane, warp, part;
  int64_t n0;
};
__device__ inline GemvPlace PlaceOf(const GemvArgs& a) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int group = warp / a.split;
  return {lane, warp, warp % a.split,
          (int64_t{blockIdx.x} * (kGemvWarps / a.split) + group) * a.cols};
}

// With a.prefetch (PDL on), what the first pass of the loop below reads from the weights,
// prefetched into L2 before the kernel waits for the one before it (weights are written by no
// kernel but DequantFp8Kernel, whose chunk the fp8 widening path may hand this kernel right after
// it: a prefetch is only a hint, and L2 is where that kernel's writes land, so nothing stale is
// read — the prefetch just may come early): lane U·c + u of a warp (U = kGemvLoads / cols pieces a
// pass) takes row n0 + c's stretch u — 32 pieces of 16 bytes, 512 bytes. Bounded by what the
// resident warps read first, so it does not evict itself from L2 as whole rows would.
__device__ inline L2Range GemvPrefetch(const GemvArgs& a) {
  const GemvPlace at = PlaceOf(a);
  const int unroll = kGemvLoads / a.cols, c = at.lane / unroll, u = at.lane % unroll;
  const int64_t piece = int64_t{32} * at.part + int64_t{u} * 32 * a.split, pieces = a.k / 8;
  if (!a.prefetch || c >= a.cols || at.n0 + c >= a.n || piece >= pieces) return {a.w, 0};
  return {a.w + (at.n0 + c) * a.k + 8 * piece,
          static_cast<unsigned>(16 * Min64(32, pieces - piece))};
}

// kNorm: RmsNormLinear's, instantiated for 1–4 rows (its registers: 8 rows would
// spill). One row: 3 blocks an SM (≤ 80 registers; the norm's variant spills 4 bytes), as before
// the norm, which would have taken 90 and left 2. More rows: 2 blocks (≤ 128 registers; left
// free, <8, 4> took 136 and ran one block of 8 warps an SM, a third of GemvSplit's plan).
template <int kRows, int kCols, bool kNorm>
__global__ void __launch_bounds__(32 * kGemvWarps, kRows == 1 ? 3 : 2) GemvKernel(GemvArgs a) {
  PdlEnterAfterPrefetchL2(GemvPrefetch(a));
  static_assert(kGemvLoads % kCols == 0, "2 or 4 columns");
  const GemvPlace at = PlaceOf(a);
  const int lane = at.lane, warp = at.warp, part = at.part;
  const int64_t n0 = at.n0;
  const bool active = n0 < a.n;  // no early return: the split's join has a barrier
  float acc[kRows][kCols] = {};
  float inv[kRows];
  if constexpr (kNorm) {  // norm.cu's inverse RMS of each row, its sum in this warp's order
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      float ss = 0.0f;
      for (int64_t j = lane; j < a.k; j += 32) {
        const float v = __ldg(a.x + r * a.ldx + j);
        ss += v * v;
      }
      inv[r] = rsqrtf(WarpSum(ss) / static_cast<float>(a.k) + a.norm_eps);
    }
  }
  const int64_t pieces = active ? a.k / 8 : 0, stride = 32 * a.split;
  // kUnroll pieces' weight loads issued before any is used (the stride is a runtime value: the
  // compiler's own unrolling of `#pragma unroll 4` kept fewer in flight); summed in piece order.
  constexpr int kUnroll = kGemvLoads / kCols;
  for (int64_t base = 32 * part + lane; base < pieces; base += kUnroll * stride) {
    uint4 raw[kUnroll][kCols];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t piece = base + u * stride;
#pragma unroll
      for (int c = 0; c < kCols; ++c) {
        raw[u][c] = piece < pieces && n0 + c < a.n
                        ? __ldg(reinterpret_cast<const uint4*>(a.w + (n0 + c) * a.k) + piece)
                        : make_uint4(0, 0, 0, 0);
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t piece = base + u * stride;
      if (piece >= pieces) break;
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        float xv[8];
        if (a.xb != nullptr) {  // already bf16: RoundBf16 below leaves it as it is
          Load8(a.xb + r * a.ldx + 8 * piece, a.x_vec4, xv);
        } else {
          Load8(a.x + r * a.ldx + 8 * piece, a.x_vec4, xv);
        }
        if (a.up != nullptr) {
          float uv[8];
          Load8(a.up + r * a.ldup + 8 * piece, a.x_vec4, uv);
#pragma unroll
          for (int j = 0; j < 8; ++j) xv[j] = DeviceSwiGlu(xv[j], uv[j]);
        }
        if constexpr (kNorm) {  // as norm.cu: (x · inv) · (w + shift)
          float g[8];
          if (a.norm_w != nullptr) Load8(a.norm_w + 8 * piece, a.norm_vec4, g);
#pragma unroll
          for (int j = 0; j < 8; ++j) {
            xv[j] *= inv[r];
            if (a.norm_w != nullptr) xv[j] *= g[j] + a.norm_shift;
          }
        }
#pragma unroll
        for (int j = 0; j < 8; ++j) xv[j] = RoundBf16(xv[j]);  // (bf16 x: unchanged)
#pragma unroll
        for (int c = 0; c < kCols; ++c) {
          const __nv_bfloat162* w2 = reinterpret_cast<const __nv_bfloat162*>(&raw[u][c]);
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            const float2 wf = __bfloat1622float2(w2[j]);
            acc[r][c] += xv[2 * j] * wf.x + xv[2 * j + 1] * wf.y;
          }
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
#pragma unroll
    for (int c = 0; c < kCols; ++c) acc[r][c] = WarpSum(acc[r][c]);
  }
  if (a.split > 1) {  // the split's partial sums, joined in part order by its first warp
    __shared__ float partial[kGemvWarps][kRows][kCols];
    if (lane == 0) {
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
#pragma unroll
        for (int c = 0; c < kCols; ++c) partial[warp][r][c] = acc[r][c];
      }
    }
    __syncthreads();
    if (part != 0) return;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
#pragma unroll
      for (int c = 0; c < kCols; ++c) {
        for (int q = 1; q < a.split; ++q) acc[r][c] += partial[warp + q][r][c];
      }
    }
  }
  if (lane != 0 || !active) return;
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      if (n0 + c >= a.n) continue;
      float* out = a.y + r * a.ldy + n0 + c;
      *out = (a.accumulate ? *out : 0.0f) + acc[r][c] + (a.bias != nullptr ? a.bias[n0 + c] : 0.0f);
    }
  }
}

}  // namespace

bool Bf16MatmulInputs() {
  static const bool on = EnvOption("LINFER_CUDA_BF16_INPUTS", {"0", "1"}) == "1";
  return on;
}

namespace {

bool GemvEnabled() {
  static const bool on = EnvOption("LINFER_CUDA_GEMV", {"0", "1"}) == "1";
  return on;
}

// Outputs per warp group for m rows of x: LINFER_CUDA_GEMV_COLS=2 or 4, or unset ("auto"): 2 for
// 1–2 rows, 4 from 3 on (the x reloads: see GemvKernel). Opt-in with the GEMV itself.
int GemvCols(int64_t m) {
  static const absl::string_view mode = EnvOption("LINFER_CUDA_GEMV_COLS", {"auto", "2", "4"});
  if (mode == "2") return 2;
  if (mode == "4") return 4;
  return m >= 3 ? 4 : 2;
}

// GemvKernel for m ≤ kGemvMaxRows rows; false when the shapes or alignment do not suit it.
// The GEMV's shapes: bf16 weights [n, k], k a multiple of 8, contiguous and 16-byte aligned; 1–4
// or 8 rows (5–7: cuBLASLt, not worth more instantiations).
bool GemvShapeOk(int64_t m, const TensorView& w) {
  const int64_t k = w.dim(1);
  return GemvEnabled() && w.dtype() == DType::kBF16 && m >= 1 && m <= kGemvMaxRows &&
         (m <= 4 || m == 8) && k >= 8 && k % 8 == 0 && w.row_stride() == k &&
         reinterpret_cast<uintptr_t>(w.raw()) % 16 == 0;
}

// RmsNormLinear's norm, folded into the GEMV's read of x.
struct NormFold {
  const TensorView* w;  // [k] f32, or empty
  NormParams p;
};

absl::StatusOr<bool> TryGemv(const ExecContext& ctx, const TensorView& x, const TensorView* up,
                             const TensorView& w, const TensorView& y, const TensorView* bias,
                             bool accumulate, const NormFold* norm = nullptr) {
  const int64_t m = x.dim(0), k = x.dim(1), n = w.dim(0);
  // A norm folds only up to kGemvNormRows rows (no instance above: the norm would be dropped).
  if (!GemvShapeOk(m, w) || (norm != nullptr && m > kGemvNormRows)) return false;
  const auto vec4 = [](const TensorView& t) {  // 16 bytes: 4 floats or 8 bf16
    return t.row_stride() % (t.dtype() == DType::kBF16 ? 8 : 4) == 0 &&
           reinterpret_cast<uintptr_t>(t.raw()) % 16 == 0;
  };
  const bool bf16_x = x.dtype() == DType::kBF16;
  GemvArgs a{bf16_x ? nullptr : x.data<const float>(),
             bf16_x ? x.data<const __nv_bfloat16>() : nullptr,
             x.row_stride(),
             up != nullptr ? up->data<const float>() : nullptr,
             up != nullptr ? up->row_stride() : 0,
             vec4(x) && (up == nullptr || vec4(*up)),
             w.data<const __nv_bfloat16>(),
             bias != nullptr ? bias->data<const float>() : nullptr,
             y.data<float>(),
             y.row_stride(),
             n,
             k,
             accumulate,
             GemvCols(m),
             norm != nullptr && !norm->w->empty() ? norm->w->data<const float>() : nullptr,
             norm != nullptr && reinterpret_cast<uintptr_t>(norm->w->raw()) % 16 == 0,
             norm != nullptr ? norm->p.eps : 0.0f,
             norm != nullptr && norm->p.zero_centered ? 1.0f : 0.0f,
             1,
             PdlEnabled()};
  ASSIGN_OR_RETURN(const int sms, DeviceAttribute(cudaDevAttrMultiProcessorCount));
  a.split = GemvSplit(n, k, sms, a.cols);
  const int64_t blocks = CeilDiv(n, int64_t{kGemvWarps / a.split} * a.cols);
  if (blocks > (int64_t{1} << 31) - 1) return false;
  const dim3 grid(static_cast<unsigned>(blocks));
  constexpr int kThreads = 32 * kGemvWarps;
  // kRows = m exactly (the kernel reads kRows rows of x).
  auto launch = [&](auto rows) {
    constexpr int kRows = decltype(rows)::value;
    if constexpr (kRows <= kGemvNormRows) {
      if (norm != nullptr) {
        if (a.cols == 4) {
          LaunchKernel(GemvKernel<kRows, 4, true>, grid, kThreads, 0, Stream(ctx), a);
        } else {
          LaunchKernel(GemvKernel<kRows, 2, true>, grid, kThreads, 0, Stream(ctx), a);
        }
        return;
      }
    }
    if (a.cols == 4) {
      LaunchKernel(GemvKernel<kRows, 4, false>, grid, kThreads, 0, Stream(ctx), a);
    } else {
      LaunchKernel(GemvKernel<kRows, 2, false>, grid, kThreads, 0, Stream(ctx), a);
    }
  };
  switch (m) {
    case 1:
      launch(std::integral_constant<int, 1>{});
      break;
    case 2:
      launch(std::integral_constant<int, 2>{});
      break;
    case 3:
      launch(std::integral_constant<int, 3>{});
      break;
    case 4:
      launch(std::integral_constant<int, 4>{});
      break;
    default:
      launch(std::integral_constant<int, 8>{});
      break;
  }
  RETURN_IF_ERROR(CheckLaunch("GemvKernel"));
  return true;
}

// out = bf16(x), or with `up` bf16(silu(x)·up): ConvertKernel.
absl::Status Convert(const ExecContext& ctx, const TensorView& x, const TensorView* up,
                     const TensorView& out) {
  constexpr int kThreads = 256;
  const int64_t m = x.dim(0), k = x.dim(1);
  LaunchKernel(ConvertKernel, GridFor(m * k, kThreads), kThreads, 0, Stream(ctx), AsMat(x),
               up != nullptr ? AsMat(*up) : Mat{nullptr, 0}, m, k, out.data<__nv_bfloat16>());
  return CheckLaunch("ConvertKernel");
}

absl::Status Matmul(const ExecContext& ctx, const BlasResources& blas, const void* w,
                    cudaDataType_t type, const void* x, int64_t ldx, const TensorView& y, int64_t m,
                    int64_t n, int64_t k, bool accumulate) {
  Descs d;
  RETURN_IF_ERROR(LtStatus(cublasLtMatmulDescCreate(&d.op, CUBLAS_COMPUTE_32F, CUDA_R_32F),
                           "cublasLtMatmulDescCreate"));
  const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
  RETURN_IF_ERROR(LtStatus(
      cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof(trans_a)),
      "TRANSA"));
  RETURN_IF_ERROR(LtStatus(
      cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof(trans_b)),
      "TRANSB"));
  const int64_t ldy = y.row_stride();
  RETURN_IF_ERROR(LtStatus(cublasLtMatrixLayoutCreate(&d.a, type, k, n, k), "layout w"));
  RETURN_IF_ERROR(LtStatus(cublasLtMatrixLayoutCreate(&d.b, type, k, m, ldx), "layout x"));
  RETURN_IF_ERROR(LtStatus(cublasLtMatrixLayoutCreate(&d.c, CUDA_R_32F, n, m, ldy), "layout y"));
  RETURN_IF_ERROR(LtStatus(cublasLtMatmulPreferenceCreate(&d.pref), "preference"));
  size_t ws = blas.workspace_bytes;
  RETURN_IF_ERROR(LtStatus(cublasLtMatmulPreferenceSetAttribute(
                               d.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)),
                           "workspace preference"));
  const uint32_t al_w = Alignment(w), al_x = Alignment(x), al_y = Alignment(y.raw());
  for (const auto& [attr, value] : {std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, al_w},
                                    std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, al_x},
                                    std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, al_y},
                                    std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, al_y}}) {
    RETURN_IF_ERROR(LtStatus(
        cublasLtMatmulPreferenceSetAttribute(d.pref, attr, &value, sizeof(value)), "alignment"));
  }
  const AlgoKey key{
      blas.handle, static_cast<int>(type), m, n, k, ldx, ldy, accumulate, ws, al_w, al_x, al_y};
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  const auto handle = static_cast<cublasLtHandle_t>(blas.handle);
  const LtProduct product{
      handle,      d.op, d.a, d.b, d.c, d.pref, w, x, beta, blas.workspace, blas.workspace_bytes,
      Stream(ctx), n,    m,   ldy};
  ASSIGN_OR_RETURN(const cublasLtMatmulAlgo_t algo, FindAlgo(blas, d, key, product));
  RETURN_IF_ERROR(
      LtStatus(cublasLtMatmul(handle, d.op, &alpha, w, d.a, x, d.b, &beta, y.raw(), d.c, y.raw(),
                              d.c, &algo, blas.workspace, blas.workspace_bytes, Stream(ctx)),
               "cublasLtMatmul"));
  if (OpWindow* window = ActiveOpWindow(); window != nullptr) {  // its kernels timed as one op
    MarkLaunch(*window,
               absl::StrCat("cublasLt ", m, "x", n, "x", k, type == CUDA_R_16BF ? " bf16" : " f32"),
               Stream(ctx), /*entries=*/3);  // split-K products take a reduction kernel too
  }
  return absl::OkStatus();
}

// Linear, and with `up` SwiGluLinear (x is then the gate; bf16 weights only).
absl::Status LinearOf(const ExecContext& ctx, const TensorView& x, const TensorView* up,
                      const TensorView& w, const TensorView& y, const TensorView* bias,
                      bool accumulate) {
  const int64_t m = x.dim(0), k = x.dim(1), n = w.dim(0);
  const BlasResources* blas = static_cast<const BlasResources*>(ctx.blas);
  if (blas == nullptr) {
    ASSIGN_OR_RETURN(blas, DefaultBlas());
  }
  constexpr int kThreads = 256;
  if (k == 0) {  // no product: y = (accumulate ? y : 0) + bias
    if (!accumulate || bias != nullptr) {
      LaunchKernel(BiasKernel, GridFor(m * n, kThreads), kThreads, 0, Stream(ctx), AsMat(y), m, n,
                   bias != nullptr ? bias->data<const float>() : nullptr, !accumulate);
      RETURN_IF_ERROR(CheckLaunch("BiasKernel"));
    }
    return absl::OkStatus();
  }
  if (w.dtype() == DType::kF8E4M3 && up == nullptr) {  // gemm_fp8.cu
    return LinearFp8(ctx, x, w, y, bias, accumulate);
  }
  if (up != nullptr && w.dtype() != DType::kBF16) {
    return absl::InternalError("SwiGluLinear (CUDA): bf16 weights only");
  }
  ASSIGN_OR_RETURN(const bool gemv, TryGemv(ctx, x, up, w, y, bias, accumulate));
  if (gemv) return absl::OkStatus();
  if (x.dtype() == DType::kBF16) {  // written as bf16 by its producer: no conversion pass
    RETURN_IF_ERROR(
        Matmul(ctx, *blas, w.raw(), CUDA_R_16BF, x.raw(), x.row_stride(), y, m, n, k, accumulate));
  } else if (w.dtype() == DType::kBF16) {
    ASSIGN_OR_RETURN(const TensorView xb, Scratch(ctx, DType::kBF16, {m, k}));
    RETURN_IF_ERROR(Convert(ctx, x, up, xb));
    RETURN_IF_ERROR(Matmul(ctx, *blas, w.raw(), CUDA_R_16BF, xb.raw(), k, y, m, n, k, accumulate));
  } else {
    RETURN_IF_ERROR(
        Matmul(ctx, *blas, w.raw(), CUDA_R_32F, x.raw(), x.row_stride(), y, m, n, k, accumulate));
  }
  if (bias != nullptr) {
    LaunchKernel(BiasKernel, GridFor(m * n, kThreads), kThreads, 0, Stream(ctx), AsMat(y), m, n,
                 bias->data<const float>(), false);
    RETURN_IF_ERROR(CheckLaunch("BiasKernel"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Linear(const ExecContext& ctx, const TensorView& x, const TensorView& w,
                    const TensorView& y, const TensorView* bias, bool accumulate) {
  return LinearOf(ctx, x, nullptr, w, y, bias, accumulate);
}

bool RmsNormLinearFolds(int64_t rows, const TensorView& w) {
  return GemvShapeOk(rows, w) && rows <= kGemvNormRows;
}

absl::StatusOr<bool> TryRmsNormLinear(const ExecContext& ctx, const TensorView& x,
                                      const TensorView& norm_w, const NormParams& p,
                                      const TensorView& w, const TensorView& y) {
  if (!RmsNormLinearFolds(x.dim(0), w)) return false;
  const NormFold norm{&norm_w, p};
  return TryGemv(ctx, x, nullptr, w, y, nullptr, /*accumulate=*/false, &norm);
}

absl::Status SwiGluLinear(const ExecContext& ctx, const TensorView& gate, const TensorView& up,
                          const TensorView& w, const TensorView& y, bool accumulate) {
  return LinearOf(ctx, gate, &up, w, y, nullptr, accumulate);
}

absl::Status RoundToBf16(const ExecContext& ctx, const TensorView& x, const TensorView& out) {
  return Convert(ctx, x, nullptr, out);
}

}  // namespace linfer::cuda
