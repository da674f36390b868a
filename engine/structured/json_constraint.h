// Structured output's token masks: a Grammar's matcher run over the vocabulary's byte strings.
//
// TokenIndex holds every token's bytes once per model (ids without bytes, special and added tokens
// never appear in structured output) as a byte trie, and the "plain" tokens: those a free JSON
// string takes whole from a clean UTF-8 boundary without ending or escaping (most of a
// vocabulary). A mask walks the trie depth first with one matcher copy per level: a prefix the
// matcher refuses prunes every token below it, so a point where few bytes may come (before a key,
// in a number) visits a few hundred nodes, not the vocabulary. Inside a free string the plain
// tokens are allowed by one pass over their lengths, and the walk enters only subtrees holding
// another token.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "engine/structured/json_grammar.h"
#include "engine/structured/json_matcher.h"
#include "engine/token_constraint.h"

namespace linfer::structured {

class TokenIndex {
 public:
  // bytes[id]: the bytes token `id` adds to the text mid-stream; nullopt or empty: never allowed.
  explicit TokenIndex(std::vector<std::optional<std::string>> bytes);

  int64_t vocab() const { return static_cast<int64_t>(bytes_.size()); }
  bool usable(int32_t id) const {
    return id >= 0 && id < vocab() && !bytes_[static_cast<size_t>(id)].empty();
  }
  const std::string& bytes(int32_t id) const { return bytes_[static_cast<size_t>(id)]; }

  // The byte trie: node 0 is the root (the empty prefix); children are contiguous, in byte order.
  struct TrieNode {
    uint8_t byte;                  // the edge from the parent
    bool other_below;              // some token at or below it is not plain
    bool other_below_raw = false;  // some token at or below it is not raw-plain
    int32_t children = 0;          // first child's index
    int32_t num_children = 0;
    int32_t tokens = 0;  // [tokens, tokens + num_tokens) of trie_tokens(): ids ending here
    int32_t num_tokens = 0;
  };
  const std::vector<TrieNode>& trie() const { return trie_; }
  const std::vector<int32_t>& trie_tokens() const { return trie_tokens_; }
  size_t max_length() const { return max_length_; }
  // Plain tokens (see above) and the characters each adds.
  const std::vector<int32_t>& plain() const { return plain_; }
  const std::vector<int32_t>& plain_chars() const { return plain_chars_; }
  bool is_plain(int32_t id) const { return is_plain_[static_cast<size_t>(id)]; }
  bool is_raw_plain(int32_t id) const { return is_raw_plain_[static_cast<size_t>(id)]; }
  // Raw-plain tokens: plain ones without '<', which raw text (a kRawText node, whose terminator
  // starts with '<') takes whole wherever the matcher is InFreeRawText.
  const std::vector<int32_t>& raw_plain() const { return raw_plain_; }
  const std::vector<int32_t>& raw_plain_chars() const { return raw_plain_chars_; }

 private:
  void BuildTrie();

  std::vector<std::string> bytes_;
  std::vector<TrieNode> trie_;
  std::vector<int32_t> trie_tokens_;
  size_t max_length_ = 0;
  std::vector<int32_t> plain_, plain_chars_, raw_plain_, raw_plain_chars_;
  std::vector<bool> is_plain_, is_raw_plain_;
};

class JsonConstraint : public TokenConstraint {
 public:
  JsonConstraint(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenIndex> index);

  bool Allows(int32_t token) override;
  void FillAllowed(absl::Span<uint64_t> allowed) override;
  absl::Status Advance(int32_t token) override;
  bool Complete() const override { return matcher_.Complete(); }
  std::unique_ptr<TokenConstraint> Fresh() const override;

 private:
  std::shared_ptr<const Grammar> grammar_;
  std::shared_ptr<const TokenIndex> index_;
  JsonMatcher matcher_, scratch_;
  // FillAllowed's depth-first walk: the trie nodes on the path (and their next child), and the
  // matcher after each byte of it.
  struct Visit {
    int32_t node, next_child;
  };
  std::vector<Visit> path_;
  std::vector<JsonMatcher> levels_;
  // FillRegex's walk: a trie node, its next child, the DFA's state and characters there.
  struct RegexVisit {
    int32_t node, next_child, state;
    int64_t chars;
  };
  std::vector<RegexVisit> regex_path_;
  // FillRegex's masks of DFA states whose lengths do not matter (no length table), the last few
  // (a permissive pattern stays in one state: a 250k vocabulary's walk took ≈ 17 ms).
  struct RegexMask {
    const RegexDfa* dfa = nullptr;
    int32_t state = 0;
    bool raw_list = false;
    std::vector<uint64_t> bits;
  };
  static constexpr size_t kRegexMasks = 4;
  std::vector<RegexMask> regex_masks_;
  size_t next_regex_mask_ = 0;
  // Sets the plain tokens (raw-plain ones with `raw_list`) that the DFA takes from `state`,
  // walking the trie with the DFA alone (JsonMatcher::InRegex).
  void FillRegex(const RegexDfa& dfa, int32_t state, int64_t chars, bool raw_list, int64_t n,
                 absl::Span<uint64_t> allowed);
};

}  // namespace linfer::structured
