// The layer-level recurrence on the CPU: every (segment, head) pair becomes one HeadSequence
// over packed rows, run in the form the options select, in parallel over OpenMP threads when the
// work pays for waking them (a lone decode token of a small model does not).
#include <cmath>

#include "kernels/cpu/head_recurrence.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/parallel.h"

namespace linfer::cpu {
namespace {

// A packed [T, heads·dim] input: head h' of row r starts at At(r, h').
struct Packed {
  const float* data = nullptr;
  int64_t stride = 0;  // floats between rows
  int64_t dim = 0;
  int64_t share = 1;  // output heads per input head
  const float* At(int64_t row, int64_t out_head) const {
    return data + row * stride + (out_head / share) * dim;
  }
};

Packed MakePacked(const TensorView& t, int64_t dim, int64_t heads) {
  if (t.empty()) return {};
  return {t.data<const float>(), t.row_stride(), dim, heads / (t.dim(1) / dim)};
}

}  // namespace

absl::Status Recurrence(const ExecContext& ctx, const RecurrenceSpec& spec,
                        const RecurrenceInputs& in, const Segments& segs, const TensorView& state,
                        const TensorView& z, const RecurrenceOptions& options,
                        const TensorView& o) {
  const int64_t heads = o.dim(1) / spec.dv, dk = spec.dk, dv = spec.dv;
  const Packed q = MakePacked(in.q, dk, heads), k = MakePacked(in.k, dk, heads);
  const Packed v = MakePacked(in.v, dv, heads);
  const Packed g = MakePacked(in.g, spec.decay == DecayKind::kVector ? dk : 1, heads);
  const Packed beta = MakePacked(in.beta, 1, heads);
  const float* fixed = in.head_log_decay.empty() ? nullptr : in.head_log_decay.data<const float>();
  const int64_t num_segments = static_cast<int64_t>(segs.host.size());
  const int64_t work = 4 * segs.total_tokens() * heads * dk * dv;  // ≈ flops
  ParallelFor<Schedule::kDynamic>(num_segments * heads, work > (int64_t{1} << 21), [&](int64_t i) {
    const Segment& seg = segs.host[i / heads];
    const int64_t h = i % heads, r = seg.row_begin;
    HeadSequence hs;
    hs.q = q.At(r, h);
    hs.q_stride = q.stride;
    hs.k = k.At(r, h);
    hs.k_stride = k.stride;
    hs.v = v.At(r, h);
    hs.v_stride = v.stride;
    hs.o = o.data<float>() + r * o.row_stride() + h * dv;
    hs.o_stride = o.row_stride();
    if (g.data != nullptr) {
      hs.g = g.At(r, h);
      hs.g_stride = g.stride;
    } else if (fixed != nullptr) {
      hs.g = fixed + h;
      hs.g_stride = 0;
    }
    if (beta.data != nullptr) {
      hs.beta = beta.At(r, h);
      hs.beta_stride = beta.stride;
    }
    hs.state = state.data<float>() + (seg.slot * heads + h) * dk * dv;
    if (spec.normalize) hs.z = z.data<float>() + (seg.slot * heads + h) * dk;
    // Batch-invariant: the chunked form's rounding depends on where a segment starts and ends.
    const bool chunked =
        !ctx.batch_invariant &&
        (options.mode == RecurrenceMode::kChunked ||
         (options.mode == RecurrenceMode::kAuto && seg.num_tokens >= options.chunk_size));
    if (chunked) {
      ChunkedForward(spec, hs, seg.num_tokens, options.chunk_size);
    } else {
      RecurrentForward(spec, hs, seg.num_tokens);
    }
  });
  return absl::OkStatus();
}

}  // namespace linfer::cpu
