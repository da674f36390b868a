// fp8 checkpoints: a matmul weight W [..., R, C] is stored as e4m3fn values Q beside a scale
// tensor S [..., ⌈R/br⌉, ⌈C/bc⌉] (any float dtype) for blocks of br × bc, and
//   W[r, c] = Q[r, c] · S[⌊r/br⌋, ⌊c/bc⌋].
// The blocks and the scale's name follow the checkpoint's quantization_config (Fp8Scheme):
//   - `quant_method: "fp8"` with `weight_block_size` [br, bc] (transformers' FineGrainedFP8, as
//     Qwen and DeepSeek publish their -FP8 models): `<name>_scale_inv`;
//   - `quant_method: "fp8"` without it (per-tensor, vLLM's and AutoFP8's older format): one scale
//     a tensor, `weight_scale`;
//   - `quant_method: "compressed-tensors"`, format float-quantized (llm-compressor's FP8 and
//     FP8-dynamic models): `weight_scale` per tensor, per output channel ([R, 1]) or per block.
// e4m3fn (OCP 8-bit floating point, "fn": finite only): a sign bit, 4 exponent bits (bias 7) and
// 3 mantissa bits; exponent 0 is subnormal (m/8 · 2⁻⁶), S.1111.111 is NaN, 448 is the largest
// value (kernels/tensor.h E4m3ToF32). linfer either dequantizes such weights once, on load, to the
// weight dtype it computes with (DequantizeFp8), or keeps them as they are with their scales beside
// them (KeepFp8; the products dequantize as they read them: kernels/cpu/invariant_gemm.h on the
// CPU, kernels/cuda/gemm_fp8.cu and moe.cu on CUDA).
// Other checkpoints' weights can be quantized into that form on load (QuantizeFp8).
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "kernels/tensor.h"

namespace linfer {

// How a checkpoint scales its fp8 tensors.
struct Fp8Scheme {
  enum class Strategy { kNone, kBlock, kChannel, kTensor };
  Strategy strategy = Strategy::kNone;     // kNone: no fp8 tensor is expected
  int64_t block_rows = 0, block_cols = 0;  // kBlock
  std::string scale_suffix;                // appended to the tensor's name: "_scale_inv", "_scale"
  // The blocks of a [..., rows, cols] weight: (br, bc), (1, cols) per channel, (rows, cols) per
  // tensor (at least 1 × 1).
  std::pair<int64_t, int64_t> Blocks(int64_t rows, int64_t cols) const;
  const char* StrategyName() const;  // "block", "channel", "tensor" or "none"
};

// W in f32 with `shape` (rank ≥ 2) from the bytes of Q (`q`, numel(shape) of them) and S in f32
// (`scale`; its shape may leave out or add dimensions of size 1, as per-tensor scales stored as []
// or [1] and per-channel ones as [R] do). Errors name the tensor: a scale whose shape does not
// tile W by br × bc (naming `scale_name` and the shape it needs), a non-finite scale, an fp8 NaN
// in Q, a value that overflows float once scaled. Tensors of 2²² values or more are split over the
// machine's threads.
absl::StatusOr<Tensor> DequantizeFp8(const std::string& name, const uint8_t* q, const Shape& shape,
                                     const std::string& scale_name, const Tensor& scale,
                                     int64_t block_rows, int64_t block_cols);

// The same weight kept as fp8: a Tensor::Scaled of Q's bytes (copied) and S expanded to one row
// of ⌈C/bc⌉ scales per row of W, after the same checks as DequantizeFp8 (so a weight one loads,
// the other does, and the values the products see are DequantizeFp8's, bit for bit).
absl::StatusOr<Tensor> KeepFp8(const std::string& name, const uint8_t* q, const Shape& shape,
                               const std::string& scale_name, const Tensor& scale,
                               int64_t block_rows, int64_t block_cols);

// Quantizing on load (WeightStore::Target::quantize_fp8): blocks of 128 × 128, as Qwen's and
// DeepSeek's fp8 checkpoints; the gate projections those checkpoints keep unquantized (Qwen3.5's
// in_proj_a/b, Qwen3-Next's in_proj_ba, the router, shared_expert_gate) stay as they are. The fla,
// RWKV-7 and Mamba2 families have no published fp8 checkpoints to follow: all their matmul weights
// but the embeddings and the LM head are quantized (their gate and LoRA projections too).
inline constexpr int64_t kFp8QuantizeBlock = 128;
bool Fp8KeepsUnquantized(const std::string& name);

// W (f32 on the CPU, [..., R, C]) quantized on load into the form of Qwen's and DeepSeek's
// block-wise fp8 checkpoints: per block of br × bc a scale S = f32(max |W| / 448) (1 for a block of
// zeros, or one so small that S rounds to 0) and Q = e4m3(W / S), the quotient taken in double.
// Returned in KeepFp8's form. A non-finite value is an error naming the tensor.
absl::StatusOr<Tensor> QuantizeFp8(const std::string& name, const Tensor& w, int64_t block_rows,
                                   int64_t block_cols);

}  // namespace linfer
