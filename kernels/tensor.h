// Tensor (owning, move-only, RAII) and TensorView (non-owning): a pointer plus dtype, device and
// a row-major contiguous shape. Kernels take TensorViews; only models and the engine own Tensors.
#pragma once

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
enum class DType { kF32, kBF16, kF16 };

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
  TensorView(void* data, DType dtype, Shape shape, Device device = Device::kCpu)
      : data_(data), dtype_(dtype), device_(device), shape_(std::move(shape)) {}

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
  size_t nbytes() const { return static_cast<size_t>(numel()) * DTypeSize(dtype_); }
  std::string DebugString() const;

  // Rows [begin, begin + count) of the leading dimension.
  TensorView Rows(int64_t begin, int64_t count) const;

 private:
  void* data_ = nullptr;
  DType dtype_ = DType::kF32;
  Device device_ = Device::kCpu;
  Shape shape_;
};

class Tensor {
 public:
  Tensor() = default;
  Tensor(Tensor&&) noexcept = default;
  Tensor& operator=(Tensor&&) noexcept = default;
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;

  // Uninitialised storage (64-byte aligned on the CPU). Fails for a negative dimension, an
  // unsupported device or when the allocation fails.
  static absl::StatusOr<Tensor> Empty(DType dtype, Shape shape, Device device = Device::kCpu);
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

  // Same storage, new shape with the same number of elements.
  absl::Status Reshape(Shape shape);

 private:
  struct Free {
    void operator()(void* p) const;
  };
  std::unique_ptr<void, Free> storage_;
  TensorView view_;
};

// Scalar conversions between float and the 16-bit formats (round to nearest even).
float Bf16ToF32(uint16_t bits);
uint16_t F32ToBf16(float value);
float F16ToF32(uint16_t bits);
uint16_t F32ToF16(float value);

// Converts any CPU tensor to a new f32 tensor of the same shape.
absl::StatusOr<Tensor> ToF32(const TensorView& src);

}  // namespace linfer
