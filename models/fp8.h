// Block-wise fp8 checkpoints (`quantization_config.quant_method: "fp8"`, as Qwen and DeepSeek
// publish them; transformers' FineGrainedFP8): a matmul weight W [..., R, C] is stored as e4m3fn
// values Q beside a scale tensor S [..., ⌈R/br⌉, ⌈C/bc⌉] (`<name>_scale_inv`, any float dtype)
// for blocks of br × bc (`weight_block_size`), and
//   W[r, c] = Q[r, c] · S[⌊r/br⌋, ⌊c/bc⌋].
// e4m3fn (OCP 8-bit floating point, "fn": finite only): a sign bit, 4 exponent bits (bias 7) and
// 3 mantissa bits; exponent 0 is subnormal (m/8 · 2⁻⁶), S.1111.111 is NaN, 448 is the largest
// value. linfer dequantizes such weights once, on load, to the weight dtype it computes with.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "kernels/tensor.h"

namespace linfer {

// The value of one e4m3fn byte (NaN for 0x7F and 0xFF).
float E4m3ToFloat(uint8_t bits);

// W in f32 with `shape` (rank ≥ 2) from the bytes of Q (`q`, numel(shape) of them) and S in f32
// (`scale`). Errors name the tensor: a scale whose shape does not tile W by br × bc (naming
// `scale_name` and the shape it needs), a non-finite scale, an fp8 NaN in Q.
absl::StatusOr<Tensor> DequantizeFp8(const std::string& name, const uint8_t* q, const Shape& shape,
                                     const std::string& scale_name, const Tensor& scale,
                                     int64_t block_rows, int64_t block_cols);

}  // namespace linfer
