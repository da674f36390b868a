// Pointwise activations and gates (f32), named as in Hugging Face's ACT2FN where they exist.
#pragma once

#include <cmath>
#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/tensor.h"

namespace linfer {

enum class Activation { kIdentity, kSilu, kRelu, kElu, kEluPlusOne, kSigmoid, kTanh, kGelu };

// "swish"/"silu", "relu", "elu", "sigmoid", "tanh", "gelu", "identity"/"linear"/"".
absl::StatusOr<Activation> ParseActivation(absl::string_view name);

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

// x ← act(x) over n contiguous floats.
void ActivateInPlace(Activation act, float* x, int64_t n);

// out[M,N] = silu(gate) ⊙ up (SwiGLU). All f32, same shape; out may alias gate.
absl::Status SwiGlu(const TensorView& gate, const TensorView& up, const TensorView& out);

}  // namespace linfer
