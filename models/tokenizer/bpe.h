// The BPE model of tokenizer.json ("model": {"type": "BPE"}): vocab, ranked merges applied
// lowest rank first with a heap over a linked list of symbols (O(n log n) per word), unknown
// characters via byte_fallback or unk_token, ignore_merges, subword prefix / word suffix, and a
// cache of recent words.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "models/tokenizer/json_util.h"

namespace linfer::tokenizer {

class BpeModel {
 public:
  // Builds the model from a tokenizer.json "model" object. Refuses other model types.
  static absl::StatusOr<std::unique_ptr<BpeModel>> FromJson(const Json& model);

  // Makes Tokenize take raw bytes, each byte standing for its GPT-2 byte character (used when
  // the pre-tokenizer ends with ByteLevel). Returns false, changing nothing, when the vocab lacks
  // a byte character or a subword prefix / word suffix is set.
  bool EnableByteMode();

  // Appends the ids of one pre-token. Thread-safe.
  absl::Status Tokenize(absl::string_view piece, std::vector<int32_t>* ids) const;

  std::optional<int32_t> TokenToId(absl::string_view token) const;
  // The token of `id`, or nullptr when `id` is not in the vocab.
  const std::string* IdToToken(int32_t id) const;
  // Number of vocab entries (the reference library's get_vocab_size).
  size_t vocab_size() const { return vocab_.size(); }
  // The largest id in the vocab, or -1 when it is empty.
  int32_t max_id() const;

 private:
  struct Merge {
    uint32_t rank;
    int32_t new_id;
  };
  struct Symbol {
    int32_t id;
    int32_t prev, next;
    uint32_t len;  // bytes; 0 once merged into its left neighbour
  };

  BpeModel() = default;
  absl::Status LoadMerges(const Json& merges);
  const Merge* FindMerge(int32_t left, int32_t right) const;
  absl::Status InitialSymbols(absl::string_view piece, std::vector<Symbol>* symbols) const;
  void MergeAll(std::vector<Symbol>* symbols) const;

  absl::flat_hash_map<std::string, int32_t> vocab_;
  // Ids may be sparse and as large as INT32_MAX: a map, never a table sized by the largest id.
  absl::flat_hash_map<int32_t, std::string> id_to_token_;
  absl::flat_hash_map<uint64_t, Merge> merges_;
  std::optional<std::string> unk_token_;
  std::string prefix_, suffix_;  // continuing_subword_prefix, end_of_word_suffix
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  std::array<int32_t, 256> fallback_ids_;  // <0xNN> tokens, -1 when absent

  bool byte_mode_ = false;
  std::array<int32_t, 256> byte_ids_;                     // byte mode: id of each byte character
  absl::flat_hash_map<std::string, int32_t> byte_vocab_;  // byte mode + ignore_merges: raw bytes

  static constexpr size_t kCacheCapacity = 1 << 16;
  static constexpr size_t kMaxCachedLength = 256;
  mutable absl::Mutex cache_mu_;
  mutable absl::flat_hash_map<std::string, std::vector<int32_t>> cache_ ABSL_GUARDED_BY(cache_mu_);
};

}  // namespace linfer::tokenizer
