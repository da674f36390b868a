// RoPE: checks and dispatch.
#include "kernels/rope.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/check.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/ops.h"

namespace linfer {

absl::Status Rope(const ExecContext& ctx, const TensorView& x, const Segments& segs,
                  const RopeParams& p) {
  RETURN_IF_ERROR(CheckView(ctx, "Rope", "x", x, DType::kF32, 2));
  RETURN_IF_ERROR(CheckSegmentTable(ctx, "Rope", segs));
  if (p.heads <= 0 || p.head_dim <= 0 || p.rotary_dim <= 0 || p.rotary_dim % 2 != 0 ||
      p.rotary_dim > p.head_dim || x.dim(1) != int64_t{p.heads} * p.head_dim ||
      segs.total_tokens() != x.dim(0) || !(p.base > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Rope: x ", x.DebugString(), " with ", p.heads, " heads of ", p.head_dim, " (rotary ",
        p.rotary_dim, ", base ", p.base, ") over ", segs.total_tokens(), " segment rows"));
  }
  switch (ctx.device) {
    case Device::kCpu:
      return cpu::Rope(ctx, x, segs, p);
    case Device::kCuda:
      return cuda::Rope(ctx, x, segs, p);
  }
  return absl::InternalError("unknown device");
}

}  // namespace linfer
