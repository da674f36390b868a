// The CPU twin's per-head recurrence (one head, one segment), in two exact-arithmetic-equivalent
// forms: one token at a time (decode) and chunked (prefill). kernels/cpu/recurrence.cc runs them
// over every segment and head of a layer.
#pragma once

#include <cstdint>

#include "kernels/recurrence.h"

namespace linfer::cpu {

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

}  // namespace linfer::cpu
