// A batch-invariant GEMM for the CPU: y[i, j] = Σ_k x[i, k]·w[j, k] computed by the same
// instruction sequence for every (i, j) whatever M, the row's index, the tile it falls in or the
// thread that runs it. (OpenBLAS picks kernels, blockings and thread splits by shape, so a row's
// result there depends on how many rows share the call: measured, row 0 of an M=1 call differs
// from row 0 of M=2..64 calls in most output columns.)
//
// Per output element: eight lanes accumulate k ≡ lane (mod 8) with fused multiply-adds in k order,
// the lanes are summed in a fixed tree ((l0+l4)+(l2+l6))+((l1+l5)+(l3+l7)), then the k mod 8 tail
// is added with scalar fused multiply-adds in k order. Tiles of up to 1×12, 2×6 or 4×3 outputs
// share loads; blocks of weight rows stay in L2 while every row tile passes over them.
//
// Weights may be f32, bf16 or f16 (x and y are f32, arithmetic is f32): 16-bit weights are widened
// exactly to f32 as they are loaded (one or two row tiles) or a weight block at a time into an f32
// buffer (more rows), so a 16-bit weight gives the bits its f32 widening would give, and a
// batch-1 decode streams half the bytes. fp8 weights (e4m3fn with a scale per row and block of
// columns, kernels/tensor.h TensorView::scales) are dequantized a weight block at a time into that
// buffer, each value Q·S rounded once in f32 as on load (models/fp8.h DequantizeFp8): the products
// of an fp8 weight kept as stored equal those of its dequantized f32 copy, bit for bit, and a
// decode streams a quarter of the f32 bytes.
#pragma once

#include <cstdint>

namespace linfer::cpu {

enum class WeightFormat { kF32, kBF16, kF16, kF8E4M3 };

// An fp8 weight's scales: `rows` holds ⌈k / block_cols⌉ f32 scales per weight row.
struct WeightScales {
  const float* rows = nullptr;
  int64_t block_cols = 0;
};

// y[m, n] (+)= x[m, k] · w[n, k]ᵀ; x and y rows are ldx / ldy floats apart, w is contiguous with
// elements of `format` (float, uint16_t bits, or e4m3 bytes with `scales`). Runs on the OpenMP
// threads when the work pays for it (the split never changes a result).
void InvariantGemm(const float* x, int64_t ldx, const void* w, WeightFormat format, float* y,
                   int64_t ldy, int64_t m, int64_t n, int64_t k, bool accumulate,
                   WeightScales scales = {});

// dst[r·k + c] = the f32 value of fp8 weight element (r, c), for rows [0, rows) of w: what
// InvariantGemm computes with (exposed for tests: vectorized where the build is). w holds no NaN
// byte (Tensor::Scaled's precondition: the vectorized path would read one as ±480).
void DequantizeFp8Rows(const uint8_t* w, int64_t rows, int64_t k, WeightScales scales, float* dst);

inline void InvariantGemm(const float* x, int64_t ldx, const float* w, float* y, int64_t ldy,
                          int64_t m, int64_t n, int64_t k, bool accumulate) {
  InvariantGemm(x, ldx, w, WeightFormat::kF32, y, ldy, m, n, k, accumulate);
}

// Whether this build's kernel uses AVX2 + FMA (+ F16C) (else a scalar fallback with the same
// results).
bool InvariantGemmIsVectorized();

}  // namespace linfer::cpu
