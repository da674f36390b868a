// Op argument checks.
#include "kernels/check.h"

#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace linfer {
namespace {

// The bytes [begin, end) a view spans.
std::pair<uintptr_t, uintptr_t> Span(const TensorView& t) {
  const uintptr_t begin = reinterpret_cast<uintptr_t>(t.raw());
  const int64_t n = t.numel();
  if (n == 0) return {begin, begin};
  const int64_t rows = t.rank() == 0 ? 1 : t.dim(0);
  const int64_t last = (rows - 1) * t.row_stride() + n / rows;
  return {begin, begin + static_cast<uintptr_t>(last) * DTypeSize(t.dtype())};
}

}  // namespace

bool Overlap(const TensorView& a, const TensorView& b) {
  const auto [a0, a1] = Span(a);
  const auto [b0, b1] = Span(b);
  return a0 < b1 && b0 < a1;
}

absl::Status CheckView(const ExecContext& ctx, absl::string_view op, absl::string_view name,
                       const TensorView& t, DType dtype, int rank) {
  if (t.device() != ctx.device || t.dtype() != dtype || (rank >= 0 && t.rank() != rank) ||
      (t.raw() == nullptr && t.numel() > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", name, " must be ", DTypeName(dtype),
                                                   rank >= 0 ? absl::StrCat(" rank ", rank) : "",
                                                   " on ", DeviceName(ctx.device), ", got ",
                                                   t.DebugString()));
  }
  for (int64_t d : t.shape()) {
    if (d < 0)
      return absl::InvalidArgumentError(absl::StrCat(op, ": ", name, " ", t.DebugString()));
  }
  return absl::OkStatus();
}

absl::Status CheckSegmentTable(const ExecContext& ctx, absl::string_view op, const Segments& segs) {
  const TensorView& t = segs.device;
  if (ctx.device == Device::kCpu && t.empty()) return absl::OkStatus();
  const int64_t n = static_cast<int64_t>(segs.host.size());
  if (t.empty() || t.device() != ctx.device || t.dtype() != DType::kI64 || t.rank() != 2 ||
      t.dim(0) != n || t.dim(1) != 4) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": the segment table on the device must be ",
                                                   "I64[", n, ", 4] on ", DeviceName(ctx.device),
                                                   ", got ", t.DebugString()));
  }
  return absl::OkStatus();
}

absl::Status CheckSameShape(absl::string_view op, absl::string_view a_name, const TensorView& a,
                            absl::string_view b_name, const TensorView& b) {
  if (a.shape() != b.shape()) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", a_name, " ", a.DebugString(), " and ",
                                                   b_name, " ", b.DebugString(),
                                                   " differ in shape"));
  }
  return absl::OkStatus();
}

absl::Status CheckContiguous(absl::string_view op, absl::string_view name, const TensorView& t) {
  if (!t.contiguous()) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": ", name, " ", t.DebugString(), " must be contiguous"));
  }
  return absl::OkStatus();
}

absl::Status CheckNormWeight(const ExecContext& ctx, absl::string_view op, absl::string_view name,
                             const TensorView& w, int64_t group) {
  if (w.empty()) return absl::OkStatus();
  RETURN_IF_ERROR(CheckView(ctx, op, name, w, DType::kF32, -1));
  if (w.numel() != group) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": ", name, " must have ", group, " values, got ", w.DebugString()));
  }
  return absl::OkStatus();
}

absl::Status CheckGroups(absl::string_view op, const TensorView& t, int64_t group) {
  if (t.rank() != 2 || group <= 0 || t.dim(1) % group != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": group ", group, " does not divide the columns of ", t.DebugString()));
  }
  return absl::OkStatus();
}

}  // namespace linfer
