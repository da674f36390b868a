// Dense matrix products: nn.Linear over packed rows.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "kernels/context.h"
#include "kernels/norm.h"

namespace linfer {

// y[M,N] = x[M,K] · w[N,K]ᵀ (+ bias[N]); `accumulate` adds into y. x and y are f32 (row strides
// allowed); w is f32 or bf16, or on the CPU f16 or fp8 with its scales (f32 accumulation); bias
// f32. With bf16 weights
// CUDA rounds x to bf16 first (nearest even: the tensor cores' operand type) where the CPU keeps
// x in f32, so the twins differ by up to ~2⁻⁹ of Σ|x·w| per output. CPU: OpenBLAS sgemm or
// linfer's own kernel (kernels/cpu/gemm.cc says which when).
// The element types a matmul weight or embedding table may have on `device` (see Linear).
bool MatrixDTypeSupported(Device device, DType dtype);
// OK when weight `w` (called `what` in `op`'s errors) has such a type, an fp8 one with its scales.
absl::Status CheckMatrixDType(const ExecContext& ctx, absl::string_view op, absl::string_view what,
                              const TensorView& w);

// OpenBLAS' kernel set as it chose it at load ("Haswell", "SkylakeX", "Prescott", …).
std::string BlasCoreName();
// When OpenBLAS fell back to generic SSE3 kernels on a CPU that runs better ones (virtual machines
// whose CPUID names no model it knows), the OPENBLAS_CORETYPE the CPU's features allow:
// "SkylakeX" (AVX-512 F/BW/DQ/VL) or "Haswell" (AVX2 + FMA); empty otherwise. OpenBLAS reads the
// variable only at load: `linfer` restarts itself once with it (cli/main.cc).
std::string BlasCoreUpgrade();

// x may also be bf16 when w is (its values are then the product's bf16 operand as they are; the
// CPU widens them): what MatmulInputDType asks producers for.
absl::Status Linear(const ExecContext& ctx, const TensorView& x, const TensorView& w,
                    const TensorView& y, const TensorView* bias = nullptr, bool accumulate = false);

// The dtype a producer of Linear's x should write for weights `w` on ctx's device: bf16 on CUDA
// with bf16 weights when LINFER_CUDA_BF16_INPUTS=1 (opt-in until a GPU run has passed and timed
// it) — the norms that feed the projections (RmsNorm, AddRmsNorm, GatedRmsNorm) then write bf16,
// the same values CUDA's conversion pass would make, and that pass (a launch per product) goes —
// else f32. The CPU gets f32 (it keeps x in f32) unless ctx.bf16_matmul_inputs (tests).
DType MatmulInputDType(const ExecContext& ctx, const TensorView& w);

// y = RmsNorm(x; norm_w, p) · wᵀ: a block's input norm folded into the product it feeds. x f32
// [M, K], read only (a residual stream); p.group = K; w and y as Linear's. Where
// RmsNormLinearFolds says so (CUDA's GEMV: 1–4 rows, LINFER_CUDA_GEMV=1) each warp forms its rows'
// mean squares from x and scales x as it streams it: one launch instead of two, the norm's values
// up to its sum's order (then rounded to bf16 as the product's operand). Elsewhere RmsNorm into
// scratch (in MatmulInputDType), then Linear: exactly those two ops.
absl::Status RmsNormLinear(const ExecContext& ctx, const TensorView& x, const TensorView& norm_w,
                           const NormParams& p, const TensorView& w, const TensorView& y);
// Whether RmsNormLinear runs as one launch for `rows` rows and weights w on ctx's device (the
// models fold their norms only then). On the CPU: ctx.fold_input_norms (tests of the plumbing).
bool RmsNormLinearFolds(const ExecContext& ctx, int64_t rows, const TensorView& w);

// y (+)= (silu(gate) ⊙ up) · wᵀ: a SwiGLU MLP's down projection with its activation folded into
// the read of x. gate, up [M, K] f32 (row strides allowed); w, y as Linear's. With bf16 weights on
// CUDA the product is formed where x is rounded to bf16 (the conversion pass, or the GEMV's loads):
// one launch fewer than SwiGlu then Linear, with the same result. Elsewhere it is SwiGlu into
// `gate`, then Linear: gate's contents afterwards are unspecified.
absl::Status SwiGluLinear(const ExecContext& ctx, const TensorView& gate, const TensorView& up,
                          const TensorView& w, const TensorView& y, bool accumulate = false);

}  // namespace linfer
