// StackedWeight: products over runs of rows (models/stacked_weight.h).
#include "models/stacked_weight.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/gemm.h"

namespace linfer {

int64_t StackedWeight::rows() const {
  int64_t n = 0;
  for (const Tensor& r : runs_) n += r.dim(0);
  return n;
}

absl::Status StackedWeight::Linear(const ExecContext& ctx, const TensorView& x,
                                   const TensorView& y) const {
  if (runs_.size() == 1) return linfer::Linear(ctx, x, runs_.front().view(), y);
  if (y.rank() != 2 || y.dim(1) != rows()) {
    return absl::InvalidArgumentError(
        absl::StrCat("stacked weight of ", rows(), " rows: y ", y.DebugString()));
  }
  int64_t at = 0;
  for (const Tensor& r : runs_) {
    RETURN_IF_ERROR(linfer::Linear(ctx, x, r.view(), y.Cols(at, r.dim(0))));
    at += r.dim(0);
  }
  return absl::OkStatus();
}

absl::Status StackedWeight::RmsNormLinear(const ExecContext& ctx, const TensorView& x,
                                          const TensorView& norm_w, const NormParams& p,
                                          const TensorView& y) const {
  if (runs_.size() == 1) return linfer::RmsNormLinear(ctx, x, norm_w, p, runs_.front().view(), y);
  ScratchScope scope(ctx);
  ASSIGN_OR_RETURN(const TensorView normed, Scratch(ctx, InputDType(ctx), {x.dim(0), x.dim(1)}));
  RETURN_IF_ERROR(RmsNorm(ctx, x, norm_w, p, normed));
  return Linear(ctx, normed, y);
}

DType StackedWeight::InputDType(const ExecContext& ctx) const {
  for (const Tensor& r : runs_) {
    if (MatmulInputDType(ctx, r.view()) != DType::kBF16) return DType::kF32;
  }
  return runs_.empty() ? DType::kF32 : DType::kBF16;
}

bool StackedWeight::FoldsInputNorm(const ExecContext& ctx, int64_t rows) const {
  return runs_.size() == 1 && RmsNormLinearFolds(ctx, rows, runs_.front().view());
}

}  // namespace linfer
