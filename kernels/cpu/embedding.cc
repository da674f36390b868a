// Row gathers (CPU); 16-bit embedding tables are widened exactly to f32, fp8 ones dequantized.
#include <algorithm>

#include "kernels/cpu/invariant_gemm.h"
#include "kernels/cpu/ops.h"

namespace linfer::cpu {

absl::Status Embedding(const ExecContext&, const TensorView& table, const TensorView& tokens,
                       const TensorView& out) {
  const int64_t d = table.dim(1);
  const int32_t* ids = tokens.data<const int32_t>();
  for (int64_t t = 0; t < tokens.dim(0); ++t) {
    const int64_t row = int64_t{ids[t]} * d;
    float* dst = out.data<float>() + t * out.row_stride();
    switch (table.dtype()) {
      case DType::kBF16: {
        const uint16_t* src = table.data<const uint16_t>() + row;
        for (int64_t i = 0; i < d; ++i) dst[i] = Bf16ToF32(src[i]);
        break;
      }
      case DType::kF16: {
        const uint16_t* src = table.data<const uint16_t>() + row;
        for (int64_t i = 0; i < d; ++i) dst[i] = F16ToF32(src[i]);
        break;
      }
      case DType::kF8E4M3:  // the values the products see (invariant_gemm.h)
        DequantizeFp8Rows(
            table.data<const uint8_t>() + row, 1, d,
            {table.scales() + int64_t{ids[t]} * table.scale_cols(), table.scale_block_cols()}, dst);
        break;
      default:
        std::copy_n(table.data<const float>() + row, d, dst);
    }
  }
  return absl::OkStatus();
}

absl::Status GatherRows(const ExecContext&, const TensorView& x, const TensorView& rows,
                        const TensorView& out) {
  const int32_t* r = rows.data<const int32_t>();
  for (int64_t b = 0; b < rows.dim(0); ++b) {
    std::copy_n(x.data<const float>() + int64_t{r[b]} * x.row_stride(), x.dim(1),
                out.data<float>() + b * out.row_stride());
  }
  return absl::OkStatus();
}

}  // namespace linfer::cpu
