// CPU twins of the memory moves: memcpy/memset, row by row for strided views.
#include <cstring>

#include "kernels/cpu/ops.h"

namespace linfer::cpu {
namespace {

// Calls fn(row_pointer, row_bytes) for each leading-dimension row of `t` (one call when
// contiguous).
template <typename Fn>
void ForEachRowBytes(const TensorView& t, Fn&& fn) {
  const size_t esize = DTypeSize(t.dtype());
  if (t.contiguous() || t.rank() < 2) {
    fn(static_cast<char*>(t.raw()), t.nbytes(), int64_t{0});
    return;
  }
  const size_t row_bytes = t.nbytes() / static_cast<size_t>(t.dim(0));
  for (int64_t r = 0; r < t.dim(0); ++r) {
    fn(static_cast<char*>(t.raw()) + r * t.row_stride() * esize, row_bytes, r);
  }
}

}  // namespace

void ConvertRows(const TensorView& src, const TensorView& dst) {
  for (int64_t r = 0; r < src.dim(0); ++r) {
    const int64_t n = src.dim(1);
    if (src.dtype() == DType::kF32) {
      const float* s = src.data<const float>() + r * src.row_stride();
      uint16_t* d = dst.data<uint16_t>() + r * dst.row_stride();
      for (int64_t i = 0; i < n; ++i) d[i] = F32ToBf16(s[i]);
    } else {
      const uint16_t* s = src.data<const uint16_t>() + r * src.row_stride();
      float* d = dst.data<float>() + r * dst.row_stride();
      for (int64_t i = 0; i < n; ++i) d[i] = Bf16ToF32(s[i]);
    }
  }
}

absl::Status Upload(const ExecContext&, const void* host, const TensorView& dst) {
  if (dst.raw() != host) std::memcpy(dst.raw(), host, dst.nbytes());
  return absl::OkStatus();
}

absl::Status Download(const ExecContext&, const TensorView& src, void* host) {
  if (src.raw() != host) std::memcpy(host, src.raw(), src.nbytes());
  return absl::OkStatus();
}

absl::Status CopyTensor(const ExecContext&, const TensorView& src, const TensorView& dst) {
  if (src.contiguous() && dst.contiguous()) {
    if (src.raw() != dst.raw()) std::memmove(dst.raw(), src.raw(), src.nbytes());
    return absl::OkStatus();
  }
  // Row by row (either side may be the strided one).
  const size_t esize = DTypeSize(src.dtype());
  const size_t row_bytes = dst.nbytes() / static_cast<size_t>(dst.dim(0));
  for (int64_t r = 0; r < dst.dim(0); ++r) {
    std::memmove(static_cast<char*>(dst.raw()) + r * dst.row_stride() * esize,
                 static_cast<const char*>(src.raw()) + r * src.row_stride() * esize, row_bytes);
  }
  return absl::OkStatus();
}

absl::Status ZeroTensor(const ExecContext&, const TensorView& dst) {
  ForEachRowBytes(dst, [](char* d, size_t bytes, int64_t) { std::memset(d, 0, bytes); });
  return absl::OkStatus();
}

absl::Status Synchronize(const ExecContext&) { return absl::OkStatus(); }

}  // namespace linfer::cpu
