// Linear: checks and dispatch.
#include "kernels/gemm.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/activation.h"
#include "kernels/check.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/ops.h"
#include "kernels/norm.h"

namespace linfer {

bool MatrixDTypeSupported(Device device, DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF8E4M3 ||
         (device == Device::kCpu && dtype == DType::kF16);
}

absl::Status CheckMatrixDType(const ExecContext& ctx, absl::string_view op, absl::string_view what,
                              const TensorView& w) {
  if (!MatrixDTypeSupported(ctx.device, w.dtype())) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": ", what, " ", w.DebugString(),
                     " must be f32, bf16 or fp8 with its scales (or f16 on the CPU)"));
  }
  if (w.dtype() == DType::kF8E4M3 && !w.has_scales()) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": the fp8 ", what, " ", w.DebugString(), " has no scales"));
  }
  return absl::OkStatus();
}

std::string BlasCoreName() { return cpu::BlasCoreName(); }
std::string BlasCoreUpgrade() { return cpu::BlasCoreUpgrade(); }

namespace {

// x, w and y fit y = x · wᵀ (`op` names the caller).
// bf16_x: x may be bf16 when w is (Linear; not SwiGluLinear, whose x is the gate).
absl::Status CheckProduct(const ExecContext& ctx, absl::string_view op, const TensorView& x,
                          const TensorView& w, const TensorView& y, bool bf16_x = false) {
  const bool x_bf16 = bf16_x && x.dtype() == DType::kBF16 && w.dtype() == DType::kBF16;
  RETURN_IF_ERROR(CheckView(ctx, op, "x", x, x_bf16 ? DType::kBF16 : DType::kF32, 2));
  RETURN_IF_ERROR(CheckView(ctx, op, "y", y, DType::kF32, 2));
  RETURN_IF_ERROR(CheckMatrixDType(ctx, op, "weight", w));
  RETURN_IF_ERROR(CheckView(ctx, op, "w", w, w.dtype(), 2));
  RETURN_IF_ERROR(CheckContiguous(op, "w", w));
  if (w.dim(1) != x.dim(1) || y.dim(0) != x.dim(0) || y.dim(1) != w.dim(0)) {
    return absl::InvalidArgumentError(absl::StrCat(op, " shape mismatch: x ", x.DebugString(),
                                                   " w ", w.DebugString(), " y ", y.DebugString()));
  }
  return absl::OkStatus();
}

}  // namespace

DType MatmulInputDType(const ExecContext& ctx, const TensorView& w) {
  const bool asked =
      ctx.device == Device::kCuda ? cuda::Bf16MatmulInputs() : ctx.bf16_matmul_inputs;
  return asked && w.dtype() == DType::kBF16 ? DType::kBF16 : DType::kF32;
}

absl::Status Linear(const ExecContext& ctx, const TensorView& x, const TensorView& w,
                    const TensorView& y, const TensorView* bias, bool accumulate) {
  RETURN_IF_ERROR(CheckProduct(ctx, "Linear", x, w, y, /*bf16_x=*/true));
  const int64_t m = x.dim(0), n = w.dim(0);
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
      if (x.dtype() == DType::kBF16) {  // widened: the CPU's products take f32 inputs
        ASSIGN_OR_RETURN(const TensorView xf, Scratch(ctx, DType::kF32, {m, x.dim(1)}));
        cpu::ConvertRows(x, xf);
        return cpu::Linear(ctx, xf, w, y, bias, accumulate);
      }
      return cpu::Linear(ctx, x, w, y, bias, accumulate);
    case Device::kCuda:
      return cuda::Linear(ctx, x, w, y, bias, accumulate);
  }
  return absl::InternalError("unknown device");
}

bool RmsNormLinearFolds(const ExecContext& ctx, int64_t rows, const TensorView& w) {
  return ctx.device == Device::kCuda ? cuda::RmsNormLinearFolds(rows, w) : ctx.fold_input_norms;
}

absl::Status RmsNormLinear(const ExecContext& ctx, const TensorView& x, const TensorView& norm_w,
                           const NormParams& p, const TensorView& w, const TensorView& y) {
  RETURN_IF_ERROR(CheckProduct(ctx, "RmsNormLinear", x, w, y));
  if (p.group != x.dim(1)) {
    return absl::InvalidArgumentError(absl::StrCat("RmsNormLinear: the norm's group (", p.group,
                                                   ") must be x's width ", x.dim(1)));
  }
  RETURN_IF_ERROR(CheckNormWeight(ctx, "RmsNormLinear", "norm weight", norm_w, p.group));
  if (x.dim(0) == 0 || w.dim(0) == 0) return absl::OkStatus();
  if (ctx.device == Device::kCuda) {
    ASSIGN_OR_RETURN(const bool folded, cuda::TryRmsNormLinear(ctx, x, norm_w, p, w, y));
    if (folded) return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(const TensorView normed,
                   Scratch(ctx, MatmulInputDType(ctx, w), {x.dim(0), x.dim(1)}));
  RETURN_IF_ERROR(RmsNorm(ctx, x, norm_w, p, normed));
  return Linear(ctx, normed, w, y);
}

absl::Status SwiGluLinear(const ExecContext& ctx, const TensorView& gate, const TensorView& up,
                          const TensorView& w, const TensorView& y, bool accumulate) {
  RETURN_IF_ERROR(CheckProduct(ctx, "SwiGluLinear", gate, w, y));
  RETURN_IF_ERROR(CheckView(ctx, "SwiGluLinear", "up", up, DType::kF32, 2));
  if (up.dim(0) != gate.dim(0) || up.dim(1) != gate.dim(1)) {
    return absl::InvalidArgumentError(absl::StrCat("SwiGluLinear: up ", up.DebugString(),
                                                   " must have gate's shape ", gate.DebugString()));
  }
  if (ctx.device == Device::kCuda && w.dtype() == DType::kBF16) {
    if (gate.dim(0) == 0 || w.dim(0) == 0) return absl::OkStatus();
    return cuda::SwiGluLinear(ctx, gate, up, w, y, accumulate);
  }
  RETURN_IF_ERROR(SwiGlu(ctx, gate, up, gate));
  return Linear(ctx, gate, w, y, nullptr, accumulate);
}

}  // namespace linfer
