// Pointwise ops (f32): activations named as in Hugging Face's ACT2FN, SwiGLU, residual add and
// products. All take [M, N] views (row strides allowed); outputs may alias inputs.
#pragma once

#include <cmath>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/context.h"

namespace linfer {

enum class Activation { kIdentity, kSilu, kRelu, kElu, kEluPlusOne, kSigmoid, kTanh, kGelu };

// "swish"/"silu", "relu", "elu", "sigmoid", "tanh", "gelu", "identity"/"linear"/"".
absl::StatusOr<Activation> ParseActivation(absl::string_view name);

// y = act(x).
absl::Status Activate(const ExecContext& ctx, Activation act, const TensorView& x,
                      const TensorView& y);
// out = silu(gate) ⊙ up.
absl::Status SwiGlu(const ExecContext& ctx, const TensorView& gate, const TensorView& up,
                    const TensorView& out);
// out = a + b.
absl::Status Add(const ExecContext& ctx, const TensorView& a, const TensorView& b,
                 const TensorView& out);
// out = a ⊙ act_b(b) (act_b(b) formed as Activate would: the same values as Activate then Mul,
// one pass instead of two — e.g. Qwen3.5 attention's o ⊙ σ(gate)).
absl::Status Mul(const ExecContext& ctx, const TensorView& a, const TensorView& b,
                 const TensorView& out, Activation act_b = Activation::kIdentity);

// Scalar forms, shared by the CPU twins and the CPU reference tests.
inline float Sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
// PyTorch's softplus with threshold 20: x for x > 20.
inline float Softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }
inline float LogSigmoid(float x) {
  return x < 0.0f ? x - std::log1p(std::exp(x)) : -std::log1p(std::exp(-x));
}
inline float Activate(Activation act, float x) {
  switch (act) {
    case Activation::kIdentity:
      return x;
    case Activation::kSilu:
      return x * Sigmoid(x);
    case Activation::kRelu:
      return x > 0.0f ? x : 0.0f;
    case Activation::kElu:
      return x > 0.0f ? x : std::expm1(x);
    case Activation::kEluPlusOne:
      return x > 0.0f ? x + 1.0f : std::exp(x);
    case Activation::kSigmoid:
      return Sigmoid(x);
    case Activation::kTanh:
      return std::tanh(x);
    case Activation::kGelu:
      return 0.5f * x * (1.0f + std::erf(x * 0.70710678118654752f));
  }
  return x;
}

}  // namespace linfer
