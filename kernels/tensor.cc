// Tensor storage, shape helpers and 16-bit float conversions.
#include "kernels/tensor.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "kernels/device_memory.h"

namespace linfer {

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kF32:
    case DType::kI32:
      return 4;
    case DType::kBF16:
    case DType::kF16:
      return 2;
    case DType::kI64:
    case DType::kF64:
      return 8;
    case DType::kF8E4M3:
      return 1;
  }
  return 0;
}

absl::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "F32";
    case DType::kBF16:
      return "BF16";
    case DType::kF16:
      return "F16";
    case DType::kI32:
      return "I32";
    case DType::kI64:
      return "I64";
    case DType::kF64:
      return "F64";
    case DType::kF8E4M3:
      return "F8_E4M3";
  }
  return "?";
}

absl::string_view DeviceName(Device device) {
  switch (device) {
    case Device::kCpu:
      return "cpu";
    case Device::kCuda:
      return "cuda";
  }
  return "?";
}

std::string ShapeString(absl::Span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

int64_t NumElements(absl::Span<const int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string TensorView::DebugString() const {
  return absl::StrCat(DTypeName(dtype_), ShapeString(shape_), "@", DeviceName(device_),
                      has_scales() ? absl::StrCat("×scales/", scale_block_cols_) : "");
}

TensorView TensorView::Rows(int64_t begin, int64_t count) const {
  TensorView v = *this;
  v.shape_[0] = count;
  v.data_ =
      static_cast<char*>(data_) + begin * row_stride_ * static_cast<int64_t>(DTypeSize(dtype_));
  // The scales hold ⌈C/bc⌉ per row of the last dimension: row_stride / C such rows a leading row.
  if (has_scales() && dim(-1) > 0)
    v.scales_ = scales_ + begin * (row_stride_ / dim(-1)) * scale_cols();
  return v;
}

TensorView TensorView::Cols(int64_t begin, int64_t count) const {
  TensorView v = *this;
  v.shape_[1] = count;
  v.data_ = static_cast<char*>(data_) + begin * static_cast<int64_t>(DTypeSize(dtype_));
  v.scales_ = nullptr;  // a column slice of an fp8 weight has no scales of its own: refused by use
  v.scale_block_cols_ = 0;
  return v;
}

TensorView TensorView::Reshaped(const Shape& shape) const {
  TensorView v(data_, dtype_, shape, device_);
  if (has_scales() && !shape.empty() && v.dim(-1) == dim(-1)) {
    v.scales_ = scales_;
    v.scale_block_cols_ = scale_block_cols_;
  }
  return v;
}

void Tensor::Free::operator()(void* p) const { FreeDeviceMemory(device, p); }

absl::StatusOr<Tensor> Tensor::Empty(DType dtype, Shape shape, Device device) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return absl::InvalidArgumentError("negative dimension in " + ShapeString(shape));
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / 8 / d) {
      return absl::InvalidArgumentError("tensor too large: " + ShapeString(shape));
    }
    n *= d;
  }
  Tensor t;
  const size_t bytes = static_cast<size_t>(n) * DTypeSize(dtype);
  if (bytes > 0) {
    absl::StatusOr<void*> p = AllocateDeviceMemory(device, bytes);
    if (!p.ok()) {
      return absl::Status(p.status().code(), absl::StrCat(p.status().message(), " (a tensor ",
                                                          ShapeString(shape), ")"));
    }
    t.storage_ = std::unique_ptr<void, Free>(*p, Free(device));
  }
  t.view_ = TensorView(t.storage_.get(), dtype, std::move(shape), device);
  return t;
}

absl::StatusOr<Tensor> Tensor::Zeros(DType dtype, Shape shape, Device device) {
  absl::StatusOr<Tensor> t = Empty(dtype, std::move(shape), device);
  if (t.ok() && t->nbytes() > 0) {
    absl::Status s = ZeroDeviceMemory(device, t->data<void>(), t->nbytes());
    if (!s.ok()) return s;
  }
  return t;
}

absl::Status Tensor::Reshape(Shape shape) {
  if (NumElements(shape) != numel()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot reshape ", ShapeString(view_.shape()), " to ", ShapeString(shape)));
  }
  if (view_.has_scales() && (shape.empty() || shape.back() != view_.dim(-1))) {
    return absl::InvalidArgumentError(absl::StrCat("cannot reshape the fp8 weight ",
                                                   ShapeString(view_.shape()), " to ",
                                                   ShapeString(shape), ": its rows carry scales"));
  }
  view_ = view_.Reshaped(shape);
  return absl::OkStatus();
}

absl::StatusOr<Tensor> Tensor::Scaled(Tensor values, Tensor scales, int64_t block_cols) {
  Shape want = values.shape();
  if (values.dtype() != DType::kF8E4M3 || values.rank() < 2 || block_cols < 1 ||
      scales.dtype() != DType::kF32 || scales.device() != values.device()) {
    return absl::InvalidArgumentError(absl::StrCat("Tensor::Scaled: ", values.view().DebugString(),
                                                   " with scales ", scales.view().DebugString(),
                                                   " in blocks of ", block_cols, " columns"));
  }
  want.back() = (want.back() + block_cols - 1) / block_cols;
  if (scales.shape() != want) {
    return absl::InvalidArgumentError(
        absl::StrCat("Tensor::Scaled: the scales of ", values.view().DebugString(), " must be ",
                     ShapeString(want), ", got ", ShapeString(scales.shape())));
  }
  Tensor t = std::move(values);
  t.view_ = t.view_.WithScales(scales.data<const float>(), block_cols);
  t.scale_storage_ = std::move(scales.storage_);
  return t;
}

float Bf16ToF32(uint16_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }

uint16_t F32ToBf16(float value) {
  uint32_t u = std::bit_cast<uint32_t>(value);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

float F16ToF32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // Subnormal: normalise.
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      bits = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (mant & 0x3ffu) << 13;
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | mant << 13;
  } else {
    bits = sign | (exp + 127 - 15) << 23 | mant << 13;
  }
  return std::bit_cast<float>(bits);
}

uint16_t F32ToF16(float value) {
  const uint32_t u = std::bit_cast<uint32_t>(value);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // Overflow (rounds to inf).
  if (abs < 0x38800000u) {                        // Subnormal or zero in f16.
    const float f = std::bit_cast<float>(abs);
    const float scaled = f * 16777216.0f;  // 2^24: f16 subnormal unit is 2^-24.
    return sign | static_cast<uint16_t>(std::nearbyint(scaled));
  }
  uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);
  return sign | static_cast<uint16_t>((rounded - (112u << 23)) >> 13);
}

float E4m3ToF32(uint8_t bits) {
  const int exponent = (bits >> 3) & 0xF, mantissa = bits & 7;
  float v;
  if (exponent == 0xF && mantissa == 7) {
    v = std::numeric_limits<float>::quiet_NaN();
  } else if (exponent == 0) {
    v = std::ldexp(static_cast<float>(mantissa) / 8.0f, -6);
  } else {
    v = std::ldexp(1.0f + static_cast<float>(mantissa) / 8.0f, exponent - 7);
  }
  return (bits & 0x80) ? -v : v;
}

const std::array<float, 256>& E4m3Values() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int b = 0; b < 256; ++b) t[b] = E4m3ToF32(static_cast<uint8_t>(b));
    return t;
  }();
  return table;
}

absl::StatusOr<Tensor> FromF32(const TensorView& src, DType dtype) {
  if (src.device() != Device::kCpu || src.dtype() != DType::kF32 || !src.contiguous()) {
    return absl::UnimplementedError("FromF32 needs a contiguous f32 CPU tensor");
  }
  absl::StatusOr<Tensor> out = Tensor::Empty(dtype, src.shape());
  if (!out.ok()) return out.status();
  const float* s = src.data<const float>();
  const int64_t n = src.numel();
  switch (dtype) {
    case DType::kF32:
      if (n > 0) std::memcpy(out->data<void>(), s, n * sizeof(float));
      break;
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) out->data<uint16_t>()[i] = F32ToBf16(s[i]);
      break;
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) out->data<uint16_t>()[i] = F32ToF16(s[i]);
      break;
    case DType::kF8E4M3:  // unscaled (the fp8 KV cache), saturating
      for (int64_t i = 0; i < n; ++i) out->data<uint8_t>()[i] = F32ToE4m3(s[i]);
      break;
    case DType::kI32:
    case DType::kI64:
    case DType::kF64:
      return absl::InvalidArgumentError(
          absl::StrCat("FromF32: ", DTypeName(dtype), " is not a conversion target"));
  }
  return out;
}

uint8_t E4m3FromDouble(double x) {
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  if (std::isnan(x)) return 0x7F;  // as CUDA's conversion: one NaN byte whatever the sign
  const double a = std::min(std::abs(x), 448.0);
  int e = 0;
  // The byte order follows the values: below 2⁻⁶ the bytes are k·2⁻⁹ (k = 0…8, 8 being 2⁻⁶ itself);
  // from there, in the binade [2ᴱ, 2ᴱ⁺¹), byte (E + 6)·8 + r with r = a·2³⁻ᴱ ∈ [8, 16] (16 is the
  // next binade's first byte). The scalings are exact, so nearbyint (ties to even, the default
  // rounding mode) rounds a to the nearest value, ties to the even byte.
  if (a < 0x1p-6) return sign | static_cast<uint8_t>(std::nearbyint(a * 512.0));
  std::frexp(a, &e);  // a = f·2ᵉ, f ∈ [0.5, 1): E = e − 1
  const int binade = e - 1;
  const double r = std::nearbyint(std::ldexp(a, 3 - binade));
  return sign | static_cast<uint8_t>((binade + 6) * 8 + static_cast<int>(r));
}

uint8_t F32ToE4m3(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80);
  const uint32_t u = bits & 0x7fffffffu;
  if (u > 0x7f800000u) return 0x7F;          // NaN
  if (u >= 0x43e00000u) return sign | 0x7E;  // ≥ 448 (and ∞): saturated
  if (u < 0x3c800000u) {  // below 2⁻⁶: k·2⁻⁹, k = 0…8 (×512 is exact)
    return sign | static_cast<uint8_t>(std::nearbyint(std::bit_cast<float>(u) * 512.0f));
  }
  // A normal: the mantissa rounded to 3 bits, ties to even (a carry moves into the exponent), the
  // exponent rebiased from 127 to 7. Below 448 the result stays at most 0x7E.
  const uint32_t r = u + 0x7ffffu + ((u >> 20) & 1u);
  return sign | static_cast<uint8_t>((((r >> 23) - 120u) << 3) | ((r >> 20) & 7u));
}

absl::StatusOr<Tensor> ToF32(const TensorView& src) {
  if (src.device() != Device::kCpu || !src.contiguous()) {
    return absl::UnimplementedError("ToF32 needs a contiguous CPU tensor");
  }
  absl::StatusOr<Tensor> out = Tensor::Empty(DType::kF32, src.shape());
  if (!out.ok()) return out.status();
  float* dst = out->data<float>();
  const int64_t n = src.numel();
  switch (src.dtype()) {
    case DType::kF32:
      if (n > 0) std::memcpy(dst, src.raw(), n * sizeof(float));
      break;
    case DType::kBF16:
    case DType::kF16: {
      // The source may be unaligned (a view into a mapped file): load through memcpy.
      const char* s = static_cast<const char*>(src.raw());
      const bool bf16 = src.dtype() == DType::kBF16;
      for (int64_t i = 0; i < n; ++i) {
        uint16_t bits;
        std::memcpy(&bits, s + 2 * i, 2);
        dst[i] = bf16 ? Bf16ToF32(bits) : F16ToF32(bits);
      }
      break;
    }
    case DType::kF8E4M3: {
      const uint8_t* q = src.data<const uint8_t>();
      if (!src.has_scales()) {  // unscaled values (the fp8 KV cache)
        for (int64_t i = 0; i < n; ++i) dst[i] = E4m3ToF32(q[i]);
        break;
      }
      const int64_t cols = src.dim(-1), sc = src.scale_cols(), bc = src.scale_block_cols();
      for (int64_t i = 0; i < n; ++i) {
        dst[i] = E4m3ToF32(q[i]) * src.scales()[i / cols * sc + i % cols / bc];
      }
      break;
    }
    case DType::kI32:
    case DType::kI64:
    case DType::kF64:
      return absl::InvalidArgumentError(
          absl::StrCat("ToF32: ", DTypeName(src.dtype()), " tensors are not converted"));
  }
  return out;
}

}  // namespace linfer
