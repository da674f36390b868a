// Added tokens of tokenizer.json ("added_tokens"): found in the text before the model runs,
// leftmost-longest, honouring single_word / lstrip / rstrip; `normalized` tokens are matched in
// normalized text, the others in raw text. Ids follow the reference library's add_tokens.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "models/tokenizer/bpe.h"
#include "models/tokenizer/json_util.h"
#include "models/tokenizer/normalizer.h"

namespace linfer::tokenizer {

struct AddedToken {
  std::string content;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = true;
  bool special = false;
};

// A part of a text: either plain text (id == -1) or one added token.
struct Segment {
  size_t start, end;
  int32_t id;
};

class AddedVocabulary {
 public:
  // Registers the tokens of a tokenizer.json "added_tokens" array (may be null).
  static absl::StatusOr<AddedVocabulary> Build(const Json* added_tokens, const BpeModel& model,
                                               const Normalizer* normalizer);

  // Cuts `text` (raw text when `normalized` is false, normalized text otherwise) into plain
  // segments and added tokens. Empty plain segments are left out.
  void Split(absl::string_view text, bool normalized, std::vector<Segment>* out) const;

  std::optional<int32_t> TokenToId(absl::string_view content) const;
  // The added token with this id, or nullptr.
  const AddedToken* FindId(int32_t id) const;
  bool IsSpecial(absl::string_view content) const { return special_set_.contains(content); }
  bool empty() const { return by_id_.empty(); }
  // The largest added token's id, or -1 when there are none.
  int32_t max_id() const;

 private:
  // A byte trie of token contents with leftmost-longest search.
  struct Trie {
    void Insert(absl::string_view pattern, int32_t id);
    // Longest pattern starting at `pos`: sets *len and returns its id, or -1.
    int32_t LongestAt(absl::string_view text, size_t pos, size_t* len) const;
    absl::flat_hash_map<uint64_t, int32_t> edges;  // (node << 8 | byte) -> child node
    std::vector<int32_t> ids{-1};                  // per node: token id, -1 when none
    bool first_byte[256] = {};
  };

  absl::flat_hash_map<std::string, int32_t> by_content_;
  absl::flat_hash_map<int32_t, AddedToken> by_id_;
  absl::flat_hash_set<std::string> special_set_;
  Trie raw_trie_, normalized_trie_;
};

}  // namespace linfer::tokenizer
