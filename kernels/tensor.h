// Tensor (owning, move-only, RAII, on any device) and TensorView (non-owning): a pointer plus
// dtype, device, a row-major shape and a row stride (elements between consecutive indices of the
// leading dimension; equal to the product of the other dimensions for a contiguous view).
// Kernels take TensorViews; only models and the engine own Tensors.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>

#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace linfer {

enum class Device { kCpu, kCuda };
// kF8E4M3: e4m3fn bytes of a weight kept as its fp8 checkpoint stores it, with f32 scales beside
// it (TensorView::scales); only matmul weights (and embedding tables, on the CPU) have it.
enum class DType { kF32, kBF16, kF16, kI32, kI64, kF64, kF8E4M3 };

size_t DTypeSize(DType dtype);
absl::string_view DTypeName(DType dtype);
absl::string_view DeviceName(Device device);

using Shape = absl::InlinedVector<int64_t, 4>;
std::string ShapeString(absl::Span<const int64_t> shape);
// Number of elements; 1 for a rank-0 shape.
int64_t NumElements(absl::Span<const int64_t> shape);

class TensorView {
 public:
  TensorView() = default;
  TensorView(void* data, DType dtype, const Shape& shape, Device device = Device::kCpu)
      : data_(data), dtype_(dtype), device_(device), shape_(shape), row_stride_(RowElements()) {}

  void* raw() const { return data_; }
  template <typename T>
  T* data() const {
    return static_cast<T*>(data_);
  }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  const Shape& shape() const { return shape_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int i) const { return shape_[i < 0 ? i + rank() : i]; }
  int64_t numel() const { return NumElements(shape_); }
  // Bytes of the elements (a strided view's span is larger).
  size_t nbytes() const { return static_cast<size_t>(numel()) * DTypeSize(dtype_); }
  bool empty() const { return data_ == nullptr; }
  std::string DebugString() const;

  // Elements between consecutive rows (indices of dim 0).
  int64_t row_stride() const { return row_stride_; }
  bool contiguous() const { return row_stride_ == RowElements(); }

  // Rows [begin, begin + count) of the leading dimension (keeps the row stride).
  TensorView Rows(int64_t begin, int64_t count) const;
  // Columns [begin, begin + count) of a 2-D view: a strided view into the same rows.
  TensorView Cols(int64_t begin, int64_t count) const;
  // The same elements with another shape; the view must be contiguous (checked by the caller).
  // A scaled view keeps its scales when the last dimension stays (the scales' order is the rows').
  TensorView Reshaped(const Shape& shape) const;

  // An fp8 weight's scales (kF8E4M3): W[..., r, c] = Q[..., r, c] · scales[..., r, c / bc], the
  // scales f32 and contiguous with one row of ⌈C / bc⌉ per row of the view (a checkpoint's
  // per-block, per-channel or per-tensor scales expanded to every row, so row slices, stacks and
  // picks of a weight carry theirs). Null for other views.
  const float* scales() const { return scales_; }
  // Whether the view carries scales (an empty one's pointer may be null).
  bool has_scales() const { return scale_block_cols_ > 0; }
  int64_t scale_block_cols() const { return scale_block_cols_; }
  int64_t scale_cols() const {
    return scale_block_cols_ > 0 ? (dim(-1) + scale_block_cols_ - 1) / scale_block_cols_ : 0;
  }
  TensorView WithScales(const float* scales, int64_t block_cols) const {
    TensorView v = *this;
    v.scales_ = scales;
    v.scale_block_cols_ = block_cols;
    return v;
  }

 private:
  int64_t RowElements() const {
    int64_t n = 1;
    for (size_t i = 1; i < shape_.size(); ++i) n *= shape_[i];
    return n;
  }
  void* data_ = nullptr;
  DType dtype_ = DType::kF32;
  Device device_ = Device::kCpu;
  Shape shape_;
  int64_t row_stride_ = 0;
  const float* scales_ = nullptr;
  int64_t scale_block_cols_ = 0;
};

class Tensor {
 public:
  Tensor() = default;
  Tensor(Tensor&&) noexcept = default;
  Tensor& operator=(Tensor&&) noexcept = default;
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;

  // Uninitialised storage (64-byte aligned on the CPU, 256 on CUDA). Fails for a negative
  // dimension, a device this build or machine lacks, or when the allocation fails.
  static absl::StatusOr<Tensor> Empty(DType dtype, Shape shape, Device device = Device::kCpu);
  // Zero-filled (CPU: memset; CUDA: a synchronous memset on the default stream, for loading).
  static absl::StatusOr<Tensor> Zeros(DType dtype, Shape shape, Device device = Device::kCpu);

  const TensorView& view() const { return view_; }
  template <typename T>
  T* data() const {
    return view_.data<T>();
  }
  DType dtype() const { return view_.dtype(); }
  Device device() const { return view_.device(); }
  const Shape& shape() const { return view_.shape(); }
  int rank() const { return view_.rank(); }
  int64_t dim(int i) const { return view_.dim(i); }
  int64_t numel() const { return view_.numel(); }
  size_t nbytes() const { return view_.nbytes(); }

  // Same storage, new shape with the same number of elements (a scaled tensor keeps its last
  // dimension).
  absl::Status Reshape(Shape shape);

  // An fp8 weight: `values` (kF8E4M3, rank ≥ 2) with its row-expanded scales (f32, values' shape
  // with the last dimension ⌈C / block_cols⌉; see TensorView::scales), one object owning both.
  // The values hold no NaN byte (0x7F, 0xFF), which the CPU's products do not expect: the
  // loaders that make them (models/fp8.h KeepFp8, QuantizeFp8) refuse or never write one.
  static absl::StatusOr<Tensor> Scaled(Tensor values, Tensor scales, int64_t block_cols);

 private:
  struct Free {
    Free() noexcept : device(Device::kCpu) {}
    explicit Free(Device d) noexcept : device(d) {}
    void operator()(void* p) const;
    Device device;
  };
  std::unique_ptr<void, Free> storage_;
  std::unique_ptr<void, Free> scale_storage_;  // Scaled
  TensorView view_;
};

// Scalar conversions between float and the 16-bit formats (round to nearest even).
float Bf16ToF32(uint16_t bits);
uint16_t F32ToBf16(float value);
float F16ToF32(uint16_t bits);
uint16_t F32ToF16(float value);
// The value of one e4m3fn byte (OCP 8-bit floating point, finite only: sign, 4 exponent bits with
// bias 7, 3 mantissa bits; exponent 0 is subnormal, m/8 · 2⁻⁶; S.1111.111 is NaN; 448 at most).
float E4m3ToF32(uint8_t bits);
// E4m3ToF32 of every byte, as a table.
const std::array<float, 256>& E4m3Values();
// The e4m3fn byte nearest to x (ties to the even byte), saturating at ±448 (±∞ too, as CUDA's
// __NV_SATFINITE conversion); NaN gives 0x7F (as that conversion does, whatever its sign).
uint8_t E4m3FromDouble(double x);
// The same byte for a float, by its bits (what the fp8 KV cache writes: several times faster).
uint8_t F32ToE4m3(float x);

// Converts any contiguous CPU tensor to a new f32 CPU tensor of the same shape (an fp8 weight
// times its scales; an fp8 tensor without scales, the KV cache's, as its values).
absl::StatusOr<Tensor> ToF32(const TensorView& src);
// Converts a contiguous f32 CPU tensor to a new CPU tensor of `dtype` (round to nearest even;
// kF8E4M3 without scales, saturating at ±448: E4m3FromDouble).
absl::StatusOr<Tensor> FromF32(const TensorView& src, DType dtype);

}  // namespace linfer
