// Feature maps: checks and dispatch.
#include "kernels/feature_map.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/check.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/ops.h"

namespace linfer {

int FeatureMapExpansion(FeatureMapKind kind) {
  switch (kind) {
    case FeatureMapKind::kDpfp:
      return 8;
    case FeatureMapKind::kHedgehog:
      return 2;
    case FeatureMapKind::kTaylor:
    case FeatureMapKind::kQuadratic:
      return 0;
  }
  return 1;
}

int64_t FeatureMapDim(FeatureMapKind kind, int64_t d) {
  switch (kind) {
    case FeatureMapKind::kTaylor:
      return 1 + d + d * (d + 1) / 2;
    case FeatureMapKind::kQuadratic:
      return d * (d + 1) / 2;
    case FeatureMapKind::kDpfp:
    case FeatureMapKind::kHedgehog:
      break;
  }
  return d * FeatureMapExpansion(kind);
}

absl::Status FeatureMap(const ExecContext& ctx, FeatureMapKind kind, const TensorView& x,
                        const TensorView& y) {
  RETURN_IF_ERROR(CheckView(ctx, "FeatureMap", "x", x, DType::kF32, 2));
  RETURN_IF_ERROR(CheckView(ctx, "FeatureMap", "y", y, DType::kF32, 2));
  if (y.dim(0) != x.dim(0) || y.dim(1) != FeatureMapDim(kind, x.dim(1))) {
    return absl::InvalidArgumentError(absl::StrCat("FeatureMap: x ", x.DebugString(), " needs y [",
                                                   x.dim(0), ", ", FeatureMapDim(kind, x.dim(1)),
                                                   "], got ", y.DebugString()));
  }
  switch (ctx.device) {
    case Device::kCpu:
      return cpu::FeatureMap(ctx, kind, x, y);
    case Device::kCuda:
      return cuda::FeatureMap(ctx, kind, x, y);
  }
  return absl::InternalError("unknown device");
}

}  // namespace linfer
