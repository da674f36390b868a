// Mixture-of-experts ops: checks and dispatch.
#include "kernels/moe.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/check.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/ops.h"
#include "kernels/gemm.h"

namespace linfer {
namespace {

absl::Status Bad(absl::string_view op, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(op, ": ", what));
}

// idx I32 [T, k] and weights F32 [T, k] with 1 ≤ k ≤ min(E, kMaxMoeTopK).
absl::Status CheckRouting(const ExecContext& ctx, absl::string_view op, const TensorView& idx,
                          const TensorView& weights, int64_t rows, int64_t experts) {
  RETURN_IF_ERROR(CheckView(ctx, op, "idx", idx, DType::kI32, 2));
  RETURN_IF_ERROR(CheckView(ctx, op, "weights", weights, DType::kF32, 2));
  RETURN_IF_ERROR(CheckContiguous(op, "idx", idx));
  RETURN_IF_ERROR(CheckContiguous(op, "weights", weights));
  RETURN_IF_ERROR(CheckSameShape(op, "idx", idx, "weights", weights));
  const int64_t k = idx.dim(1);
  if (idx.dim(0) != rows || k < 1 || k > experts || k > kMaxMoeTopK) {
    return Bad(op, absl::StrCat("idx ", idx.DebugString(), " must be [", rows, ", k] with 1 ≤ k ≤ ",
                                std::min(experts, kMaxMoeTopK)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status MoeSupported(Device device, int64_t d, int64_t inter) {
  constexpr int64_t kMaxCudaInter = 12288, kMaxCudaHidden = 8 * 65535;
  if (device == Device::kCuda && (inter > kMaxCudaInter || d > kMaxCudaHidden)) {
    return absl::UnimplementedError(absl::StrCat(
        "mixture of experts on CUDA: expert width ", inter, " (at most ", kMaxCudaInter,
        ") over hidden size ", d, " (at most ", kMaxCudaHidden, ") is not supported"));
  }
  return absl::OkStatus();
}

absl::Status MoeRoute(const ExecContext& ctx, const TensorView& logits, const TensorView& idx,
                      const TensorView& weights, bool normalize) {
  RETURN_IF_ERROR(CheckView(ctx, "MoeRoute", "logits", logits, DType::kF32, 2));
  const int64_t experts = logits.dim(1);
  if (experts < 1 || experts > kMaxMoeExperts) {
    return Bad("MoeRoute", absl::StrCat("logits ", logits.DebugString(), " must have 1 to ",
                                        kMaxMoeExperts, " experts"));
  }
  RETURN_IF_ERROR(CheckRouting(ctx, "MoeRoute", idx, weights, logits.dim(0), experts));
  if (logits.dim(0) == 0) return absl::OkStatus();
  switch (ctx.device) {
    case Device::kCpu:
      return cpu::MoeRoute(ctx, logits, idx, weights, normalize);
    case Device::kCuda:
      return cuda::MoeRoute(ctx, logits, idx, weights, normalize);
  }
  return absl::InternalError("unknown device");
}

absl::Status MoeExperts(const ExecContext& ctx, const TensorView& x, const TensorView& idx,
                        const TensorView& weights, const TensorView& gate_up,
                        const TensorView& down, const MoeShared* shared, const TensorView& y,
                        bool accumulate) {
  constexpr absl::string_view kOp = "MoeExperts";
  RETURN_IF_ERROR(CheckView(ctx, kOp, "x", x, DType::kF32, 2));
  RETURN_IF_ERROR(CheckView(ctx, kOp, "y", y, DType::kF32, 2));
  RETURN_IF_ERROR(CheckSameShape(kOp, "x", x, "y", y));
  if (Overlap(x, y)) return Bad(kOp, "x and y overlap");
  for (const auto& [name, w] : {std::pair{"gate_up", gate_up}, {"down", down}}) {
    RETURN_IF_ERROR(CheckMatrixDType(ctx, kOp, name, w));
    RETURN_IF_ERROR(CheckView(ctx, kOp, name, w, w.dtype(), 3));
    RETURN_IF_ERROR(CheckContiguous(kOp, name, w));
  }
  const int64_t t = x.dim(0), d = x.dim(1), experts = gate_up.dim(0), inter = down.dim(2);
  if (gate_up.dim(1) != 2 * inter || gate_up.dim(2) != d || down.dim(0) != experts ||
      down.dim(1) != d || inter < 1 || experts > kMaxMoeExperts ||
      down.dtype() != gate_up.dtype()) {
    return Bad(kOp,
               absl::StrCat("gate_up ", gate_up.DebugString(), " and down ", down.DebugString(),
                            " must be [E, 2I, ", d, "] and [E, ", d, ", I] of one dtype"));
  }
  RETURN_IF_ERROR(CheckRouting(ctx, kOp, idx, weights, t, experts));
  RETURN_IF_ERROR(MoeSupported(ctx.device, d, inter));
  if (shared != nullptr) {
    RETURN_IF_ERROR(CheckView(ctx, kOp, "shared.out", shared->out, DType::kF32, 2));
    RETURN_IF_ERROR(CheckView(ctx, kOp, "shared.gate", shared->gate, DType::kF32, 2));
    RETURN_IF_ERROR(CheckSameShape(kOp, "shared.out", shared->out, "y", y));
    if (shared->gate.dim(0) != t || shared->gate.dim(1) != 1) {
      return Bad(kOp,
                 absl::StrCat("shared.gate ", shared->gate.DebugString(), " must be [", t, ", 1]"));
    }
  }
  if (ctx.device == Device::kCpu) {  // ids readable here (CUDA makes a NaN row of a bad one)
    const int32_t* ids = idx.data<const int32_t>();
    for (int64_t p = 0; p < idx.numel(); ++p) {
      if (ids[p] < 0 || ids[p] >= experts) {
        return Bad(kOp, absl::StrCat("idx[", p / idx.dim(1), ", ", p % idx.dim(1), "] = ", ids[p],
                                     " is not an expert in [0, ", experts, ")"));
      }
    }
  }
  if (d == 0) return absl::OkStatus();  // y is [T, 0]
  for (int64_t t0 = 0; t0 < t; t0 += kMoePassTokens) {
    const int64_t n = std::min(kMoePassTokens, t - t0);
    MoeShared part;
    if (shared != nullptr) part = {shared->out.Rows(t0, n), shared->gate.Rows(t0, n)};
    const TensorView xs = x.Rows(t0, n), is = idx.Rows(t0, n), ws = weights.Rows(t0, n);
    const TensorView ys = y.Rows(t0, n);
    const MoeShared* sh = shared != nullptr ? &part : nullptr;
    switch (ctx.device) {
      case Device::kCpu:
        RETURN_IF_ERROR(cpu::MoeExperts(ctx, xs, is, ws, gate_up, down, sh, ys, accumulate));
        break;
      case Device::kCuda:
        RETURN_IF_ERROR(cuda::MoeExperts(ctx, xs, is, ws, gate_up, down, sh, ys, accumulate));
        break;
    }
  }
  return absl::OkStatus();
}

}  // namespace linfer
