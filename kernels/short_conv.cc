// ShortConv: checks and dispatch.
#include "kernels/short_conv.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/check.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/ops.h"

namespace linfer {

absl::Status ShortConv(const ExecContext& ctx, const TensorView& x, const TensorView& w,
                       const Segments& segs, const TensorView& state, Activation act,
                       const TensorView& y) {
  RETURN_IF_ERROR(CheckView(ctx, "ShortConv", "x", x, DType::kF32, 2));
  RETURN_IF_ERROR(CheckSegmentTable(ctx, "ShortConv", segs));
  RETURN_IF_ERROR(CheckView(ctx, "ShortConv", "y", y, DType::kF32, 2));
  RETURN_IF_ERROR(CheckSameShape("ShortConv", "x", x, "y", y));
  RETURN_IF_ERROR(CheckView(ctx, "ShortConv", "weight", w, DType::kF32, -1));
  RETURN_IF_ERROR(CheckView(ctx, "ShortConv", "state", state, DType::kF32, 3));
  RETURN_IF_ERROR(CheckContiguous("ShortConv", "state", state));
  const int64_t channels = x.dim(1), width = w.rank() > 0 ? w.dim(-1) : 0;
  if (width < 1 || w.numel() != channels * width || state.dim(1) != channels ||
      state.dim(2) != width || segs.total_tokens() != x.dim(0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ShortConv: weight ", w.DebugString(), " / state ", state.DebugString(), " / x ",
        x.DebugString(), " do not match (", segs.total_tokens(), " segment rows)"));
  }
  for (const Segment& s : segs.host) {
    if (s.slot < 0 || s.slot >= state.dim(0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("ShortConv: slot ", s.slot, " outside the state ", state.DebugString()));
    }
  }
  switch (ctx.device) {
    case Device::kCpu:
      return cpu::ShortConv(ctx, x, w, segs, state, act, y);
    case Device::kCuda:
      return cuda::ShortConv(ctx, x, w, segs, state, act, y);
  }
  return absl::InternalError("unknown device");
}

}  // namespace linfer
