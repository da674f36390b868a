// RWKV-7 ops: checks and dispatch.
#include "kernels/rwkv7.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/check.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/ops.h"

namespace linfer {
namespace {

// Every view is a 2-D f32 view of `like`'s shape.
absl::Status CheckAll(const ExecContext& ctx, absl::string_view op, const TensorView& like,
                      std::initializer_list<std::pair<const char*, const TensorView*>> views) {
  for (const auto& [name, t] : views) {
    RETURN_IF_ERROR(CheckView(ctx, op, name, *t, DType::kF32, 2));
    RETURN_IF_ERROR(CheckSameShape(op, "the first input", like, name, *t));
  }
  return absl::OkStatus();
}

// `t` is a 1-D-like f32 vector of n values.
absl::Status CheckVector(const ExecContext& ctx, absl::string_view op, absl::string_view name,
                         const TensorView& t, int64_t n) {
  RETURN_IF_ERROR(CheckView(ctx, op, name, t, DType::kF32, -1));
  RETURN_IF_ERROR(CheckContiguous(op, name, t));
  if (t.numel() != n) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": ", name, " ", t.DebugString(), " must have ", n, " values"));
  }
  return absl::OkStatus();
}

// Every segment's slot indexes `state` and the segments cover the rows of `x`.
absl::Status CheckSlots(absl::string_view op, const Segments& segs, const TensorView& x,
                        const TensorView& state) {
  if (segs.total_tokens() != x.dim(0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": segments cover ", segs.total_tokens(), " rows, x has ", x.dim(0)));
  }
  for (const Segment& s : segs.host) {
    if (s.slot < 0 || s.slot >= state.dim(0)) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": slot ", s.slot, " outside the state ", state.DebugString()));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status TokenShift(const ExecContext& ctx, const TensorView& x, const Segments& segs,
                        const TensorView& state, const TensorView& delta) {
  RETURN_IF_ERROR(CheckAll(ctx, "TokenShift", x, {{"x", &x}, {"delta", &delta}}));
  RETURN_IF_ERROR(CheckSegmentTable(ctx, "TokenShift", segs));
  RETURN_IF_ERROR(CheckView(ctx, "TokenShift", "state", state, DType::kF32, 2));
  RETURN_IF_ERROR(CheckContiguous("TokenShift", "state", state));
  if (state.dim(1) != x.dim(1) || x.raw() == delta.raw()) {
    return absl::InvalidArgumentError(absl::StrCat("TokenShift: state ", state.DebugString(),
                                                   " does not match x ", x.DebugString(),
                                                   ", or delta aliases x"));
  }
  RETURN_IF_ERROR(CheckSlots("TokenShift", segs, x, state));
  switch (ctx.device) {
    case Device::kCpu:
      return cpu::TokenShift(ctx, x, segs, state, delta);
    case Device::kCuda:
      return cuda::TokenShift(ctx, x, segs, state, delta);
  }
  return absl::InternalError("unknown device");
}

absl::Status MixRows(const ExecContext& ctx, const TensorView& x, const TensorView& d,
                     const TensorView& m, const TensorView& y) {
  RETURN_IF_ERROR(CheckAll(ctx, "MixRows", x, {{"x", &x}, {"d", &d}, {"y", &y}}));
  RETURN_IF_ERROR(CheckVector(ctx, "MixRows", "m", m, x.dim(1)));
  switch (ctx.device) {
    case Device::kCpu:
      return cpu::MixRows(ctx, x, d, m, y);
    case Device::kCuda:
      return cuda::MixRows(ctx, x, d, m, y);
  }
  return absl::InternalError("unknown device");
}

absl::Status Rwkv7Keys(const ExecContext& ctx, const TensorView& k, const TensorView& a,
                       const TensorView& k_k, const TensorView& k_a, int64_t head_dim,
                       bool fused_norm, const TensorView& kk, const TensorView& k_out) {
  RETURN_IF_ERROR(
      CheckAll(ctx, "Rwkv7Keys", k, {{"k", &k}, {"a", &a}, {"kk", &kk}, {"k_out", &k_out}}));
  RETURN_IF_ERROR(CheckGroups("Rwkv7Keys", k, head_dim));
  RETURN_IF_ERROR(CheckVector(ctx, "Rwkv7Keys", "k_k", k_k, k.dim(1)));
  RETURN_IF_ERROR(CheckVector(ctx, "Rwkv7Keys", "k_a", k_a, k.dim(1)));
  if (kk.raw() == k.raw() || kk.raw() == a.raw()) {
    return absl::InvalidArgumentError("Rwkv7Keys: kk may not alias k or a");
  }
  switch (ctx.device) {
    case Device::kCpu:
      return cpu::Rwkv7Keys(ctx, k, a, k_k, k_a, head_dim, fused_norm, kk, k_out);
    case Device::kCuda:
      return cuda::Rwkv7Keys(ctx, k, a, k_k, k_a, head_dim, fused_norm, kk, k_out);
  }
  return absl::InternalError("unknown device");
}

absl::Status Rwkv7ValueResidual(const ExecContext& ctx, const TensorView& v,
                                const TensorView& v_first, const TensorView& z,
                                const TensorView& y) {
  RETURN_IF_ERROR(CheckAll(ctx, "Rwkv7ValueResidual", v,
                           {{"v", &v}, {"v_first", &v_first}, {"z", &z}, {"y", &y}}));
  switch (ctx.device) {
    case Device::kCpu:
      return cpu::Rwkv7ValueResidual(ctx, v, v_first, z, y);
    case Device::kCuda:
      return cuda::Rwkv7ValueResidual(ctx, v, v_first, z, y);
  }
  return absl::InternalError("unknown device");
}

absl::Status Rwkv7Bonus(const ExecContext& ctx, const TensorView& o, const TensorView& r,
                        const TensorView& k, const TensorView& r_k, const TensorView& v,
                        const TensorView& g, int64_t heads, const TensorView& y) {
  RETURN_IF_ERROR(CheckAll(ctx, "Rwkv7Bonus", o, {{"o", &o}, {"v", &v}, {"g", &g}, {"y", &y}}));
  RETURN_IF_ERROR(CheckAll(ctx, "Rwkv7Bonus", r, {{"r", &r}, {"k", &k}}));
  if (heads <= 0 || r.dim(1) % heads != 0 || o.dim(1) % heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat("Rwkv7Bonus: ", heads, " heads do not divide r ",
                                                   r.DebugString(), " and o ", o.DebugString()));
  }
  RETURN_IF_ERROR(CheckVector(ctx, "Rwkv7Bonus", "r_k", r_k, r.dim(1)));
  if (r.dim(0) != o.dim(0)) {
    return absl::InvalidArgumentError(absl::StrCat("Rwkv7Bonus: r ", r.DebugString(), " and o ",
                                                   o.DebugString(), " differ in rows"));
  }
  switch (ctx.device) {
    case Device::kCpu:
      return cpu::Rwkv7Bonus(ctx, o, r, k, r_k, v, g, heads, y);
    case Device::kCuda:
      return cuda::Rwkv7Bonus(ctx, o, r, k, r_k, v, g, heads, y);
  }
  return absl::InternalError("unknown device");
}

absl::Status Rwkv7Recurrence(const ExecContext& ctx, const Rwkv7Inputs& in, const Segments& segs,
                             const TensorView& state, const RecurrenceOptions& options,
                             const TensorView& o) {
  constexpr absl::string_view kOp = "Rwkv7Recurrence";
  RETURN_IF_ERROR(CheckAll(
      ctx, kOp, in.r, {{"r", &in.r}, {"w", &in.w}, {"k", &in.k}, {"kk", &in.kk}, {"a", &in.a}}));
  RETURN_IF_ERROR(CheckAll(ctx, kOp, in.v, {{"v", &in.v}, {"o", &o}}));
  RETURN_IF_ERROR(CheckSegmentTable(ctx, kOp, segs));
  RETURN_IF_ERROR(CheckView(ctx, kOp, "state", state, DType::kF32, 4));
  RETURN_IF_ERROR(CheckContiguous(kOp, "state", state));
  const int64_t heads = state.dim(1), dk = state.dim(2), dv = state.dim(3);
  if (in.r.dim(1) != heads * dk || in.v.dim(1) != heads * dv || in.v.dim(0) != in.r.dim(0)) {
    return absl::InvalidArgumentError(absl::StrCat(kOp, ": r ", in.r.DebugString(), " / v ",
                                                   in.v.DebugString(), " do not match the state ",
                                                   state.DebugString()));
  }
  RETURN_IF_ERROR(CheckSlots(kOp, segs, in.r, state));
  switch (ctx.device) {
    case Device::kCpu:
      return cpu::Rwkv7Recurrence(ctx, in, segs, state, options, o);
    case Device::kCuda:
      return cuda::Rwkv7Recurrence(ctx, in, segs, state, options, o);
  }
  return absl::InternalError("unknown device");
}

}  // namespace linfer
