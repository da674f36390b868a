// Self-describing serialisation of one sequence state (session export/import and the disk tier).
// Layout, little-endian: "LNFRSTAT" | u32 version | u32 dtype (0 = f32) | u64 model fingerprint |
// u64 state floats | i64 position | i32 pending token (−1: none) | u32 reserved | f32 × floats |
// u32 CRC-32 of everything before it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace linfer {

inline constexpr uint32_t kStateBlobVersion = 1;

struct StateSnapshot {
  std::vector<float> data;         // the model's state_floats() values
  int64_t position = 0;            // tokens consumed into the state
  std::optional<int32_t> pending;  // sampled last, not consumed yet (the next turn feeds it)
};

std::string EncodeStateBlob(uint64_t model_fingerprint, absl::Span<const float> data,
                            int64_t position, std::optional<int32_t> pending);

// Refuses (InvalidArgument, naming the problem) a blob that is truncated, not a state blob, of
// an unknown version or dtype, for another model (fingerprint or size), or corrupted (CRC).
absl::StatusOr<StateSnapshot> DecodeStateBlob(absl::string_view blob, uint64_t model_fingerprint,
                                              int64_t state_floats);

}  // namespace linfer
