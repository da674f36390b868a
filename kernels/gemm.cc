// Linear: checks and dispatch.
#include "kernels/gemm.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/check.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/ops.h"

namespace linfer {

bool MatrixDTypeSupported(Device device, DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kBF16 ||
         (device == Device::kCpu && dtype == DType::kF16);
}

std::string BlasCoreName() { return cpu::BlasCoreName(); }
std::string BlasCoreUpgrade() { return cpu::BlasCoreUpgrade(); }

absl::Status Linear(const ExecContext& ctx, const TensorView& x, const TensorView& w,
                    const TensorView& y, const TensorView* bias, bool accumulate) {
  RETURN_IF_ERROR(CheckView(ctx, "Linear", "x", x, DType::kF32, 2));
  RETURN_IF_ERROR(CheckView(ctx, "Linear", "y", y, DType::kF32, 2));
  if (!MatrixDTypeSupported(ctx.device, w.dtype())) {
    return absl::InvalidArgumentError(absl::StrCat("Linear: weight ", w.DebugString(),
                                                   " must be f32 or bf16 (or f16 on the CPU)"));
  }
  RETURN_IF_ERROR(CheckView(ctx, "Linear", "w", w, w.dtype(), 2));
  RETURN_IF_ERROR(CheckContiguous("Linear", "w", w));
  const int64_t m = x.dim(0), k = x.dim(1), n = w.dim(0);
  if (w.dim(1) != k || y.dim(0) != m || y.dim(1) != n) {
    return absl::InvalidArgumentError(absl::StrCat("Linear shape mismatch: x ", x.DebugString(),
                                                   " w ", w.DebugString(), " y ", y.DebugString()));
  }
  if (bias != nullptr) {
    RETURN_IF_ERROR(CheckView(ctx, "Linear", "bias", *bias, DType::kF32, -1));
    if (bias->numel() != n) {
      return absl::InvalidArgumentError(
          absl::StrCat("Linear bias must be [", n, "], got ", bias->DebugString()));
    }
  }
  if (m == 0 || n == 0) return absl::OkStatus();
  switch (ctx.device) {
    case Device::kCpu:
      return cpu::Linear(ctx, x, w, y, bias, accumulate);
    case Device::kCuda:
      return cuda::Linear(ctx, x, w, y, bias, accumulate);
  }
  return absl::InternalError("unknown device");
}

}  // namespace linfer
