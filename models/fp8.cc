// e4m3fn decoding and block-wise dequantization (models/fp8.h).
#include "models/fp8.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <climits>
#include <cmath>
#include <cstring>
#include <system_error>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace linfer {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

std::pair<int64_t, int64_t> Fp8Scheme::Blocks(int64_t rows, int64_t cols) const {
  switch (strategy) {
    case Strategy::kBlock:
      return {block_rows, block_cols};
    case Strategy::kChannel:
      return {1, std::max<int64_t>(cols, 1)};
    case Strategy::kTensor:
    case Strategy::kNone:
      break;
  }
  return {std::max<int64_t>(rows, 1), std::max<int64_t>(cols, 1)};
}

const char* Fp8Scheme::StrategyName() const {
  switch (strategy) {
    case Strategy::kBlock:
      return "block";
    case Strategy::kChannel:
      return "channel";
    case Strategy::kTensor:
      return "tensor";
    case Strategy::kNone:
      break;
  }
  return "none";
}

namespace {

// rows_of(begin, end) over [0, total_rows): large tensors (a 35B model's are up to ~10⁹ values,
// from 2²² of them) split over the machine's threads; threads the system refuses (limits on
// processes) leave their rows to this one.
template <typename F>
void ForRows(int64_t total_rows, int64_t elements, F& rows_of) {
  constexpr int64_t kParallelElements = int64_t{1} << 22;
  const int64_t threads = elements < kParallelElements
                              ? 1
                              : std::clamp<int64_t>(std::thread::hardware_concurrency(), 1,
                                                    std::min<int64_t>(64, total_rows));
  std::vector<std::thread> pool;
  int64_t started = 0;
  for (int64_t t = 1; t < threads; ++t, ++started) {
    try {
      pool.emplace_back(rows_of, total_rows * t / threads, total_rows * (t + 1) / threads);
    } catch (const std::system_error&) {
      break;
    }
  }
  rows_of(0, total_rows / threads);
  rows_of(total_rows * (started + 1) / threads, total_rows);
  for (std::thread& t : pool) t.join();
}

// A weight's geometry in blocks, once its scale tensor has passed the checks.
struct Fp8Layout {
  int64_t rows = 0, cols = 0;    // of one matrix
  int64_t brows = 0, bcols = 0;  // blocks of one matrix
  int64_t total_rows = 0;        // over every matrix
  // The offset of row g's scales (over every matrix: matrix g / rows, block row (g % rows) / br)
  // in a [..., brows, bcols] scale tensor.
  int64_t ScaleRow(int64_t g, int64_t block_rows) const {
    return (g / rows * brows + g % rows / block_rows) * bcols;
  }
};

// The checks both forms share: a matrix (or a stack of them), a scale tiling it by br × bc
// (size-1 dimensions aside), every scale finite.
absl::StatusOr<Fp8Layout> CheckScales(const std::string& name, const Shape& shape,
                                      const std::string& scale_name, const Tensor& scale,
                                      int64_t block_rows, int64_t block_cols) {
  if (shape.size() < 2 || block_rows < 1 || block_cols < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("fp8 tensor '", name, "' of shape ", ShapeString(shape),
                     ": block-wise scales need a matrix (or a stack of them)"));
  }
  const size_t rank = shape.size();
  Fp8Layout l;
  l.rows = shape[rank - 2];
  l.cols = shape[rank - 1];
  l.brows = CeilDiv(l.rows, block_rows);
  l.bcols = CeilDiv(l.cols, block_cols);
  l.total_rows = l.cols == 0 ? 0 : NumElements(shape) / l.cols;
  Shape want(shape.begin(), shape.end() - 2);
  want.push_back(l.brows);
  want.push_back(l.bcols);
  // Dimensions of size 1 do not change the row-major order of the scales: compared without them.
  auto squeezed = [](const Shape& s) {
    Shape out;
    for (int64_t d : s) {
      if (d != 1) out.push_back(d);
    }
    return out;
  };
  if (squeezed(scale.shape()) != squeezed(want)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "scale tensor '", scale_name, "' has shape ", ShapeString(scale.shape()), "; fp8 tensor '",
        name, "' of shape ", ShapeString(shape), " in blocks of ", block_rows, " x ", block_cols,
        " (quantization_config) needs ", ShapeString(want)));
  }
  const float* s = scale.data<const float>();
  for (int64_t i = 0; i < scale.numel(); ++i) {
    if (!std::isfinite(s[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat("scale tensor '", scale_name, "' holds ", s[i], " at element ", i));
    }
  }
  return l;
}

// Every value Q·S (into `w` unless it is null), checked: an fp8 NaN, or a value that overflows
// float once scaled, is an error naming the first such element. Tensors of 2²² values or more are
// split over the machine's threads.
absl::Status ScaleValues(const std::string& name, const uint8_t* q, const Shape& shape,
                         const std::string& scale_name, const float* s, const Fp8Layout& l,
                         int64_t block_rows, int64_t block_cols, float* w) {
  const std::array<float, 256>& table = E4m3Values();
  const int64_t cols = l.cols;
  // Rows [begin, end): their values, and the first element that is an fp8 NaN or overflows float
  // (each row stops at its first; the smallest over all rows is the tensor's first).
  std::atomic<int64_t> first_bad{INT64_MAX};
  // The scales of row g over every matrix: matrix g / rows, its block row (g % rows) / br.
  auto scale_row = [&](int64_t g) { return s + l.ScaleRow(g, block_rows); };
  auto rows_of = [&](int64_t begin, int64_t end) {
    for (int64_t g = begin; g < end; ++g) {
      const float* srow = scale_row(g);
      const int64_t at = g * cols;
      for (int64_t c = 0; c < cols; ++c) {
        const uint8_t b = q[at + c];
        const float v = table[b] * srow[c / block_cols];
        if (!std::isfinite(v)) {  // a NaN byte, or a finite scale too large for its value
          int64_t seen = first_bad.load();
          while (at + c < seen && !first_bad.compare_exchange_weak(seen, at + c)) {
          }
          break;
        }
        if (w != nullptr) w[at + c] = v;
      }
    }
  };
  ForRows(l.total_rows, NumElements(shape), rows_of);
  if (const int64_t bad = first_bad.load(); bad != INT64_MAX) {
    const uint8_t b = q[bad];
    if ((b & 0x7F) == 0x7F) {
      return absl::InvalidArgumentError(
          absl::StrCat("fp8 tensor '", name, "' holds a NaN (byte 0x",
                       absl::Hex(static_cast<unsigned>(b), absl::kZeroPad2), ") at element ", bad));
    }
    const float sv = scale_row(bad / cols)[bad % cols / block_cols];
    return absl::InvalidArgumentError(absl::StrCat("fp8 tensor '", name, "' times its scale ", sv,
                                                   " ('", scale_name,
                                                   "') overflows float at element ", bad));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Tensor> DequantizeFp8(const std::string& name, const uint8_t* q, const Shape& shape,
                                     const std::string& scale_name, const Tensor& scale,
                                     int64_t block_rows, int64_t block_cols) {
  ASSIGN_OR_RETURN(const Fp8Layout l,
                   CheckScales(name, shape, scale_name, scale, block_rows, block_cols));
  ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(DType::kF32, shape));
  RETURN_IF_ERROR(ScaleValues(name, q, shape, scale_name, scale.data<const float>(), l, block_rows,
                              block_cols, out.data<float>()));
  return out;
}

absl::StatusOr<Tensor> KeepFp8(const std::string& name, const uint8_t* q, const Shape& shape,
                               const std::string& scale_name, const Tensor& scale,
                               int64_t block_rows, int64_t block_cols) {
  ASSIGN_OR_RETURN(const Fp8Layout l,
                   CheckScales(name, shape, scale_name, scale, block_rows, block_cols));
  RETURN_IF_ERROR(ScaleValues(name, q, shape, scale_name, scale.data<const float>(), l, block_rows,
                              block_cols, nullptr));
  ASSIGN_OR_RETURN(Tensor values, Tensor::Empty(DType::kF8E4M3, shape));
  if (values.nbytes() > 0) std::memcpy(values.data<void>(), q, values.nbytes());
  Shape scale_shape = shape;
  scale_shape.back() = l.bcols;
  ASSIGN_OR_RETURN(Tensor rows, Tensor::Empty(DType::kF32, scale_shape));
  const float* s = scale.data<const float>();
  float* out = rows.data<float>();
  for (int64_t g = 0; g < l.total_rows; ++g) {  // row g's block row, as in ScaleValues
    std::copy_n(s + l.ScaleRow(g, block_rows), l.bcols, out + g * l.bcols);
  }
  return Tensor::Scaled(std::move(values), std::move(rows), block_cols);
}

bool Fp8KeepsUnquantized(const std::string& name) {
  for (const char* gate :
       {"linear_attn.in_proj_a.weight", "linear_attn.in_proj_b.weight",
        "linear_attn.in_proj_ba.weight", "mlp.gate.weight", "mlp.shared_expert_gate.weight"}) {
    if (absl::EndsWith(name, gate)) return true;
  }
  return false;
}

absl::StatusOr<Tensor> QuantizeFp8(const std::string& name, const Tensor& w, int64_t block_rows,
                                   int64_t block_cols) {
  if (w.dtype() != DType::kF32 || w.device() != Device::kCpu || w.rank() < 2 || block_rows < 1 ||
      block_cols < 1) {
    return absl::InvalidArgumentError(absl::StrCat("QuantizeFp8: tensor '", name, "' is ",
                                                   w.view().DebugString(), " in blocks of ",
                                                   block_rows, " x ", block_cols));
  }
  const int64_t rows = w.dim(-2), cols = w.dim(-1), brows = CeilDiv(rows, block_rows);
  const int64_t bcols = CeilDiv(cols, block_cols);
  const int64_t matrices = NumElements(Shape(w.shape().begin(), w.shape().end() - 2));
  const Fp8Layout layout{rows, cols, brows, bcols, matrices * rows};
  const float* v = w.data<const float>();
  // Per block: S = f32(max |W| / 448), or 1 for a block of zeros (or of values so small that S
  // would round to 0). Block rows over the threads; the first non-finite value is an error.
  std::vector<float> block_scales(static_cast<size_t>(matrices * brows * bcols), 0.0f);
  std::atomic<int64_t> first_bad{INT64_MAX};
  auto block_rows_of = [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {  // block row b % brows of matrix b / brows
      float* srow = block_scales.data() + b * bcols;
      const int64_t r0 = b / brows * rows + b % brows * block_rows;
      const int64_t r1 = b / brows * rows + std::min(rows, (b % brows + 1) * block_rows);
      for (int64_t g = r0; g < r1; ++g) {
        for (int64_t c = 0; c < cols; ++c) {
          const float x = v[g * cols + c];
          if (!std::isfinite(x)) {
            int64_t seen = first_bad.load();
            while (g * cols + c < seen && !first_bad.compare_exchange_weak(seen, g * cols + c)) {
            }
            return;
          }
          srow[c / block_cols] = std::max(srow[c / block_cols], std::abs(x));
        }
      }
      for (int64_t c = 0; c < bcols; ++c) {
        const float s = static_cast<float>(double{srow[c]} / 448.0);
        srow[c] = s > 0 ? s : 1.0f;
      }
    }
  };
  ForRows(matrices * brows, w.numel(), block_rows_of);
  if (const int64_t bad = first_bad.load(); bad != INT64_MAX) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", name, "' holds ", v[bad], " at element ", bad, ": it cannot be quantized"));
  }
  ASSIGN_OR_RETURN(Tensor values, Tensor::Empty(DType::kF8E4M3, w.shape()));
  Shape scale_shape = w.shape();
  scale_shape.back() = bcols;
  ASSIGN_OR_RETURN(Tensor scales, Tensor::Empty(DType::kF32, scale_shape));
  uint8_t* q = values.data<uint8_t>();
  float* out = scales.data<float>();
  auto rows_of = [&](int64_t begin, int64_t end) {
    for (int64_t g = begin; g < end; ++g) {
      const float* srow = block_scales.data() + layout.ScaleRow(g, block_rows);
      std::copy_n(srow, bcols, out + g * bcols);
      for (int64_t c = 0; c < cols; ++c) {
        q[g * cols + c] = E4m3FromDouble(double{v[g * cols + c]} / double{srow[c / block_cols]});
      }
    }
  };
  ForRows(matrices * rows, w.numel(), rows_of);
  return Tensor::Scaled(std::move(values), std::move(scales), block_cols);
}

}  // namespace linfer
