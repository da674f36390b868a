// What a layer keeps per sequence, described as data (StateSpec): its kind says where it lives
// (in the sequence's slot, or in the paged KV cache beside the slot pool).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "kernels/tensor.h"

namespace linfer {

enum class StateKind {
  kFixed,  // a constant-size tensor per sequence (recurrent state, conv state)
  kRing,   // a fixed-size ring of the last W tokens (sliding-window attention KV)
  kPaged,  // grows with the sequence in blocks outside the slot pool (full-attention KV)
};

struct StateSpec {
  std::string name;  // unique within the layer, e.g. "recurrent", "conv_q"
  Shape shape;       // per sequence
  DType dtype = DType::kF32;
  StateKind kind = StateKind::kFixed;
  int64_t bytes() const { return NumElements(shape) * static_cast<int64_t>(DTypeSize(dtype)); }
};
using LayerStateSpecs = std::vector<StateSpec>;

// Bytes of one sequence's slot-resident state (kFixed and kRing specs).
int64_t SlotStateBytes(absl::Span<const LayerStateSpecs> specs);

}  // namespace linfer
