// Argument checks shared by the op dispatchers (kernels/*.cc): every error names the op and the
// argument, so a twin never sees a view it was not written for.
#pragma once

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "kernels/context.h"
#include "kernels/segments.h"

namespace linfer {

// `t` is on ctx.device, has `dtype` and `rank` (rank < 0: any), and is non-null unless empty.
absl::Status CheckView(const ExecContext& ctx, absl::string_view op, absl::string_view name,
                       const TensorView& t, DType dtype, int rank);
// a and b have the same shape.
absl::Status CheckSameShape(absl::string_view op, absl::string_view a_name, const TensorView& a,
                            absl::string_view b_name, const TensorView& b);
// t is contiguous (no row stride).
absl::Status CheckContiguous(absl::string_view op, absl::string_view name, const TensorView& t);
// The segment table's device copy, which CUDA kernels read (slots, positions, rows): I64
// [host.size(), 4] on ctx.device. The CPU twins read the host table, so there it may be empty.
absl::Status CheckSegmentTable(const ExecContext& ctx, absl::string_view op, const Segments& segs);
// t.dim(1) is a positive multiple of group.
absl::Status CheckGroups(absl::string_view op, const TensorView& t, int64_t group);
// A norm's weight `name`: empty (none), or f32 on ctx.device with `group` values.
absl::Status CheckNormWeight(const ExecContext& ctx, absl::string_view op, absl::string_view name,
                             const TensorView& w, int64_t group);
// Whether the bytes two views span (first element to last, row strides included; a view of any
// rank is its dim(0) rows of dim(1)·…·dim(n−1) elements, rank 0 one element) intersect.
bool Overlap(const TensorView& a, const TensorView& b);

}  // namespace linfer
