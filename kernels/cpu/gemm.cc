// Linear through OpenBLAS' sgemm (row strides become lda/ldc), or linfer's own kernel
// (invariant_gemm.h): when the context asks for batch invariance; for one or two rows, where
// sgemm packs the whole weight matrix before multiplying (measured: 55 % of a batch-1 RWKV-7
// decode step in sgemm_incopy) while the own kernel streams it once; and for every product when
// OpenBLAS fell back to its generic SSE3 kernels ("Prescott", on VMs whose CPU model it does not
// know) on a CPU with AVX2 + FMA (there the own kernel is 1.5-2x faster at every size). bf16 and
// f16 weights (--weight_dtype) always take the own kernel, which widens them as it loads them, and
// so do fp8 weights kept as their checkpoint stores them (dequantized a block at a time).
#include <cblas.h>

#include <algorithm>
#include <string_view>

#include "kernels/cpu/invariant_gemm.h"
#include "kernels/cpu/ops.h"

namespace linfer::cpu {
namespace {

constexpr int64_t kSmallRows = 2;

// OpenBLAS' pre-AVX2 kernel sets (what it falls back to when it does not know the CPU model).
bool GenericCore(std::string_view core) {
  for (std::string_view g : {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Atom",
                             "Katmai", "Coppermine", "Northwood", "Banias", "Unknown"}) {
    if (core == g) return true;
  }
  return false;
}

bool OpenBlasIsGeneric() {
  static const bool generic = InvariantGemmIsVectorized() && GenericCore(openblas_get_corename());
  return generic;
}

}  // namespace

std::string BlasCoreName() { return openblas_get_corename(); }

std::string BlasCoreUpgrade() {
  if (!GenericCore(openblas_get_corename())) return "";
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl")) {
    return "SkylakeX";
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
  return "";
}

absl::Status Linear(const ExecContext& ctx, const TensorView& x, const TensorView& w,
                    const TensorView& y, const TensorView* bias, bool accumulate) {
  const int64_t m = x.dim(0), k = x.dim(1), n = w.dim(0);
  float* out = y.data<float>();
  const int64_t ldy = y.row_stride();
  if (k == 0) {
    if (!accumulate) {
      for (int64_t i = 0; i < m; ++i) std::fill_n(out + i * ldy, n, 0.0f);
    }
  } else if (w.dtype() != DType::kF32 || ctx.batch_invariant || m <= kSmallRows ||
             OpenBlasIsGeneric()) {
    const WeightFormat format = w.dtype() == DType::kBF16     ? WeightFormat::kBF16
                                : w.dtype() == DType::kF16    ? WeightFormat::kF16
                                : w.dtype() == DType::kF8E4M3 ? WeightFormat::kF8E4M3
                                                              : WeightFormat::kF32;
    InvariantGemm(x.data<const float>(), x.row_stride(), w.data<const void>(), format, out, ldy, m,
                  n, k, accumulate, {w.scales(), w.scale_block_cols()});
  } else {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(n),
                static_cast<int>(k), 1.0f, x.data<const float>(), static_cast<int>(x.row_stride()),
                w.data<const float>(), static_cast<int>(k), accumulate ? 1.0f : 0.0f, out,
                static_cast<int>(ldy));
  }
  if (bias != nullptr) {
    const float* b = bias->data<const float>();
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) out[i * ldy + j] += b[j];
    }
  }
  return absl::OkStatus();
}

}  // namespace linfer::cpu
