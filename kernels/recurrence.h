// The linear-attention recurrence shared by every family, per head over a segment's tokens:
//   S_t = Decay_t · S_{t-1} − β_t k_t (k_tᵀ Decay_t S_{t-1}) + β'_t k_t v_tᵀ,   o_t =
//   S_tᵀ(scale·q_t)
// (DecayKind picks Decay_t; the delta rule picks the middle term). One call runs every segment
// and head of a layer, each segment reading and writing its slot of the state in place.
#pragma once

#include <optional>

#include "absl/status/status.h"
#include "kernels/context.h"
#include "kernels/segments.h"

namespace linfer {

enum class DecayKind {
  kNone,    // linear attention, DeltaNet
  kScalar,  // one log-decay per token and head: RetNet (fixed), Gated DeltaNet (data-dependent)
  kVector,  // one log-decay per token and key channel: GLA
};

enum class RecurrenceMode {
  kAuto,       // chunked for segments of ≥ chunk_size tokens, token by token otherwise
  kChunked,    // always the chunked form
  kRecurrent,  // always token by token
};

struct RecurrenceSpec {
  int dk = 0;  // key dim = rows of the state
  int dv = 0;  // value dim = columns of the state
  DecayKind decay = DecayKind::kNone;
  bool delta_rule = false;  // u = β(v − Sᵀk) replaces v (DeltaNet, Gated DeltaNet)
  bool normalize = false;   // linear-attention normaliser: o /= (scale·q·z + 1e-10), z += k
  float scale = 1.0f;       // multiplies q
};

absl::Status ValidateRecurrenceSpec(const RecurrenceSpec& spec);

// Gated DeltaNet's per-token input preparation, folded into the recurrence so that a decode step
// on CUDA runs it inside the step kernel (one launch where there were three): per head
//   q, k ← q / sqrt(Σq² + l2_eps), k / sqrt(Σk² + l2_eps)                (fla's l2norm)
//   g ← −exp(a_log[h]) · softplus(g + dt_bias[h]),  β ← σ(β) · beta_scale  (GdnGates)
// so g and beta hold the raw gate projections (a, b) on entry. Needs the delta rule and a scalar
// decay with g; a_log and dt_bias have g's width [Hg]; beta has g's width. The other paths (the
// CPU, CUDA's chunked segments) prepare q, k, g and beta in place first: after the call their
// contents are unspecified.
struct GdnPrep {
  TensorView a_log;    // [Hg]
  TensorView dt_bias;  // [Hg]
  float beta_scale = 1.0f;
  float l2_eps = 1e-6f;
};

// Packed inputs of all segments, f32, row strides allowed. With H = o.dim(1) / dv output heads,
// head h reads q head h / (H / Hq) where Hq = q.dim(1) / dk, and likewise for k (Hk), v (Hv),
// g (Hg) and beta (Hb): grouped and shared heads are expressed by narrower inputs.
struct RecurrenceInputs {
  TensorView q;                // [T, Hq·dk]
  TensorView k;                // [T, Hk·dk]
  TensorView v;                // [T, Hv·dv]
  TensorView g;                // kScalar: [T, Hg]; kVector: [T, Hg·dk]; log-decay ≤ 0
  TensorView head_log_decay;   // kScalar with empty g: [H] a fixed log-decay per head (RetNet)
  TensorView beta;             // delta rule: [T, Hb]
  std::optional<GdnPrep> gdn;  // q, k, g, beta are raw (see GdnPrep)
};

struct RecurrenceOptions {
  RecurrenceMode mode = RecurrenceMode::kAuto;
  int chunk_size = 64;
};

// state: [slots, H, dk, dv] f32, or bf16 on CUDA (f32 arithmetic, rounded when written back)
// (K-first); z: [slots, H, dk] f32 with normalize, else empty;
// o: [T, H·dv] f32, written. The chunked and token-by-token forms agree to f32 rounding.
absl::Status Recurrence(const ExecContext& ctx, const RecurrenceSpec& spec,
                        const RecurrenceInputs& in, const Segments& segs, const TensorView& state,
                        const TensorView& z, const RecurrenceOptions& options, const TensorView& o);

}  // namespace linfer
