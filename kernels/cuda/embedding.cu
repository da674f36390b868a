// Row gathers (kernels/embedding.h): out[t] = table[tokens[t]] (table f32 or bf16, widened to
// f32) and out[b] = x[rows[b]]. Mapping: blockIdx.y = output row, threads over columns
// (coalesced reads of one table row, coalesced writes). Memory-bound.
#include <cuda_bf16.h>

#include <algorithm>
#include <type_traits>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/ops.h"

namespace linfer::cuda {
namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void GatherKernel(const T* src, int64_t src_ld, const int32_t* ids, Mat out,
                             int64_t cols) {
  PdlEnter();
  const int64_t r = blockIdx.y;
  const T* row = src + int64_t{ids[r]} * src_ld;
  for (int64_t c = blockIdx.x * int64_t{kThreads} + threadIdx.x; c < cols;
       c += int64_t{gridDim.x} * kThreads) {
    if constexpr (std::is_same_v<T, __nv_bfloat16>) {
      out(r, c) = __bfloat162float(row[c]);
    } else {
      out(r, c) = row[c];
    }
  }
}

template <typename T>
absl::Status Gather(const ExecContext& ctx, const T* src, int64_t src_ld, const TensorView& ids,
                    const TensorView& out) {
  const int64_t rows = out.dim(0), cols = out.dim(1);
  if (rows == 0 || cols == 0) return absl::OkStatus();
  if (rows > 65535 * int64_t{1024}) return absl::InvalidArgumentError("too many rows to gather");
  // gridDim.y ≤ 65535: more rows are handled by slicing the launch.
  for (int64_t r0 = 0; r0 < rows; r0 += 65535) {
    const int64_t n = Min64(65535, rows - r0);
    Mat o = AsMat(out);
    o.p += r0 * o.ld;
    LaunchKernel(GatherKernel<T>, dim3(GridFor(cols, kThreads, 64), static_cast<unsigned>(n)),
                 kThreads, 0, Stream(ctx), src, src_ld, ids.data<const int32_t>() + r0, o, cols);
    RETURN_IF_ERROR(CheckLaunch("GatherKernel"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Embedding(const ExecContext& ctx, const TensorView& table, const TensorView& tokens,
                       const TensorView& out) {
  if (table.dtype() == DType::kBF16) {
    return Gather(ctx, table.data<const __nv_bfloat16>(), table.dim(1), tokens, out);
  }
  return Gather(ctx, table.data<const float>(), table.dim(1), tokens, out);
}

absl::Status GatherRows(const ExecContext& ctx, const TensorView& x, const TensorView& rows,
                        const TensorView& out) {
  return Gather(ctx, x.data<const float>(), x.row_stride(), rows, out);
}

}  // namespace linfer::cuda
