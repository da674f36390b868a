// The segment table of one step: which packed rows belong to which sequence, the state slot the
// sequence reads and writes, and how many tokens it had consumed before this step. Ops that keep
// per-sequence state (the recurrence, short conv, attention) and position-dependent ops (RoPE)
// take it; every other op sees only the packed rows.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "kernels/tensor.h"

namespace linfer {

struct Segment {
  int64_t row_begin = 0;   // first packed row of this sequence in the step
  int64_t num_tokens = 0;  // rows [row_begin, row_begin + num_tokens)
  int64_t position = 0;    // tokens consumed before this step (RoPE offset, KV length)
  int64_t slot = 0;        // index into the [slots, ...] state tensors
};
static_assert(sizeof(Segment) == 4 * sizeof(int64_t), "Segment is uploaded as I64 [n, 4]");

// For models with a paged KV cache: row s lists segment s's KV blocks in position order (position
// p is in block p / block_tokens), padded with −1; I32 [segments, max_blocks].
struct BlockTableView {
  absl::Span<const int32_t> host;
  TensorView device;
  int64_t max_blocks = 0;
  int block_tokens = 0;
};

struct Segments {
  absl::Span<const Segment> host;  // for decisions on the host (and CPU kernels)
  TensorView device;               // the same table on the device: I64 [n, 4] (CPU: host memory)
  BlockTableView blocks = {};      // empty unless the model has paged KV layers
  int64_t total_tokens() const {
    return host.empty() ? 0 : host.back().row_begin + host.back().num_tokens;
  }
};

// A table over host memory (CPU contexts and tests): device aliases host.
inline Segments HostSegments(absl::Span<const Segment> segs) {
  return {segs,
          TensorView(const_cast<Segment*>(segs.data()), DType::kI64,
                     {static_cast<int64_t>(segs.size()), 4}, Device::kCpu),
          {}};
}

}  // namespace linfer
