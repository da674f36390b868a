// Recurrence: spec and input validation (head mapping, widths, slots) and dispatch.
#include "kernels/recurrence.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/check.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/ops.h"
#include "kernels/gates.h"
#include "kernels/norm.h"

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

absl::Status CheckGdnPrep(const ExecContext& ctx, const RecurrenceSpec& spec,
                          const RecurrenceInputs& in) {
  if (!spec.delta_rule || spec.decay != DecayKind::kScalar || in.g.empty()) {
    return absl::InvalidArgumentError(
        "Recurrence: GdnPrep needs the delta rule and a scalar decay with g (Gated DeltaNet)");
  }
  const int64_t hg = in.g.dim(1);
  if (in.beta.dim(1) != hg) {
    return absl::InvalidArgumentError(absl::StrCat("Recurrence: GdnPrep needs beta ",
                                                   in.beta.DebugString(), " as wide as g ",
                                                   in.g.DebugString()));
  }
  for (const auto& [name, t] : {std::pair<const char*, const TensorView&>{"a_log", in.gdn->a_log},
                                {"dt_bias", in.gdn->dt_bias}}) {
    RETURN_IF_ERROR(CheckView(ctx, "Recurrence", name, t, DType::kF32, 1));
    if (t.dim(0) != hg) {
      return absl::InvalidArgumentError(absl::StrCat("Recurrence: GdnPrep ", name, " ",
                                                     t.DebugString(), " must have ", hg,
                                                     " values (g's heads)"));
    }
  }
  if (!(in.gdn->l2_eps >= 0.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Recurrence: GdnPrep l2_eps must be ≥ 0, got ", in.gdn->l2_eps));
  }
  return absl::OkStatus();
}

// GdnPrep's preparation as separate ops, in place (see kernels/recurrence.h).
absl::Status PrepareGdnInPlace(const ExecContext& ctx, const RecurrenceSpec& spec,
                               const RecurrenceInputs& in) {
  const GdnPrep& g = *in.gdn;
  const TensorView &q = in.q, &k = in.k;
  const bool same =
      k.raw() == q.raw() && k.shape() == q.shape() && k.row_stride() == q.row_stride();
  // k's columns right after q's in the same rows (the mixers' layout): one launch for both.
  const bool side_by_side = k.raw() == q.data<float>() + q.dim(1) &&
                            k.row_stride() == q.row_stride() && k.dim(0) == q.dim(0) &&
                            q.row_stride() >= q.dim(1) + k.dim(1);
  if (same || side_by_side) {
    const TensorView both = q.Cols(0, q.dim(1) + (same ? 0 : k.dim(1)));
    RETURN_IF_ERROR(L2Normalize(ctx, both, spec.dk, g.l2_eps, both));
  } else {
    RETURN_IF_ERROR(L2Normalize(ctx, q, spec.dk, g.l2_eps, q));
    RETURN_IF_ERROR(L2Normalize(ctx, k, spec.dk, g.l2_eps, k));
  }
  return GdnGates(ctx, in.g, in.beta, g.a_log, g.dt_bias, g.beta_scale, in.g, in.beta);
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
  if (in.gdn.has_value()) RETURN_IF_ERROR(CheckGdnPrep(ctx, spec, in));
  if (t == 0) return absl::OkStatus();
  // GdnPrep stays folded in only where CUDA's step kernel takes every segment.
  RecurrenceInputs prepared = in;
  if (in.gdn.has_value()) {
    const int64_t min_chunk = ctx.device == Device::kCuda ? cuda::MinChunkTokens(spec, options)
                                                          : int64_t{0};  // the CPU: always apart
    const bool fold = std::all_of(segs.host.begin(), segs.host.end(),
                                  [&](const Segment& s) { return s.num_tokens < min_chunk; });
    if (!fold) {
      RETURN_IF_ERROR(PrepareGdnInPlace(ctx, spec, in));
      prepared.gdn.reset();
    }
  }
  switch (ctx.device) {
    case Device::kCpu:
      return cpu::Recurrence(ctx, spec, prepared, segs, state, z, options, o);
    case Device::kCuda:
      return cuda::Recurrence(ctx, spec, prepared, segs, state, z, options, o);
  }
  return absl::InternalError("unknown device");
}

}  // namespace linfer
