// Pointwise activations (CPU).
#include "kernels/activation.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "kernels/cpu/parallel.h"

namespace linfer {

absl::StatusOr<Activation> ParseActivation(absl::string_view name) {
  if (name == "swish" || name == "silu") return Activation::kSilu;
  if (name == "relu") return Activation::kRelu;
  if (name == "elu") return Activation::kElu;
  if (name == "sigmoid") return Activation::kSigmoid;
  if (name == "tanh") return Activation::kTanh;
  if (name == "gelu") return Activation::kGelu;
  if (name == "identity" || name == "linear" || name.empty()) return Activation::kIdentity;
  return absl::InvalidArgumentError(absl::StrCat("unsupported activation '", name, "'"));
}

void ActivateInPlace(Activation act, float* x, int64_t n) {
  if (act == Activation::kIdentity) return;
  cpu::ParallelFor(n, n > (1 << 16), [&](int64_t i) { x[i] = Activate(act, x[i]); });
}

absl::Status SwiGlu(const TensorView& gate, const TensorView& up, const TensorView& out) {
  if (gate.dtype() != DType::kF32 || up.dtype() != DType::kF32 || out.dtype() != DType::kF32) {
    return absl::InvalidArgumentError("SwiGlu needs f32 tensors");
  }
  if (gate.shape() != up.shape() || gate.shape() != out.shape()) {
    return absl::InvalidArgumentError(absl::StrCat("SwiGlu shape mismatch: gate ",
                                                   gate.DebugString(), ", up ", up.DebugString(),
                                                   ", out ", out.DebugString()));
  }
  const float* g = gate.data<const float>();
  const float* u = up.data<const float>();
  float* o = out.data<float>();
  const int64_t n = gate.numel();
  cpu::ParallelFor(n, n > (1 << 16), [&](int64_t i) { o[i] = g[i] * Sigmoid(g[i]) * u[i]; });
  return absl::OkStatus();
}

}  // namespace linfer
