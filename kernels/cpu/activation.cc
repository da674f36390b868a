// Pointwise ops (CPU) over strided rows.
#include "kernels/cpu/ops.h"
#include "kernels/cpu/parallel.h"

namespace linfer::cpu {
namespace {

// fn(i, j) → out[i, j] for an [M, N] view pair/triple; parallel over rows for large inputs.
template <typename Fn>
void ForEachRow(const TensorView& out, Fn&& fn) {
  const int64_t m = out.dim(0);
  ParallelFor(m, out.numel() > (int64_t{1} << 16), [&](int64_t i) { fn(i); });
}

const float* Row(const TensorView& t, int64_t i) {
  return t.data<const float>() + i * t.row_stride();
}
float* MutRow(const TensorView& t, int64_t i) { return t.data<float>() + i * t.row_stride(); }

}  // namespace

absl::Status Activate(const ExecContext&, Activation act, const TensorView& x,
                      const TensorView& y) {
  const int64_t n = x.dim(1);
  ForEachRow(y, [&](int64_t i) {
    const float* xr = Row(x, i);
    float* yr = MutRow(y, i);
    for (int64_t j = 0; j < n; ++j) yr[j] = linfer::Activate(act, xr[j]);
  });
  return absl::OkStatus();
}

absl::Status SwiGlu(const ExecContext&, const TensorView& gate, const TensorView& up,
                    const TensorView& out) {
  const int64_t n = gate.dim(1);
  ForEachRow(out, [&](int64_t i) {
    const float* g = Row(gate, i);
    const float* u = Row(up, i);
    float* o = MutRow(out, i);
    for (int64_t j = 0; j < n; ++j) o[j] = g[j] * Sigmoid(g[j]) * u[j];
  });
  return absl::OkStatus();
}

absl::Status Add(const ExecContext&, const TensorView& a, const TensorView& b,
                 const TensorView& out) {
  const int64_t n = a.dim(1);
  ForEachRow(out, [&](int64_t i) {
    const float* x = Row(a, i);
    const float* y = Row(b, i);
    float* o = MutRow(out, i);
    for (int64_t j = 0; j < n; ++j) o[j] = x[j] + y[j];
  });
  return absl::OkStatus();
}

absl::Status Mul(const ExecContext&, const TensorView& a, const TensorView& b,
                 const TensorView& out, Activation act_b) {
  const int64_t n = a.dim(1);
  ForEachRow(out, [&](int64_t i) {
    const float* x = Row(a, i);
    const float* y = Row(b, i);
    float* o = MutRow(out, i);
    if (act_b == Activation::kIdentity) {
      for (int64_t j = 0; j < n; ++j) o[j] = x[j] * y[j];
    } else {
      for (int64_t j = 0; j < n; ++j) o[j] = x[j] * linfer::Activate(act_b, y[j]);
    }
  });
  return absl::OkStatus();
}

}  // namespace linfer::cpu
