// Linear through OpenBLAS' sgemm (row strides become lda/ldc), or the batch-invariant kernel
// when the context asks for it.
#include <cblas.h>

#include <algorithm>

#include "kernels/cpu/invariant_gemm.h"
#include "kernels/cpu/ops.h"

namespace linfer::cpu {

absl::Status Linear(const ExecContext& ctx, const TensorView& x, const TensorView& w,
                    const TensorView& y, const TensorView* bias, bool accumulate) {
  const int64_t m = x.dim(0), k = x.dim(1), n = w.dim(0);
  float* out = y.data<float>();
  const int64_t ldy = y.row_stride();
  if (k == 0) {
    if (!accumulate) {
      for (int64_t i = 0; i < m; ++i) std::fill_n(out + i * ldy, n, 0.0f);
    }
  } else if (ctx.batch_invariant) {
    InvariantGemm(x.data<const float>(), x.row_stride(), w.data<const float>(), out, ldy, m, n, k,
                  accumulate);
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
