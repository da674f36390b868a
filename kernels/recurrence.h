// The linear-attention recurrence shared by every family, per head, over a sequence of tokens:
//   S_t = Decay_t · S_{t-1} − β_t k_t (k_tᵀ Decay_t S_{t-1}) + β'_t k_t v_tᵀ,   o_t = S_tᵀ
//   (scale·q_t)
// in two exact-arithmetic-equivalent forms: one token at a time (decode) and chunked (prefill).
#pragma once

#include <cstdint>

#include "absl/status/status.h"

namespace linfer {

enum class DecayKind {
  kNone,    // linear attention, DeltaNet
  kScalar,  // one log-decay per token and head: RetNet (fixed), Gated DeltaNet (data-dependent)
  kVector,  // one log-decay per token and key channel: GLA
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

// One head's inputs over T tokens. Row strides are in floats, so q/k/v/o can point into packed
// [T, heads·dim] projection outputs. A stride of 0 repeats the same row for every token.
struct HeadSequence {
  const float* q = nullptr;  // [T, dk]
  int64_t q_stride = 0;
  const float* k = nullptr;  // [T, dk]
  int64_t k_stride = 0;
  const float* v = nullptr;  // [T, dv]
  int64_t v_stride = 0;
  const float* g = nullptr;  // log-decay ≤ 0: [T] (kScalar) or [T, dk] (kVector)
  int64_t g_stride = 0;
  const float* beta = nullptr;  // [T] (delta rule)
  int64_t beta_stride = 0;
  float* o = nullptr;  // [T, dv], written
  int64_t o_stride = 0;
  float* state = nullptr;  // [dk, dv] row-major, read and updated in place
  float* z = nullptr;      // [dk] normaliser state (normalize only), updated in place
};

// Token-by-token form: reads and writes the state once per token. Thread-safe for distinct heads.
void RecurrentForward(const RecurrenceSpec& spec, const HeadSequence& seq, int64_t num_tokens);

// Chunked form (chunk_size tokens at a time, matrix products within a chunk; WY/UT-style forward
// substitution for the delta rule). Equal to RecurrentForward up to f32 rounding.
void ChunkedForward(const RecurrenceSpec& spec, const HeadSequence& seq, int64_t num_tokens,
                    int chunk_size);

}  // namespace linfer
