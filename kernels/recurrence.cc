// Recurrence: spec and input validation (head mapping, widths, slots) and dispatch.
#include "kernels/recurrence.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/check.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/ops.h"

namespace linfer {
namespace {

// `t` holds whole heads of `dim` columns that map evenly onto `heads` output heads.
absl::Status CheckHeads(const ExecContext& ctx, absl::string_view name, const TensorView& t,
                        int64_t rows, int64_t dim, int64_t heads) {
  RETURN_IF_ERROR(CheckView(ctx, "Recurrence", name, t, DType::kF32, 2));
  const int64_t h = dim > 0 ? t.dim(1) / dim : 0;
  if (t.dim(0) != rows || h <= 0 || h * dim != t.dim(1) || heads % h != 0) {
    return absl::InvalidArgumentError(absl::StrCat("Recurrence: ", name, " ", t.DebugString(),
                                                   " is not [", rows, ", heads·", dim,
                                                   "] with heads dividing ", heads));
  }
  return absl::OkStatus();
}

absl::Status CheckInputs(const ExecContext& ctx, const RecurrenceSpec& spec,
                         const RecurrenceInputs& in, int64_t t, int64_t heads) {
  RETURN_IF_ERROR(CheckHeads(ctx, "q", in.q, t, spec.dk, heads));
  RETURN_IF_ERROR(CheckHeads(ctx, "k", in.k, t, spec.dk, heads));
  RETURN_IF_ERROR(CheckHeads(ctx, "v", in.v, t, spec.dv, heads));
  if (spec.delta_rule) RETURN_IF_ERROR(CheckHeads(ctx, "beta", in.beta, t, 1, heads));
  switch (spec.decay) {
    case DecayKind::kNone:
      return absl::OkStatus();
    case DecayKind::kVector:
      return CheckHeads(ctx, "g", in.g, t, spec.dk, heads);
    case DecayKind::kScalar:
      if (!in.g.empty()) return CheckHeads(ctx, "g", in.g, t, 1, heads);
      RETURN_IF_ERROR(
          CheckView(ctx, "Recurrence", "head_log_decay", in.head_log_decay, DType::kF32, 1));
      if (in.head_log_decay.dim(0) != heads) {
        return absl::InvalidArgumentError(absl::StrCat("Recurrence: head_log_decay ",
                                                       in.head_log_decay.DebugString(),
                                                       " must have ", heads, " values"));
      }
      return absl::OkStatus();
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateRecurrenceSpec(const RecurrenceSpec& spec) {
  if (spec.dk <= 0 || spec.dv <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("recurrence dims must be positive, got dk=", spec.dk, " dv=", spec.dv));
  }
  if (spec.delta_rule && spec.decay == DecayKind::kVector) {
    return absl::UnimplementedError("the delta rule with a per-key-channel decay");
  }
  if (spec.normalize && (spec.delta_rule || spec.decay != DecayKind::kNone)) {
    return absl::UnimplementedError("the normaliser is only defined for plain linear attention");
  }
  return absl::OkStatus();
}

absl::Status Recurrence(const ExecContext& ctx, const RecurrenceSpec& spec,
                        const RecurrenceInputs& in, const Segments& segs, const TensorView& state,
                        const TensorView& z, const RecurrenceOptions& options,
                        const TensorView& o) {
  RETURN_IF_ERROR(ValidateRecurrenceSpec(spec));
  RETURN_IF_ERROR(CheckSegmentTable(ctx, "Recurrence", segs));
  if (options.chunk_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk size must be ≥ 1, got ", options.chunk_size));
  }
  RETURN_IF_ERROR(CheckView(ctx, "Recurrence", "o", o, DType::kF32, 2));
  const int64_t t = o.dim(0), heads = o.dim(1) / spec.dv;
  if (heads <= 0 || heads * spec.dv != o.dim(1) || segs.total_tokens() != t) {
    return absl::InvalidArgumentError(absl::StrCat("Recurrence: o ", o.DebugString(), " is not [",
                                                   segs.total_tokens(), ", heads·", spec.dv, "]"));
  }
  RETURN_IF_ERROR(CheckInputs(ctx, spec, in, t, heads));
  // bf16 states are a CUDA option (read into f32 registers, rounded once when written back).
  const DType state_dtype =
      ctx.device == Device::kCuda && state.dtype() == DType::kBF16 ? DType::kBF16 : DType::kF32;
  RETURN_IF_ERROR(CheckView(ctx, "Recurrence", "state", state, state_dtype, 4));
  RETURN_IF_ERROR(CheckContiguous("Recurrence", "state", state));
  if (state.dim(1) != heads || state.dim(2) != spec.dk || state.dim(3) != spec.dv) {
    return absl::InvalidArgumentError(absl::StrCat("Recurrence: state ", state.DebugString(),
                                                   " is not [slots, ", heads, ", ", spec.dk, ", ",
                                                   spec.dv, "]"));
  }
  if (spec.normalize) {
    RETURN_IF_ERROR(CheckView(ctx, "Recurrence", "z", z, DType::kF32, 3));
    if (z.dim(0) != state.dim(0) || z.dim(1) != heads || z.dim(2) != spec.dk) {
      return absl::InvalidArgumentError(
          absl::StrCat("Recurrence: z ", z.DebugString(), " does not match ", state.DebugString()));
    }
  }
  for (const Segment& s : segs.host) {
    if (s.slot < 0 || s.slot >= state.dim(0) || s.num_tokens < 1) {
      return absl::InvalidArgumentError(absl::StrCat("Recurrence: segment with slot ", s.slot,
                                                     " and ", s.num_tokens, " tokens for state ",
                                                     state.DebugString()));
    }
  }
  if (t == 0) return absl::OkStatus();
  switch (ctx.device) {
    case Device::kCpu:
      return cpu::Recurrence(ctx, spec, in, segs, state, z, options, o);
    case Device::kCuda:
      return cuda::Recurrence(ctx, spec, in, segs, state, z, options, o);
  }
  return absl::InternalError("unknown device");
}

}  // namespace linfer
