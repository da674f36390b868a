// Self-describing serialisation of one sequence state (session export/import and the disk tier).
// Version 2, little-endian:
//   "LNFRSTAT" | u32 version (2) | u32 header bytes H | header: H bytes of JSON | zero padding to
//   a multiple of 8 | payload: the sections' bytes back to back | u32 CRC-32 of everything before.
// The JSON header names the model (fingerprint), the position and pending token, every section
// (name "layers.<l>.<spec>", dtype F32, shape, offset, bytes: every section is f32 in a blob,
// whatever the state's dtype in memory, e.g. bf16 recurrent states on CUDA, which are widened on
// export and rounded back on import) and, for the disk tier, the session's
// id, owner tag and use counters; a session's text tail (its last token ids, for the next turn's
// detokenizer) when it has one. Hybrid models add one section per full-attention layer after
// the slot-resident ones: its keys and values of positions [0, position), [position, 2, kv_heads,
// head_dim] f32. Version 1 blobs (one f32 section of the whole state) still decode.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "models/state.h"

namespace linfer {

inline constexpr uint32_t kStateBlobVersion = 2;
// The most ids a snapshot's text tail holds (a blob with more is refused).
inline constexpr size_t kMaxTextTail = 64;

// What a blob must match: the model it belongs to.
struct BlobModel {
  uint64_t fingerprint = 0;
  const std::vector<LayerStateSpecs>* specs = nullptr;
  int64_t vocab_size = 0;
  int64_t max_position = int64_t{1} << 40;  // positions beyond are refused
};

struct SessionMeta {
  std::string id;
  std::string owner_tag;  // a hash of the owner (never the API key itself)
  int64_t turns = 0;
  int64_t created_unix = 0, last_used_unix = 0;
};

struct StateSnapshot {
  HostState state;                 // slot-resident sections, KV (kv_tokens == position), position
  std::optional<int32_t> pending;  // sampled last, not consumed yet (the next turn feeds it)
  std::optional<SessionMeta> session;
  // The last ids in the state (SessionStore::Session::text_tail; empty: none kept, as in blobs
  // written before it was).
  std::vector<int32_t> text_tail;
};

// The largest blob `model` can have (its state, the KV of max_position tokens, the header).
int64_t MaxStateBlobBytes(const BlobModel& model);

// Internal error when the snapshot's byte counts are not the model's (a bug, never user input).
absl::StatusOr<std::string> EncodeStateBlob(const BlobModel& model, const StateSnapshot& snapshot);

// Refuses (InvalidArgument, naming the problem) a blob that is truncated, not a state blob, of an
// unknown version, corrupted (CRC), malformed (header fields, section table), for another model
// (fingerprint, sections), with a position or pending token out of range, or with non-finite
// state values.
absl::StatusOr<StateSnapshot> DecodeStateBlob(absl::string_view blob, const BlobModel& model);

}  // namespace linfer
