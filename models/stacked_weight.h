// A matmul weight stacked by rows from several checkpoint tensors (WeightStore::LoadPickedRuns):
// y = x · Wᵀ, W = [W₁; W₂; …], so y's columns are each part's projection side by side. Usually one
// tensor and one product. When fp8 parts kept as stored (models/fp8.h KeepFp8) sit beside parts in
// another dtype — Qwen3.5's in_proj_qkv/z (fp8) with in_proj_b/a (bf16), its MoE shared expert's
// gate_proj/up_proj (fp8) with shared_expert_gate (bf16) — the rows come as runs of one dtype each,
// and each run's product writes its own columns of y (same values: a product's output column
// depends on its weight row only).
#pragma once

#include <vector>

#include "absl/status/status.h"
#include "kernels/context.h"
#include "kernels/norm.h"
#include "kernels/tensor.h"

namespace linfer {

class StackedWeight {
 public:
  StackedWeight() = default;
  explicit StackedWeight(std::vector<Tensor> runs) : runs_(std::move(runs)) {}

  int64_t rows() const;
  int64_t num_runs() const { return static_cast<int64_t>(runs_.size()); }
  const TensorView& run(int64_t i) const { return runs_[i].view(); }

  // y [M, rows] (row strides allowed) = x · Wᵀ: kernels/gemm.h Linear over each run.
  absl::Status Linear(const ExecContext& ctx, const TensorView& x, const TensorView& y) const;
  // y = RmsNorm(x; norm_w, p) · Wᵀ: kernels/gemm.h RmsNormLinear on one run; on several, the norm
  // once into scratch, then each run's product.
  absl::Status RmsNormLinear(const ExecContext& ctx, const TensorView& x, const TensorView& norm_w,
                             const NormParams& p, const TensorView& y) const;
  // The dtype x should come in (kernels/gemm.h MatmulInputDType): bf16 only where every run takes
  // it.
  DType InputDType(const ExecContext& ctx) const;
  // Whether RmsNormLinear is one launch for `rows` rows (one run that folds).
  bool FoldsInputNorm(const ExecContext& ctx, int64_t rows) const;

 private:
  std::vector<Tensor> runs_;
};

}  // namespace linfer
