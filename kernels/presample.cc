// Presample: checks and dispatch.
#include "kernels/presample.h"

#include <algorithm>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/check.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/ops.h"

namespace linfer {

int MaxPresampleK(Device device, int64_t vocab) {
  const int64_t k = std::min<int64_t>(kMaxPresampleK, vocab);
  if (k < 1) return 0;
  switch (device) {
    case Device::kCpu:
      return static_cast<int>(k);
    case Device::kCuda:
      return static_cast<int>(std::min<int64_t>(k, cuda::MaxPresampleK(vocab)));
  }
  return 0;
}

absl::Status Presample(const ExecContext& ctx, const TensorView& logits, const PresampleOutput& out,
                       const PresampleDraws* draws) {
  constexpr absl::string_view kOp = "Presample";
  RETURN_IF_ERROR(CheckView(ctx, kOp, "logits", logits, DType::kF32, 2));
  RETURN_IF_ERROR(CheckView(ctx, kOp, "top_ids", out.top_ids, DType::kI32, 2));
  RETURN_IF_ERROR(CheckView(ctx, kOp, "top_logits", out.top_logits, DType::kF32, 2));
  RETURN_IF_ERROR(CheckView(ctx, kOp, "argmax", out.argmax, DType::kI32, 1));
  RETURN_IF_ERROR(CheckView(ctx, kOp, "logsumexp", out.logsumexp, DType::kF32, 1));
  for (const auto& [name, t] : {std::pair<const char*, const TensorView*>{"top_ids", &out.top_ids},
                                {"top_logits", &out.top_logits}}) {
    RETURN_IF_ERROR(CheckContiguous(kOp, name, *t));
  }
  const int64_t rows = logits.dim(0), vocab = logits.dim(1), k = out.top_ids.dim(1);
  if (k < 1 || k > kMaxPresampleK || k > vocab || vocab > (int64_t{1} << 31) - 1) {
    return absl::InvalidArgumentError(absl::StrCat("Presample: K = ", k, " must be in [1, ",
                                                   kMaxPresampleK, "] and ≤ the vocabulary of ",
                                                   logits.DebugString()));
  }
  if (out.top_ids.dim(0) != rows || out.top_logits.shape() != out.top_ids.shape() ||
      out.argmax.dim(0) != rows || out.logsumexp.dim(0) != rows) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Presample: outputs top_ids ", out.top_ids.DebugString(), " top_logits ",
        out.top_logits.DebugString(), " argmax ", out.argmax.DebugString(), " logsumexp ",
        out.logsumexp.DebugString(), " do not match ", rows, " rows of K = ", k));
  }
  if (draws != nullptr) {
    for (const auto& [name, t, dtype] :
         {std::tuple<const char*, const TensorView*, DType>{"inv_temperature",
                                                            &draws->inv_temperature, DType::kF32},
          {"uniform_bits", &draws->uniform_bits, DType::kI64},
          {"weight_sum", &draws->weight_sum, DType::kF64},
          {"token", &draws->token, DType::kI32},
          {"logit", &draws->logit, DType::kF32}}) {
      RETURN_IF_ERROR(CheckView(ctx, kOp, name, *t, dtype, 1));
      RETURN_IF_ERROR(CheckContiguous(kOp, name, *t));
      if (t->dim(0) != rows) {
        return absl::InvalidArgumentError(absl::StrCat("Presample: draws.", name, " ",
                                                       t->DebugString(), " needs ", rows,
                                                       " rows, one per row of logits"));
      }
    }
  }
  if (rows == 0) return absl::OkStatus();
  switch (ctx.device) {
    case Device::kCpu:
      return cpu::Presample(ctx, logits, out, draws);
    case Device::kCuda:
      return cuda::Presample(ctx, logits, out, draws);
  }
  return absl::InternalError("unknown device");
}

}  // namespace linfer
