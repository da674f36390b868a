// Pointwise ops: parsing, checks and dispatch.
#include "kernels/activation.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/check.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/ops.h"

namespace linfer {
namespace {

absl::Status CheckBinary(const ExecContext& ctx, absl::string_view op, const TensorView& a,
                         const TensorView& b, const TensorView& out) {
  RETURN_IF_ERROR(CheckView(ctx, op, "a", a, DType::kF32, 2));
  RETURN_IF_ERROR(CheckView(ctx, op, "b", b, DType::kF32, 2));
  RETURN_IF_ERROR(CheckView(ctx, op, "out", out, DType::kF32, 2));
  RETURN_IF_ERROR(CheckSameShape(op, "a", a, "b", b));
  return CheckSameShape(op, "a", a, "out", out);
}

}  // namespace

absl::StatusOr<Activation> ParseActivation(absl::string_view name) {
  const std::string n = absl::AsciiStrToLower(name);
  if (n == "swish" || n == "silu") return Activation::kSilu;
  if (n == "relu") return Activation::kRelu;
  if (n == "elu") return Activation::kElu;
  if (n == "sigmoid") return Activation::kSigmoid;
  if (n == "tanh") return Activation::kTanh;
  if (n == "gelu") return Activation::kGelu;
  if (n.empty() || n == "identity" || n == "linear") return Activation::kIdentity;
  return absl::InvalidArgumentError(absl::StrCat("unsupported activation '", name, "'"));
}

absl::Status Activate(const ExecContext& ctx, Activation act, const TensorView& x,
                      const TensorView& y) {
  RETURN_IF_ERROR(CheckView(ctx, "Activate", "x", x, DType::kF32, 2));
  RETURN_IF_ERROR(CheckView(ctx, "Activate", "y", y, DType::kF32, 2));
  RETURN_IF_ERROR(CheckSameShape("Activate", "x", x, "y", y));
  if (act == Activation::kIdentity && x.raw() == y.raw()) return absl::OkStatus();
  switch (ctx.device) {
    case Device::kCpu:
      return cpu::Activate(ctx, act, x, y);
    case Device::kCuda:
      return cuda::Activate(ctx, act, x, y);
  }
  return absl::InternalError("unknown device");
}

absl::Status SwiGlu(const ExecContext& ctx, const TensorView& gate, const TensorView& up,
                    const TensorView& out) {
  RETURN_IF_ERROR(CheckBinary(ctx, "SwiGlu", gate, up, out));
  switch (ctx.device) {
    case Device::kCpu:
      return cpu::SwiGlu(ctx, gate, up, out);
    case Device::kCuda:
      return cuda::SwiGlu(ctx, gate, up, out);
  }
  return absl::InternalError("unknown device");
}

absl::Status Add(const ExecContext& ctx, const TensorView& a, const TensorView& b,
                 const TensorView& out) {
  RETURN_IF_ERROR(CheckBinary(ctx, "Add", a, b, out));
  switch (ctx.device) {
    case Device::kCpu:
      return cpu::Add(ctx, a, b, out);
    case Device::kCuda:
      return cuda::Add(ctx, a, b, out);
  }
  return absl::InternalError("unknown device");
}

absl::Status Mul(const ExecContext& ctx, const TensorView& a, const TensorView& b,
                 const TensorView& out, Activation act_b) {
  RETURN_IF_ERROR(CheckBinary(ctx, "Mul", a, b, out));
  switch (ctx.device) {
    case Device::kCpu:
      return cpu::Mul(ctx, a, b, out, act_b);
    case Device::kCuda:
      return cuda::Mul(ctx, a, b, out, act_b);
  }
  return absl::InternalError("unknown device");
}

}  // namespace linfer
