// Gate ops: checks and dispatch.
#include "kernels/gates.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/check.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/ops.h"

namespace linfer {

absl::Status GdnGates(const ExecContext& ctx, const TensorView& a, const TensorView& b,
                      const TensorView& a_log, const TensorView& dt_bias, float beta_scale,
                      const TensorView& g, const TensorView& beta) {
  constexpr absl::string_view kOp = "GdnGates";
  for (const auto& [name, t] : {std::pair<const char*, const TensorView*>{"a", &a},
                                {"b", &b},
                                {"g", &g},
                                {"beta", &beta}}) {
    RETURN_IF_ERROR(CheckView(ctx, kOp, name, *t, DType::kF32, 2));
    RETURN_IF_ERROR(CheckSameShape(kOp, "a", a, name, *t));
  }
  RETURN_IF_ERROR(CheckView(ctx, kOp, "A_log", a_log, DType::kF32, -1));
  RETURN_IF_ERROR(CheckView(ctx, kOp, "dt_bias", dt_bias, DType::kF32, -1));
  if (a_log.numel() != a.dim(1) || dt_bias.numel() != a.dim(1)) {
    return absl::InvalidArgumentError(absl::StrCat("GdnGates: A_log ", a_log.DebugString(),
                                                   " / dt_bias ", dt_bias.DebugString(),
                                                   " must have ", a.dim(1), " values"));
  }
  switch (ctx.device) {
    case Device::kCpu:
      return cpu::GdnGates(ctx, a, b, a_log, dt_bias, beta_scale, g, beta);
    case Device::kCuda:
      return cuda::GdnGates(ctx, a, b, a_log, dt_bias, beta_scale, g, beta);
  }
  return absl::InternalError("unknown device");
}

absl::Status SigmoidScale(const ExecContext& ctx, const TensorView& x, float scale,
                          const TensorView& y) {
  RETURN_IF_ERROR(CheckView(ctx, "SigmoidScale", "x", x, DType::kF32, 2));
  RETURN_IF_ERROR(CheckView(ctx, "SigmoidScale", "y", y, DType::kF32, 2));
  RETURN_IF_ERROR(CheckSameShape("SigmoidScale", "x", x, "y", y));
  switch (ctx.device) {
    case Device::kCpu:
      return cpu::SigmoidScale(ctx, x, scale, y);
    case Device::kCuda:
      return cuda::SigmoidScale(ctx, x, scale, y);
  }
  return absl::InternalError("unknown device");
}

absl::Status GlaDecay(const ExecContext& ctx, const TensorView& x, float normalizer,
                      float clamp_min, const TensorView& y) {
  RETURN_IF_ERROR(CheckView(ctx, "GlaDecay", "x", x, DType::kF32, 2));
  RETURN_IF_ERROR(CheckView(ctx, "GlaDecay", "y", y, DType::kF32, 2));
  RETURN_IF_ERROR(CheckSameShape("GlaDecay", "x", x, "y", y));
  if (!(normalizer > 0)) {
    return absl::InvalidArgumentError(absl::StrCat("GlaDecay: normalizer ", normalizer));
  }
  switch (ctx.device) {
    case Device::kCpu:
      return cpu::GlaDecay(ctx, x, normalizer, clamp_min, y);
    case Device::kCuda:
      return cuda::GlaDecay(ctx, x, normalizer, clamp_min, y);
  }
  return absl::InternalError("unknown device");
}

absl::Status Fill(const ExecContext& ctx, float value, const TensorView& y) {
  RETURN_IF_ERROR(CheckView(ctx, "Fill", "y", y, DType::kF32, 2));
  switch (ctx.device) {
    case Device::kCpu:
      return cpu::Fill(ctx, value, y);
    case Device::kCuda:
      return cuda::Fill(ctx, value, y);
  }
  return absl::InternalError("unknown device");
}

}  // namespace linfer
