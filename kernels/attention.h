// Causal softmax attention over a per-sequence KV cache (the hybrid models' attention layers):
// each segment's new keys and values are written into its cache, then every new query attends
// to the cached keys of its own sequence up to its position (a sliding window keeps the last
// `window`). Grouped-query heads: query head h reads kv head h / (Hq / Hkv).
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "kernels/context.h"
#include "kernels/segments.h"

namespace linfer {

struct AttentionParams {
  int q_heads = 0, kv_heads = 0, head_dim = 0;
  float scale = 1.0f;  // multiplies q·k (usually head_dim^-½)
  int window = 0;  // > 0: a query at position p sees keys p − window < j ≤ p; 0: all j ≤ p
};

// Where a layer's keys and values live.
struct KvCacheRef {
  enum class Kind {
    // Fixed-size blocks: storage [blocks, block_tokens, 2, Hkv, D], addressed through the step's
    // block tables (Segments::blocks).
    kPaged,
    // A ring of the last `window` positions in the sequence's slot: storage
    // [slots, 2, window, Hkv, D]; position p lives at index p mod window.
    kRing,
  };
  Kind kind = Kind::kPaged;
  TensorView storage;  // f32 or bf16 (every key and value read as stored: rounded to bf16)
};

// q [T, Hq·D], k and v [T, Hkv·D] (f32, row strides allowed): the new tokens' projections, q and
// k already normed and rotated. Writes k, v at positions [s.position, s.position + n) of each
// segment's cache, then out [T, Hq·D] (f32) = softmax(scale · q Kᵀ) V per head over the keys the
// query may see. The cache must hold every position the queries see (a ring: window ≥ 1 and its
// storage width = window; paged: blocks for every position up to the segment's end). With bf16
// storage every key and value a query reads is the stored (rounded) one — this step's own too —
// so a prompt gives the same output in one step or several; the arithmetic stays f32.
absl::Status Attention(const ExecContext& ctx, const TensorView& q, const TensorView& k,
                       const TensorView& v, const Segments& segs, const KvCacheRef& kv,
                       const AttentionParams& p, const TensorView& out);

}  // namespace linfer
