// ShortConv: checks and dispatch.
#include "kernels/short_conv.h"

#include <cstdint>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"
#include "kernels/check.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/ops.h"

namespace linfer {

namespace {

absl::Status CheckConv(const ExecContext& ctx, absl::string_view op, const TensorView& x,
                       const TensorView& w, const Segments& segs, const TensorView& state,
                       const TensorView& y) {
  RETURN_IF_ERROR(CheckView(ctx, op, "x", x, DType::kF32, 2));
  RETURN_IF_ERROR(CheckSegmentTable(ctx, op, segs));
  RETURN_IF_ERROR(CheckView(ctx, op, "y", y, DType::kF32, 2));
  RETURN_IF_ERROR(CheckSameShape(op, "x", x, "y", y));
  RETURN_IF_ERROR(CheckView(ctx, op, "weight", w, DType::kF32, -1));
  RETURN_IF_ERROR(CheckView(ctx, op, "state", state, DType::kF32, 3));
  RETURN_IF_ERROR(CheckContiguous(op, "state", state));
  const int64_t channels = x.dim(1), width = w.rank() > 0 ? w.dim(-1) : 0;
  if (width < 1 || w.numel() != channels * width || state.dim(1) != channels ||
      state.dim(2) != width || segs.total_tokens() != x.dim(0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": weight ", w.DebugString(), " / state ", state.DebugString(), " / x ",
                     x.DebugString(), " do not match (", segs.total_tokens(), " segment rows)"));
  }
  for (const Segment& s : segs.host) {
    if (s.slot < 0 || s.slot >= state.dim(0)) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": slot ", s.slot, " outside the state ", state.DebugString()));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ShortConv(const ExecContext& ctx, const TensorView& x, const TensorView& w,
                       const Segments& segs, const TensorView& state, Activation act,
                       const TensorView& y) {
  return ShortConvs(ctx, {ConvGroup{x, w, state, y}}, segs, act);
}

absl::Status ShortConvs(const ExecContext& ctx, absl::Span<const ConvGroup> groups,
                        const Segments& segs, Activation act) {
  if (groups.empty() || groups.size() > static_cast<size_t>(kMaxConvGroups)) {
    return absl::InvalidArgumentError(
        absl::StrCat("ShortConvs: ", groups.size(), " groups (1 to ", kMaxConvGroups, ")"));
  }
  for (size_t i = 0; i < groups.size(); ++i) {
    const ConvGroup& g = groups[i];
    const std::string op =
        groups.size() == 1 ? std::string("ShortConv") : absl::StrCat("ShortConvs (group ", i, ")");
    RETURN_IF_ERROR(CheckConv(ctx, op, g.x, g.w, segs, g.state, g.y));
  }
  for (size_t i = 0; i < groups.size(); ++i) {  // outputs written while other groups read
    for (size_t j = 0; j < groups.size(); ++j) {
      if (Overlap(groups[i].y, groups[j].x)) {
        return absl::InvalidArgumentError(
            absl::StrCat("ShortConvs: group ", i, "'s output overlaps group ", j, "'s input"));
      }
    }
  }
  switch (ctx.device) {
    case Device::kCpu:
      for (const ConvGroup& g : groups) {
        RETURN_IF_ERROR(cpu::ShortConv(ctx, g.x, g.w, segs, g.state, act, g.y));
      }
      return absl::OkStatus();
    case Device::kCuda:
      return cuda::ShortConvs(ctx, groups, segs, act);
  }
  return absl::InternalError("unknown device");
}

}  // namespace linfer
