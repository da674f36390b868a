// Norms: checks and dispatch.
#include "kernels/norm.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/check.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/ops.h"

namespace linfer {
namespace {

// y: f32, or bf16 where `bf16_y` (the norms that feed matmuls: kernels/gemm.h MatmulInputDType).
absl::Status CheckXY(const ExecContext& ctx, absl::string_view op, const TensorView& x,
                     int64_t group, const TensorView& y, bool bf16_y = false) {
  RETURN_IF_ERROR(CheckView(ctx, op, "x", x, DType::kF32, 2));
  RETURN_IF_ERROR(CheckView(ctx, op, "y", y,
                            bf16_y && y.dtype() == DType::kBF16 ? DType::kBF16 : DType::kF32, 2));
  RETURN_IF_ERROR(CheckSameShape(op, "x", x, "y", y));
  return CheckGroups(op, x, group);
}

// The CPU twin of a norm with a bf16 output: the f32 norm into scratch, then rounded into y.
template <typename Fn>
absl::Status CpuIntoBf16(const ExecContext& ctx, const TensorView& y, Fn&& norm) {
  if (y.dtype() != DType::kBF16) return norm(y);
  ASSIGN_OR_RETURN(const TensorView f, Scratch(ctx, DType::kF32, {y.dim(0), y.dim(1)}));
  RETURN_IF_ERROR(norm(f));
  cpu::ConvertRows(f, y);
  return absl::OkStatus();
}

}  // namespace

absl::Status RmsNorm(const ExecContext& ctx, const TensorView& x, const TensorView& w,
                     const NormParams& p, const TensorView& y) {
  RETURN_IF_ERROR(CheckXY(ctx, "RmsNorm", x, p.group, y, /*bf16_y=*/true));
  RETURN_IF_ERROR(CheckNormWeight(ctx, "RmsNorm", "weight", w, p.group));
  switch (ctx.device) {
    case Device::kCpu:
      return CpuIntoBf16(ctx, y,
                         [&](const TensorView& out) { return cpu::RmsNorm(ctx, x, w, p, out); });
    case Device::kCuda:
      return cuda::RmsNorm(ctx, x, w, p, y);
  }
  return absl::InternalError("unknown device");
}

absl::Status AddRmsNorm(const ExecContext& ctx, const TensorView& h, const TensorView& r,
                        const TensorView& w, const NormParams& p, const TensorView& y) {
  RETURN_IF_ERROR(CheckView(ctx, "AddRmsNorm", "h", h, DType::kF32, 2));
  RETURN_IF_ERROR(CheckView(ctx, "AddRmsNorm", "residual", r, DType::kF32, 2));
  RETURN_IF_ERROR(CheckView(ctx, "AddRmsNorm", "y", y,
                            y.dtype() == DType::kBF16 ? DType::kBF16 : DType::kF32, 2));
  RETURN_IF_ERROR(CheckSameShape("AddRmsNorm", "h", h, "residual", r));
  RETURN_IF_ERROR(CheckSameShape("AddRmsNorm", "h", h, "y", y));
  RETURN_IF_ERROR(CheckGroups("AddRmsNorm", h, p.group));
  RETURN_IF_ERROR(CheckNormWeight(ctx, "AddRmsNorm", "weight", w, p.group));
  switch (ctx.device) {
    case Device::kCpu:
      RETURN_IF_ERROR(cpu::Add(ctx, h, r, h));
      return CpuIntoBf16(ctx, y,
                         [&](const TensorView& out) { return cpu::RmsNorm(ctx, h, w, p, out); });
    case Device::kCuda:
      return cuda::AddRmsNorm(ctx, h, r, w, p, y);
  }
  return absl::InternalError("unknown device");
}

absl::Status LayerNorm(const ExecContext& ctx, const TensorView& x, const TensorView& w,
                       const TensorView& b, const NormParams& p, const TensorView& y) {
  RETURN_IF_ERROR(CheckXY(ctx, "LayerNorm", x, p.group, y));
  for (const auto& [name, t] : {std::pair{"weight", &w}, {"bias", &b}}) {
    if (t->empty()) continue;
    RETURN_IF_ERROR(CheckView(ctx, "LayerNorm", name, *t, DType::kF32, -1));
    if (t->numel() != p.group && t->numel() != x.dim(1)) {
      return absl::InvalidArgumentError(absl::StrCat("LayerNorm: ", name, " must have ", p.group,
                                                     " or ", x.dim(1), " values, got ",
                                                     t->DebugString()));
    }
  }
  switch (ctx.device) {
    case Device::kCpu:
      return cpu::LayerNorm(ctx, x, w, b, p, y);
    case Device::kCuda:
      return cuda::LayerNorm(ctx, x, w, b, p, y);
  }
  return absl::InternalError("unknown device");
}

absl::Status GatedRmsNorm(const ExecContext& ctx, const TensorView& x, const TensorView& gate,
                          const TensorView& w, const NormParams& p, Activation act,
                          const TensorView& y) {
  RETURN_IF_ERROR(CheckXY(ctx, "GatedRmsNorm", x, p.group, y, /*bf16_y=*/true));
  RETURN_IF_ERROR(CheckNormWeight(ctx, "GatedRmsNorm", "weight", w, p.group));
  RETURN_IF_ERROR(CheckView(ctx, "GatedRmsNorm", "gate", gate, DType::kF32, 2));
  RETURN_IF_ERROR(CheckSameShape("GatedRmsNorm", "x", x, "gate", gate));
  switch (ctx.device) {
    case Device::kCpu:
      return CpuIntoBf16(ctx, y, [&](const TensorView& out) {
        return cpu::GatedRmsNorm(ctx, x, gate, w, p, act, out);
      });
    case Device::kCuda:
      return cuda::GatedRmsNorm(ctx, x, gate, w, p, act, y);
  }
  return absl::InternalError("unknown device");
}

absl::Status L2Normalize(const ExecContext& ctx, const TensorView& x, int64_t group, float eps,
                         const TensorView& y) {
  RETURN_IF_ERROR(CheckXY(ctx, "L2Normalize", x, group, y));
  switch (ctx.device) {
    case Device::kCpu:
      return cpu::L2Normalize(ctx, x, group, eps, y);
    case Device::kCuda:
      return cuda::L2Normalize(ctx, x, group, eps, y);
  }
  return absl::InternalError("unknown device");
}

absl::Status SumNormalize(const ExecContext& ctx, const TensorView& x, int64_t group, float eps,
                          const TensorView& y) {
  RETURN_IF_ERROR(CheckXY(ctx, "SumNormalize", x, group, y));
  switch (ctx.device) {
    case Device::kCpu:
      return cpu::SumNormalize(ctx, x, group, eps, y);
    case Device::kCuda:
      return cuda::SumNormalize(ctx, x, group, eps, y);
  }
  return absl::InternalError("unknown device");
}

}  // namespace linfer
