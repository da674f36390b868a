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

absl::Status HeadNormRope(const ExecContext& ctx, const TensorView& x, const TensorView& w,
                          const Segments& segs, const HeadNormRopeParams& p, const TensorView& y) {
  RETURN_IF_ERROR(CheckView(ctx, "HeadNormRope", "x", x, DType::kF32, 2));
  RETURN_IF_ERROR(CheckView(ctx, "HeadNormRope", "y", y, DType::kF32, 2));
  RETURN_IF_ERROR(CheckSegmentTable(ctx, "HeadNormRope", segs));
  const RopeParams& r = p.rope;
  const int64_t stride = p.x_head_stride == 0 ? r.head_dim : p.x_head_stride;
  if (r.heads <= 0 || r.head_dim <= 0 || r.rotary_dim <= 0 || r.rotary_dim % 2 != 0 ||
      r.rotary_dim > r.head_dim || !(r.base > 0) || stride < r.head_dim ||
      p.norm.group != r.head_dim || x.dim(1) < (r.heads - 1) * stride + r.head_dim ||
      y.dim(1) != int64_t{r.heads} * r.head_dim || x.dim(0) != y.dim(0) ||
      segs.total_tokens() != x.dim(0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "HeadNormRope: x ", x.DebugString(), " (heads ", stride, " apart) into y ", y.DebugString(),
        " with ", r.heads, " heads of ", r.head_dim, " (norm group ", p.norm.group, ", rotary ",
        r.rotary_dim, ", base ", r.base, ") over ", segs.total_tokens(), " segment rows"));
  }
  if (x.raw() == y.raw() ? stride != r.head_dim || x.row_stride() != y.row_stride()
                         : Overlap(x, y)) {
    return absl::InvalidArgumentError(
        "HeadNormRope: y overlaps x; y may be x only in place (x's heads head_dim apart, the same "
        "rows)");
  }
  RETURN_IF_ERROR(CheckNormWeight(ctx, "HeadNormRope", "weight", w, r.head_dim));
  const HeadNormRopeParams q{r, p.norm, stride};
  switch (ctx.device) {
    case Device::kCpu:
      return cpu::HeadNormRope(ctx, x, w, segs, q, y);
    case Device::kCuda:
      if (r.head_dim <= cuda::kHeadNormRopeMaxDim) return cuda::HeadNormRope(ctx, x, w, segs, q, y);
      // Wider heads: the two ops themselves (RmsNorm takes them a block each), a norm per head
      // where x's heads are not contiguous.
      if (stride == r.head_dim) {  // x may be wider than its heads
        RETURN_IF_ERROR(RmsNorm(ctx, x.Cols(0, int64_t{r.heads} * r.head_dim), w, p.norm, y));
      } else {
        for (int h = 0; h < r.heads; ++h) {
          RETURN_IF_ERROR(RmsNorm(ctx, x.Cols(h * stride, r.head_dim), w, p.norm,
                                  y.Cols(int64_t{h} * r.head_dim, r.head_dim)));
        }
      }
      return Rope(ctx, y, segs, r);
  }
  return absl::InternalError("unknown device");
}

}  // namespace linfer
