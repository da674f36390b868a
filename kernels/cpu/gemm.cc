// Linear through OpenBLAS' sgemm.
#include "kernels/gemm.h"

#include <cblas.h>

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace linfer {

absl::Status Linear(const TensorView& x, const TensorView& w, const TensorView& y,
                    const TensorView* bias, bool accumulate) {
  for (const TensorView* t : {&x, &w, &y}) {
    if (t->dtype() != DType::kF32 || t->device() != Device::kCpu || t->rank() != 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("Linear needs 2-D f32 CPU tensors, got ", t->DebugString()));
    }
  }
  const int64_t m = x.dim(0), k = x.dim(1), n = w.dim(0);
  if (w.dim(1) != k || y.dim(0) != m || y.dim(1) != n) {
    return absl::InvalidArgumentError(absl::StrCat("Linear shape mismatch: x ", x.DebugString(),
                                                   " w ", w.DebugString(), " y ", y.DebugString()));
  }
  if (bias != nullptr && (bias->dtype() != DType::kF32 || bias->numel() != n)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Linear bias must be f32 [", n, "], got ", bias->DebugString()));
  }
  if (m == 0 || n == 0) return absl::OkStatus();
  float* out = y.data<float>();
  if (k == 0) {
    if (!accumulate) std::fill_n(out, m * n, 0.0f);
  } else {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(n),
                static_cast<int>(k), 1.0f, x.data<const float>(), static_cast<int>(k),
                w.data<const float>(), static_cast<int>(k), accumulate ? 1.0f : 0.0f, out,
                static_cast<int>(n));
  }
  if (bias != nullptr) {
    const float* b = bias->data<const float>();
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) out[i * n + j] += b[j];
    }
  }
  return absl::OkStatus();
}

}  // namespace linfer
