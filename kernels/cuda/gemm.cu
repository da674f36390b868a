// Linear (kernels/gemm.h) through cuBLASLt: y[M,N] (+)= x[M,K] · w[N,K]ᵀ (+ bias[N]).
// cuBLASLt is column-major, so the row-major product is computed as its transpose:
//   yᵀ (N×M, ld = ldy) = op_T(w as K×N, ld = K) · (xᵀ as K×M, ld = ldx),  m = N, n = M, k = K.
// f32 weights: f32 operands, CUBLAS_COMPUTE_32F (no TF32). bf16 weights: x is first rounded to
// bf16 into arena scratch (ConvertKernel, one thread per element), then bf16 × bf16 with f32
// accumulation and f32 output. The bias is one more pointwise pass. Heuristic choices are cached
// per (handle, shape, alignment); descriptors are cheap and built per call.
#include <cublasLt.h>

#include <algorithm>
#include <cstring>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "kernels/cuda/cuda_check.cuh"
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

absl::StatusOr<cublasLtMatmulAlgo_t> FindAlgo(const BlasResources& blas, const Descs& d,
                                              const AlgoKey& key) {
  static absl::Mutex mu(absl::kConstInit);
  static auto* cache = new absl::flat_hash_map<AlgoKey, cublasLtMatmulAlgo_t>();
  {
    absl::MutexLock lock(&mu);
    auto it = cache->find(key);
    if (it != cache->end()) return it->second;
  }
  cublasLtMatmulHeuristicResult_t result;
  int found = 0;
  RETURN_IF_ERROR(
      LtStatus(cublasLtMatmulAlgoGetHeuristic(static_cast<cublasLtHandle_t>(blas.handle), d.op, d.a,
                                              d.b, d.c, d.c, d.pref, 1, &result, &found),
               "cublasLtMatmulAlgoGetHeuristic"));
  if (found == 0 || result.state != CUBLAS_STATUS_SUCCESS) {
    return absl::UnimplementedError("cuBLASLt has no algorithm for this Linear");
  }
  absl::MutexLock lock(&mu);
  if (cache->size() > 4096) cache->clear();  // prefill lengths vary: keep the cache bounded
  (*cache)[key] = result.algo;
  return result.algo;
}

__global__ void ConvertKernel(Mat x, int64_t rows, int64_t cols, __nv_bfloat16* out) {
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = FloatToBf16(x(i / cols, i % cols));
  }
}

__global__ void BiasKernel(Mat y, int64_t rows, int64_t cols, const float* bias, bool overwrite) {
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    float& v = y(i / cols, i % cols);
    v = (overwrite ? 0.0f : v) + (bias != nullptr ? bias[i % cols] : 0.0f);
  }
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
  ASSIGN_OR_RETURN(const cublasLtMatmulAlgo_t algo, FindAlgo(blas, d, key));
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  return LtStatus(cublasLtMatmul(static_cast<cublasLtHandle_t>(blas.handle), d.op, &alpha, w, d.a,
                                 x, d.b, &beta, y.raw(), d.c, y.raw(), d.c, &algo, blas.workspace,
                                 blas.workspace_bytes, Stream(ctx)),
                  "cublasLtMatmul");
}

}  // namespace

absl::Status Linear(const ExecContext& ctx, const TensorView& x, const TensorView& w,
                    const TensorView& y, const TensorView* bias, bool accumulate) {
  const int64_t m = x.dim(0), k = x.dim(1), n = w.dim(0);
  const BlasResources* blas = static_cast<const BlasResources*>(ctx.blas);
  if (blas == nullptr) {
    ASSIGN_OR_RETURN(blas, DefaultBlas());
  }
  constexpr int kThreads = 256;
  if (k == 0) {  // no product: y = (accumulate ? y : 0) + bias
    if (!accumulate || bias != nullptr) {
      BiasKernel<<<GridFor(m * n, kThreads), kThreads, 0, Stream(ctx)>>>(
          AsMat(y), m, n, bias != nullptr ? bias->data<const float>() : nullptr, !accumulate);
      RETURN_IF_ERROR(CheckLaunch("BiasKernel"));
    }
    return absl::OkStatus();
  }
  if (w.dtype() == DType::kBF16) {
    ASSIGN_OR_RETURN(const TensorView xb, Scratch(ctx, DType::kBF16, {m, k}));
    ConvertKernel<<<GridFor(m * k, kThreads), kThreads, 0, Stream(ctx)>>>(AsMat(x), m, k,
                                                                          xb.data<__nv_bfloat16>());
    RETURN_IF_ERROR(CheckLaunch("ConvertKernel"));
    RETURN_IF_ERROR(Matmul(ctx, *blas, w.raw(), CUDA_R_16BF, xb.raw(), k, y, m, n, k, accumulate));
  } else {
    RETURN_IF_ERROR(
        Matmul(ctx, *blas, w.raw(), CUDA_R_32F, x.raw(), x.row_stride(), y, m, n, k, accumulate));
  }
  if (bias != nullptr) {
    BiasKernel<<<GridFor(m * n, kThreads), kThreads, 0, Stream(ctx)>>>(
        AsMat(y), m, n, bias->data<const float>(), false);
    RETURN_IF_ERROR(CheckLaunch("BiasKernel"));
  }
  return absl::OkStatus();
}

}  // namespace linfer::cuda
