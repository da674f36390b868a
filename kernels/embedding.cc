// Row gathers: checks and dispatch.
#include "kernels/embedding.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/check.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/ops.h"
#include "kernels/gemm.h"

namespace linfer {

absl::Status Embedding(const ExecContext& ctx, const TensorView& table, const TensorView& tokens,
                       const TensorView& out) {
  RETURN_IF_ERROR(CheckMatrixDType(ctx, "Embedding", "table", table));
  if (ctx.device == Device::kCuda && table.dtype() == DType::kF8E4M3) {  // never loaded so there
    return absl::InvalidArgumentError(absl::StrCat("Embedding: the fp8 table ", table.DebugString(),
                                                   " (CUDA gathers f32 or bf16 rows)"));
  }
  RETURN_IF_ERROR(CheckView(ctx, "Embedding", "table", table, table.dtype(), 2));
  RETURN_IF_ERROR(CheckContiguous("Embedding", "table", table));
  RETURN_IF_ERROR(CheckView(ctx, "Embedding", "tokens", tokens, DType::kI32, 1));
  RETURN_IF_ERROR(CheckView(ctx, "Embedding", "out", out, DType::kF32, 2));
  if (out.dim(0) != tokens.dim(0) || out.dim(1) != table.dim(1)) {
    return absl::InvalidArgumentError(absl::StrCat("Embedding: out ", out.DebugString(), " for ",
                                                   tokens.dim(0), " tokens of ",
                                                   table.DebugString()));
  }
  switch (ctx.device) {
    case Device::kCpu:
      return cpu::Embedding(ctx, table, tokens, out);
    case Device::kCuda:
      return cuda::Embedding(ctx, table, tokens, out);
  }
  return absl::InternalError("unknown device");
}

absl::Status GatherRows(const ExecContext& ctx, const TensorView& x, const TensorView& rows,
                        const TensorView& out) {
  RETURN_IF_ERROR(CheckView(ctx, "GatherRows", "x", x, DType::kF32, 2));
  RETURN_IF_ERROR(CheckView(ctx, "GatherRows", "rows", rows, DType::kI32, 1));
  RETURN_IF_ERROR(CheckView(ctx, "GatherRows", "out", out, DType::kF32, 2));
  if (out.dim(0) != rows.dim(0) || out.dim(1) != x.dim(1)) {
    return absl::InvalidArgumentError(absl::StrCat("GatherRows: out ", out.DebugString(), " for ",
                                                   rows.dim(0), " rows of ", x.DebugString()));
  }
  switch (ctx.device) {
    case Device::kCpu:
      return cpu::GatherRows(ctx, x, rows, out);
    case Device::kCuda:
      return cuda::GatherRows(ctx, x, rows, out);
  }
  return absl::InternalError("unknown device");
}

}  // namespace linfer
