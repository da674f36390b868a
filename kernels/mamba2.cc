// Mamba2 ops: checks and dispatch.
#include "kernels/mamba2.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/check.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/ops.h"

namespace linfer {
namespace {

absl::Status CheckVector(const ExecContext& ctx, absl::string_view op, absl::string_view name,
                         const TensorView& t, int64_t n) {
  RETURN_IF_ERROR(CheckView(ctx, op, name, t, DType::kF32, -1));
  RETURN_IF_ERROR(CheckContiguous(op, name, t));
  if (t.numel() != n) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": ", name, " ", t.DebugString(), " must have ", n, " values"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Mamba2Gates(const ExecContext& ctx, const TensorView& dt, const TensorView& dt_bias,
                         const TensorView& a_log, float lo, float hi, const TensorView& delta,
                         const TensorView& g) {
  RETURN_IF_ERROR(CheckView(ctx, "Mamba2Gates", "dt", dt, DType::kF32, 2));
  RETURN_IF_ERROR(CheckView(ctx, "Mamba2Gates", "delta", delta, DType::kF32, 2));
  RETURN_IF_ERROR(CheckView(ctx, "Mamba2Gates", "g", g, DType::kF32, 2));
  RETURN_IF_ERROR(CheckSameShape("Mamba2Gates", "dt", dt, "delta", delta));
  RETURN_IF_ERROR(CheckSameShape("Mamba2Gates", "dt", dt, "g", g));
  RETURN_IF_ERROR(CheckVector(ctx, "Mamba2Gates", "dt_bias", dt_bias, dt.dim(1)));
  RETURN_IF_ERROR(CheckVector(ctx, "Mamba2Gates", "a_log", a_log, dt.dim(1)));
  if (delta.raw() == g.raw() || !(lo <= hi)) {
    return absl::InvalidArgumentError("Mamba2Gates: delta aliases g, or lo > hi");
  }
  switch (ctx.device) {
    case Device::kCpu:
      return cpu::Mamba2Gates(ctx, dt, dt_bias, a_log, lo, hi, delta, g);
    case Device::kCuda:
      return cuda::Mamba2Gates(ctx, dt, dt_bias, a_log, lo, hi, delta, g);
  }
  return absl::InternalError("unknown device");
}

absl::Status ScaleGroups(const ExecContext& ctx, const TensorView& x, const TensorView& s,
                         bool accumulate, const TensorView& y) {
  RETURN_IF_ERROR(CheckView(ctx, "ScaleGroups", "x", x, DType::kF32, 2));
  RETURN_IF_ERROR(CheckView(ctx, "ScaleGroups", "y", y, DType::kF32, 2));
  RETURN_IF_ERROR(CheckSameShape("ScaleGroups", "x", x, "y", y));
  RETURN_IF_ERROR(CheckView(ctx, "ScaleGroups", "s", s, DType::kF32, -1));
  const bool per_row = s.rank() == 2 && s.dim(0) == x.dim(0) && x.dim(0) != 1;
  const int64_t groups = s.rank() > 0 ? s.dim(-1) : 0;
  if (groups <= 0 || x.dim(1) % groups != 0 || (!per_row && s.numel() != groups) ||
      (!per_row && !s.contiguous())) {
    return absl::InvalidArgumentError(absl::StrCat("ScaleGroups: s ", s.DebugString(),
                                                   " does not divide the columns of x ",
                                                   x.DebugString(), " (per row or constant)"));
  }
  switch (ctx.device) {
    case Device::kCpu:
      return cpu::ScaleGroups(ctx, x, s, accumulate, y);
    case Device::kCuda:
      return cuda::ScaleGroups(ctx, x, s, accumulate, y);
  }
  return absl::InternalError("unknown device");
}

absl::Status BiasActivate(const ExecContext& ctx, const TensorView& x, const TensorView& b,
                          Activation act, const TensorView& y) {
  RETURN_IF_ERROR(CheckView(ctx, "BiasActivate", "x", x, DType::kF32, 2));
  RETURN_IF_ERROR(CheckView(ctx, "BiasActivate", "y", y, DType::kF32, 2));
  RETURN_IF_ERROR(CheckSameShape("BiasActivate", "x", x, "y", y));
  RETURN_IF_ERROR(CheckVector(ctx, "BiasActivate", "b", b, x.dim(1)));
  switch (ctx.device) {
    case Device::kCpu:
      return cpu::BiasActivate(ctx, x, b, act, y);
    case Device::kCuda:
      return cuda::BiasActivate(ctx, x, b, act, y);
  }
  return absl::InternalError("unknown device");
}

}  // namespace linfer
